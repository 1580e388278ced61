"""Checkpoint files, in Kafka's text layout, and the one way we write any small state file.

Layout: a line `0` (the format version), a line with the entry count, then one entry per line,
every line ending in `\\n`. Offset checkpoints (`replication-offset-checkpoint`,
`recovery-point-offset-checkpoint`, `log-start-offset-checkpoint`) hold `topic partition offset`;
the `leader-epoch-checkpoint` holds `epoch start_offset` (see epoch_cache.py).

Rules: a write goes to `<name>.tmp`, is fsynced, renamed over the old file, and the folder is
fsynced, so a reader sees the old file or the new one, whole. A reader refuses (CorruptCheckpoint
naming the file) anything that is not exactly that layout: wrong version, a count that does not
match the lines, a bad number, or a last line without its newline (a file cut short mid-line would
otherwise read as a smaller number).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from typing import TypeVar

from .errors import CorruptCheckpoint

CHECKPOINT_VERSION = 0
CHECKPOINT_BYTES_MAX = 64 << 20  # far above any real checkpoint; a bigger file is not one of ours
TMP_SUFFIX = ".tmp"

HIGH_WATERMARK_FILE = "replication-offset-checkpoint"
RECOVERY_POINT_FILE = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_FILE = "log-start-offset-checkpoint"

T = TypeVar("T")
TopicPartition = tuple[str, int]


def fsync_dir(path: str) -> None:
    """Make a create, rename or unlink inside folder `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(path: str, data: bytes) -> None:
    """Replace the file at path with data: temp file, fsync, rename, fsync the folder. If the
    temp file cannot be written (a full disk), it is removed and the file at path is untouched."""
    tmp = path + TMP_SUFFIX
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except OSError:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def format_checkpoint(entries: Iterable[str]) -> bytes:
    lines = list(entries)
    return "".join(f"{line}\n" for line in [str(CHECKPOINT_VERSION), str(len(lines)), *lines]
                   ).encode("ascii")


def parse_checkpoint(path: str, data: bytes, parse_entry: Callable[[list[str]], T]) -> list[T]:
    """Entries of a checkpoint's bytes; CorruptCheckpoint(path, ...) unless the layout is exact."""
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise CorruptCheckpoint(path, "not ASCII text") from None
    if not text.endswith("\n"):
        raise CorruptCheckpoint(path, "cut short: the last line has no newline")
    lines = text[:-1].split("\n")
    if lines[0] != str(CHECKPOINT_VERSION):
        raise CorruptCheckpoint(path, f"unsupported version line {lines[0]!r}")
    if len(lines) < 2 or not _is_count(lines[1]):
        raise CorruptCheckpoint(path, "missing or bad entry count")
    count = int(lines[1])
    if len(lines) - 2 != count:
        raise CorruptCheckpoint(path, f"expected {count} entries, found {len(lines) - 2}")
    entries = []
    for number, line in enumerate(lines[2:], start=3):
        try:
            entries.append(parse_entry(line.split(" ")))
        except ValueError as e:
            raise CorruptCheckpoint(path, f"line {number} {line!r}: {e}") from None
    return entries


def read_checkpoint(path: str, parse_entry: Callable[[list[str]], T]) -> list[T]:
    with open(path, "rb") as f:
        data = f.read(CHECKPOINT_BYTES_MAX + 1)
    if len(data) > CHECKPOINT_BYTES_MAX:
        raise CorruptCheckpoint(path, f"larger than {CHECKPOINT_BYTES_MAX} bytes")
    return parse_checkpoint(path, data, parse_entry)


def _is_count(text: str) -> bool:
    return text.isdigit() and text.isascii()


def parse_int(text: str, minimum: int, maximum: int = 2**63 - 1) -> int:
    """A decimal integer in [minimum, maximum], written as Kafka writes it (no '+', no spaces)."""
    if not (text.isascii() and (text.isdigit() or (text[:1] == "-" and text[1:].isdigit()))):
        raise ValueError(f"{text!r} is not an integer")
    value = int(text)
    if not minimum <= value <= maximum:
        raise ValueError(f"{value} is outside [{minimum}, {maximum}]")
    return value


def _parse_offset_entry(fields: list[str]) -> tuple[TopicPartition, int]:
    if len(fields) != 3 or not fields[0]:
        raise ValueError("expected 'topic partition offset'")
    topic, partition, offset = fields
    return (topic, parse_int(partition, 0, 2**31 - 1)), parse_int(offset, 0)


def read_offsets(path: str) -> dict[TopicPartition, int]:
    """An offset checkpoint as {(topic, partition): offset}; CorruptCheckpoint if malformed."""
    entries = read_checkpoint(path, _parse_offset_entry)
    offsets = dict(entries)
    if len(offsets) != len(entries):
        raise CorruptCheckpoint(path, "a partition appears twice")
    return offsets


def format_offsets(offsets: dict[TopicPartition, int]) -> bytes:
    return format_checkpoint(f"{topic} {partition} {offset}"
                             for (topic, partition), offset in sorted(offsets.items()))


def write_offsets(path: str, offsets: dict[TopicPartition, int]) -> None:
    write_atomically(path, format_offsets(offsets))
