"""Replacing segments by a cleaned one, so that a crash at any moment leaves, per range of
offsets, either the old segments or the cleaned one, never a mix (Kafka's suffixes and rules).

Steps of `swap_in`, after the cleaner has written `<base>.log.cleaned` (and its `.index.cleaned`,
`.timeindex.cleaned`, `.txnindex.cleaned`) and fsynced them:
1. rename the four `.cleaned` files to `.swap` (the `.log` last), fsync the folder: from here on
   the swap is decided;
2. rename every file of the replaced segments to `<name>.deleted`;
3. rename the `.swap` files to their final names (the `.log` last), fsync the folder;
4. the caller closes the old segments and unlinks the `.deleted` files it was given.

Recovery on open (`complete_interrupted_swaps`), before the Log reads the folder:
- a `<base>.log.swap` was decided: the segment files whose base offset lies in [base, the swap's
  next offset) are removed, the `.log.swap` takes its final name, and its offset and time indexes
  are rebuilt (the bases returned must be recovered, not loaded). Its `.txnindex` cannot be
  rebuilt from the segment alone (a transaction may start in an earlier segment), so it is kept:
  a `.txnindex.swap` takes its final name; without one, step 3 had renamed it already (the `.log`
  goes last in steps 1 and 3, so a `.log.swap` means that step 1 made the `.txnindex.swap`).
  A `.deleted` whose swap cannot be read at all is put back instead (nothing decided can be
  lost);
- `.cleaned`, `.deleted` and index `.swap` files left over are strays the Log removes.
The cleaned segment always ends where the replaced ones ended (the cleaner keeps their last
batch, emptied if need be), so [base, next offset) is exactly the range that was replaced.
"""

from __future__ import annotations

import logging
import os
import re

from epochlog.protocol.batch import BATCH_HEADER_BYTES, CorruptBatch, read_header

from .checkpoints import fsync_dir
from .segment import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, segment_file_name
from .txn_index import TXN_INDEX_SUFFIX

CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
DELETED_SUFFIX = ".deleted"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX, TXN_INDEX_SUFFIX)
_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")
_LOG_SWAP = re.compile(r"^(\d{20})\.log\.swap$")

log = logging.getLogger("epochlog.storage")


def segment_paths(directory: str, base_offset: int, suffix: str = "") -> list[str]:
    """The .log, .index, .timeindex and .txnindex paths of a segment, with suffix added."""
    return [os.path.join(directory, segment_file_name(base_offset, s) + suffix)
            for s in SEGMENT_SUFFIXES]


def remove_cleaned(directory: str, base_offset: int) -> None:
    for path in segment_paths(directory, base_offset, CLEANED_SUFFIX):
        if os.path.exists(path):
            os.unlink(path)


def swap_in(directory: str, new_base: int, old_bases: list[int]) -> list[str]:
    """Steps 1-3 above; the `.deleted` paths, for the caller to unlink once it closed the old
    segments."""
    cleaned = segment_paths(directory, new_base, CLEANED_SUFFIX)
    swapped = segment_paths(directory, new_base, SWAP_SUFFIX)
    final = segment_paths(directory, new_base)
    for source, target in list(zip(cleaned, swapped, strict=True))[::-1]:  # the .log last
        os.rename(source, target)
    fsync_dir(directory)
    deleted = []
    for base in old_bases:
        for path in segment_paths(directory, base):
            if os.path.exists(path):
                os.rename(path, path + DELETED_SUFFIX)
                deleted.append(path + DELETED_SUFFIX)
    for source, target in list(zip(swapped, final, strict=True))[::-1]:  # the .log last
        os.rename(source, target)
    fsync_dir(directory)
    return deleted


def complete_interrupted_swaps(directory: str) -> set[int]:
    """Finish every decided swap in directory (see the module notes); the bases swapped in."""
    done = set()
    for name in sorted(os.listdir(directory)):
        match = _LOG_SWAP.match(name)
        if match is None:
            continue
        base = int(match.group(1))
        path = os.path.join(directory, name)
        next_offset = _next_offset(path, base)
        if next_offset is None:
            log.error("%s: unreadable swap file; keeping the segments it was to replace", path)
            os.unlink(path)
            _restore_deleted(directory)
            continue
        for other in os.listdir(directory):
            found = _SEGMENT_FILE.match(other)
            if found and base <= int(found.group(1)) < next_offset:
                os.unlink(os.path.join(directory, other))
        _, index_swap, time_swap, txn_swap = segment_paths(directory, base, SWAP_SUFFIX)
        for index in (index_swap, time_swap):
            if os.path.exists(index):
                os.unlink(index)  # rebuilt from the log: one path, whatever step was reached
        if os.path.exists(txn_swap):  # else step 3 gave it its final name already
            os.replace(txn_swap, os.path.join(directory,
                                              segment_file_name(base, TXN_INDEX_SUFFIX)))
        os.rename(path, os.path.join(directory, segment_file_name(base, LOG_SUFFIX)))
        log.warning("%s: completed an interrupted swap of cleaned segment %d (offsets up to %d)",
                    directory, base, next_offset)
        done.add(base)
    if done:
        fsync_dir(directory)
    return done


def _next_offset(path: str, base: int) -> int | None:
    """The next offset after the last batch of a swap file (written and fsynced whole before it
    was named .swap); None if it holds no readable batch."""
    next_offset, position = None, 0
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        while position + BATCH_HEADER_BYTES <= size:
            f.seek(position)
            try:
                header = read_header(f.read(BATCH_HEADER_BYTES))
            except CorruptBatch:
                break
            if header.base_offset < base or position + header.size > size:
                break
            next_offset = header.next_offset
            position += header.size
    return next_offset


def _restore_deleted(directory: str) -> None:
    for name in os.listdir(directory):
        if name.endswith(DELETED_SUFFIX):
            target = os.path.join(directory, name[:-len(DELETED_SUFFIX)])
            if not os.path.exists(target):
                os.rename(os.path.join(directory, name), target)
