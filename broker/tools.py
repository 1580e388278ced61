"""`epochlog dump-log PATH` and `epochlog dump-checkpoint PATH`: look inside the on-disk files.

dump-log prints one JSON line per batch of a segment `.log` file (or of every segment in a partition
folder): base_offset, last_offset, leader_epoch, producer_id, producer_epoch, base_sequence,
record_count, crc_valid, position, size; `--records` adds the records. A torn tail ends the listing
with a line {"torn_tail_bytes": N}; a header that does not parse ends it with {"corrupt": ...}.
It reads the file as it is, in chunks, and changes nothing.

dump-checkpoint prints a checkpoint file as JSON (version and entries); a malformed one gives the
reason on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from typing import Any

DUMP_CHUNK_BYTES_MAX = 8 << 20


def add_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("dump-log", help="print the batches of a segment .log file as JSON")
    p.add_argument("path", help="a segment .log file, or a partition folder")
    p.add_argument("--records", action="store_true", help="also print every record")
    p.set_defaults(func=run_dump_log)
    p = subparsers.add_parser("dump-checkpoint", help="print a checkpoint file as JSON")
    p.add_argument("path", help="a leader-epoch or offset checkpoint file")
    p.set_defaults(func=run_dump_checkpoint)


def _text(value: bytes | None) -> str | None:
    if value is None:
        return None
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(value).decode("ascii")


def _batch_line(buf: bytes, pos: int, position: int, with_records: bool) -> dict[str, Any]:
    from protocol.batch import CorruptBatch, crc_valid, read_header

    header = read_header(buf, pos)
    line: dict[str, Any] = {
        "base_offset": header.base_offset, "last_offset": header.last_offset,
        "leader_epoch": header.partition_leader_epoch, "producer_id": header.producer_id,
        "producer_epoch": header.producer_epoch, "base_sequence": header.base_sequence,
        "record_count": header.record_count, "crc_valid": crc_valid(buf, pos),
        "position": position, "size": header.size,
    }
    if with_records:
        from protocol.records import decode_batch
        try:
            _, records = decode_batch(buf, pos)
            line["records"] = [{"offset": r.offset, "timestamp": r.timestamp,
                                "key": _text(r.key), "value": _text(r.value),
                                "headers": [[k, _text(v)] for k, v in r.headers]}
                               for r in records]
        except CorruptBatch as e:
            line["records_error"] = str(e)
    return line


def dump_segment(path: str, with_records: bool, out: Any) -> int:
    """Print a segment's batches; 0 if every batch is whole with a valid CRC, else 1."""
    from protocol.batch import BATCH_HEADER_BYTES, CorruptBatch, read_header

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
    return status


def run_dump_log(args: argparse.Namespace) -> int:
    path = args.path
    if os.path.isdir(path):
        paths = sorted(os.path.join(path, n) for n in os.listdir(path) if n.endswith(".log"))
    else:
        paths = [path]
    status = 0
    for each in paths:
        try:
            status |= dump_segment(each, args.records, sys.stdout)
        except BrokenPipeError:
            raise
        except OSError as e:
            print(f"epochlog dump-log: {e}", file=sys.stderr)
            status = 1
    return status


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
                      "entries": [dict(zip(keys, e)) for e in entries]}))
    return 0
