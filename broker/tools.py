"""`epochlog dump-log PATH`, `epochlog dump-checkpoint PATH` and `epochlog truncations DATA_DIR`:
look inside the on-disk files.

dump-log prints one JSON line per batch of a segment `.log` file (or of every segment in a partition
folder): base_offset, last_offset, leader_epoch, producer_id, producer_epoch, base_sequence,
record_count, crc_valid, position, size; `--records` adds the records. A torn tail ends the listing
with a line {"torn_tail_bytes": N}; a header that does not parse ends it with {"corrupt": ...}.
It reads the file as it is, in chunks, and changes nothing. For big segments (PROGRESS_BYTES_MIN
and more) it shows a progress bar on stderr when stderr is a terminal, so stdout stays JSON.

dump-checkpoint prints a checkpoint file as JSON (version and entries); a malformed one gives the
reason on stderr and exit code 1.

truncations prints, one JSON line each, the cuts below the high watermark a broker recorded in its
data dir (storage/truncations.py): acknowledged records lost, with partition and offset range.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

DUMP_CHUNK_BYTES_MAX = 8 << 20
PROGRESS_BYTES_MIN = 64 << 20  # smaller dumps finish before a bar is worth drawing


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("dump-log", help="print the batches of a segment .log file as JSON")
    p.add_argument("path", help="a segment .log file, or a partition folder")
    p.add_argument("--records", action="store_true", help="also print every record")
    p.set_defaults(func=run_dump_log)
    p = subparsers.add_parser("dump-checkpoint", help="print a checkpoint file as JSON")
    p.add_argument("path", help="a leader-epoch or offset checkpoint file")
    p.set_defaults(func=run_dump_checkpoint)
    p = subparsers.add_parser("truncations", help="list the committed records a broker's "
                              "replicas lost (cuts below the high watermark)")
    p.add_argument("data_dir", help="a broker's data dir")
    p.set_defaults(func=run_truncations)


def run_truncations(args: argparse.Namespace) -> int:
    from .storage.truncations import read_truncations

    if not os.path.isdir(args.data_dir):
        print(f"epochlog truncations: {args.data_dir}: not a folder", file=sys.stderr)
        return 1
    try:
        events = read_truncations(args.data_dir)
    except (OSError, ValueError) as e:
        print(f"epochlog truncations: {e}", file=sys.stderr)
        return 1
    for event in events:
        print(json.dumps(event))
    print(f"{len(events)} truncations of committed records, "
          f"{sum(e['end_offset'] - e['start_offset'] for e in events)} "
          "offsets", file=sys.stderr)
    return 0


def _text(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(value).decode("ascii")


def _batch_line(buf: bytes, pos: int, position: int, with_records: bool) -> dict[str, Any]:
    from epochlog.protocol.batch import CorruptBatch, crc_valid, read_header
    from epochlog.protocol.compression import codec_name

    header = read_header(buf, pos)
    line: dict[str, Any] = {
        "base_offset": header.base_offset, "last_offset": header.last_offset,
        "leader_epoch": header.partition_leader_epoch, "producer_id": header.producer_id,
        "producer_epoch": header.producer_epoch, "base_sequence": header.base_sequence,
        "record_count": header.record_count, "crc_valid": crc_valid(buf, pos),
        "position": position, "size": header.size,
        "compression": codec_name(header.compression),
        "timestamp_type": "LogAppendTime" if header.timestamp_type else "CreateTime",
        "max_timestamp": header.max_timestamp,
    }
    if with_records:
        from epochlog.protocol.records import decode_batch
        try:
            _, records = decode_batch(buf, pos)
            line["records"] = [{"offset": r.offset, "timestamp": r.timestamp,
                                "key": _text(r.key), "value": _text(r.value),
                                "headers": [[k, _text(v)] for k, v in r.headers]}
                               for r in records]
        except CorruptBatch as e:
            line["records_error"] = str(e)
    return line


def dump_segment(path: str, with_records: bool, out: Any,
                 advance: Callable[[int], None] = lambda _: None) -> int:
    """Print a segment's batches; 0 if every batch is whole with a valid CRC, else 1.
    advance(n) is told of every n bytes read."""
    from epochlog.protocol.batch import BATCH_HEADER_BYTES, CorruptBatch, read_header

    status = 0
    with open(path, "rb") as f:
        file_bytes = os.fstat(f.fileno()).st_size
        position = 0
        while position < file_bytes:
            if file_bytes - position < BATCH_HEADER_BYTES:
                out.write(json.dumps({"position": position,
                                      "torn_tail_bytes": file_bytes - position}) + "\n")
                return 1
            head = os.pread(f.fileno(), BATCH_HEADER_BYTES, position)
            try:
                header = read_header(head)
            except CorruptBatch as e:
                out.write(json.dumps({"position": position, "corrupt": str(e)}) + "\n")
                return 1
            if position + header.size > file_bytes:
                out.write(json.dumps({"position": position,
                                      "torn_tail_bytes": file_bytes - position}) + "\n")
                return 1
            size = max(header.size, min(DUMP_CHUNK_BYTES_MAX, file_bytes - position))
            chunk = os.pread(f.fileno(), size, position)
            pos = 0
            while len(chunk) - pos >= BATCH_HEADER_BYTES:
                header = read_header(chunk, pos)
                if len(chunk) - pos < header.size:
                    break
                line = _batch_line(chunk, pos, position + pos, with_records)
                status |= 0 if line["crc_valid"] else 1
                out.write(json.dumps(line) + "\n")
                pos += header.size
            position += pos
            advance(pos)
    return status


def run_dump_log(args: argparse.Namespace) -> int:
    path = args.path
    if os.path.isdir(path):
        paths = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".log"))
    else:
        paths = [path]
    status = 0
    with _progress(paths) as advance:
        for each in paths:
            try:
                status |= dump_segment(each, args.records, sys.stdout, advance)
            except BrokenPipeError:
                raise
            except OSError as e:
                print(f"epochlog dump-log: {e}", file=sys.stderr)
                status = 1
    return status


@contextmanager
def _progress(paths: list[str]) -> Iterator[Callable[[int], None]]:
    """A rich progress bar of bytes read, on stderr, for big dumps to a terminal."""
    total = sum(os.path.getsize(p) for p in paths if os.path.isfile(p))
    if total < PROGRESS_BYTES_MIN or not sys.stderr.isatty():
        yield lambda _: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    with Progress(TextColumn("dump-log"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
                  TimeRemainingColumn(), console=Console(stderr=True), transient=True,
                  redirect_stdout=False, redirect_stderr=False) as bar:
        task = bar.add_task("dump-log", total=total)
        yield lambda n: bar.advance(task, n)


def run_dump_checkpoint(args: argparse.Namespace) -> int:
    from .storage.checkpoints import parse_int, read_checkpoint
    from .storage.errors import CorruptCheckpoint

    def entry(fields: list[str]) -> list[Any]:
        if len(fields) == 2:
            return [parse_int(fields[0], 0, 2**31 - 1), parse_int(fields[1], 0)]
        if len(fields) == 3 and fields[0]:
            return [fields[0], parse_int(fields[1], 0, 2**31 - 1), parse_int(fields[2], 0)]
        raise ValueError("expected 'epoch start_offset' or 'topic partition offset'")

    try:
        entries = read_checkpoint(args.path, entry)
    except (CorruptCheckpoint, OSError) as e:
        print(f"epochlog dump-checkpoint: {e}", file=sys.stderr)
        return 1
    kind = "leader-epoch" if entries and len(entries[0]) == 2 else "offsets"
    if any(len(e) != len(entries[0]) for e in entries):
        print(f"epochlog dump-checkpoint: {args.path}: mixed entry kinds", file=sys.stderr)
        return 1
    keys = ("epoch", "start_offset") if kind == "leader-epoch" else ("topic", "partition", "offset")
    print(json.dumps({"path": args.path, "version": 0, "kind": kind,
                      "entries": [dict(zip(keys, e, strict=True)) for e in entries]}))
    return 0
