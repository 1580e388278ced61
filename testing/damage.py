"""Seeded damage to a stopped broker's data dir: what a bad disk, a torn write or a lost page does.

`damage(data_dir, topic, rng)` picks one kind of damage and one file of the topic's partitions
(or a checkpoint at the top of the data dir), applies it, fsyncs it and says what it did, naming
the file and the bytes. The same files and the same `random.Random` state give the same damage.

Kinds, and what the broker must make of each (docs/storage-faults.md):
- `flip`: 1 to 8 bits flipped at random places of a segment (a failing medium). A batch whose CRC
  fails is found at open (after a crash, past the recovery point) or on read, and the replica is
  cut before it and repaired from a healthy one;
- `zero-page`: a 4 KiB page of a segment zeroed (a lost page): the same, over a whole page;
- `truncate`: a segment cut short at a random length (a torn write, or a lost tail);
- `index`: an offset or time index with bytes overwritten or cut short, or an offset index
  entry moved inside its batch (in range and in order, so an open cannot see it): indexes are
  rebuilt when they do not agree with their segment, at open or when a read through them fails
  where the batches are whole;
- `epoch-checkpoint`: a partition's `leader-epoch-checkpoint` cut short, zeroed or filled with
  garbage: a checkpoint that does not parse is rebuilt from the batches;
- `offset-checkpoint`: one of the data dir's offset checkpoints (high watermarks, recovery
  points, log start offsets) cut short, zeroed or filled with garbage: read as absent, and the
  safe choice made (recover whole logs; the leader re-learns the high watermark).
- `snapshot`: a producer state snapshot (`.snapshot`) with bits flipped or cut short: its CRC
  fails, it is deleted and the state comes from an older one or from the batches;
- `txnindex`: an aborted-transactions index (`.txnindex`) cut inside an entry or with an
  entry's version overwritten: its entries are rebuilt from the batches at open. Kafka's
  format has no checksum, so only damage the checks can see is done (as for checkpoints).

Checkpoints are damaged so that they do not parse, never into other plausible numbers: Kafka's
text checkpoints carry no checksum (nor do ours, which keep its layout), so a digit changed into
another digit cannot be told from the truth, by Kafka or by us.
"""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import BinaryIO

KINDS = ("flip", "zero-page", "truncate", "index", "epoch-checkpoint", "offset-checkpoint",
         "snapshot", "txnindex")
OFFSET_CHECKPOINTS = ("replication-offset-checkpoint", "recovery-point-offset-checkpoint",
                      "log-start-offset-checkpoint")
PAGE = 4096
TXN_ENTRY_BYTES = 34
FLIPS_MAX = 8


def damage(data_dir: Path, topic: str, rng: random.Random, kind: str | None = None) -> str:
    """Damage one file of a stopped broker's data dir; what was done, naming the file. `kind`
    (one of KINDS) or one chosen by rng; a kind with no file to damage here (an empty segment,
    no checkpoint yet) falls back to the next kind that has one."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"damage kind {kind!r}: one of {', '.join(KINDS)}")
    first = KINDS.index(kind) if kind is not None else rng.randrange(len(KINDS))
    for i in range(len(KINDS)):
        chosen = KINDS[(first + i) % len(KINDS)]
        files = _candidates(data_dir, topic, chosen)
        if files:
            return _apply(chosen, rng.choice(files), rng)
    return f"nothing to damage in {data_dir} (no file of {topic!r} with data)"


def _partition_dirs(data_dir: Path, topic: str) -> list[Path]:
    prefix = f"{topic}-"
    return sorted(p for p in data_dir.iterdir()
                  if p.is_dir() and p.name.startswith(prefix) and p.name[len(prefix):].isdigit())


def _candidates(data_dir: Path, topic: str, kind: str) -> list[Path]:
    if kind == "offset-checkpoint":
        return [data_dir / name for name in OFFSET_CHECKPOINTS if (data_dir / name).is_file()]
    found: list[Path] = []
    for d in _partition_dirs(data_dir, topic):
        if kind == "epoch-checkpoint":
            found += [f for f in [d / "leader-epoch-checkpoint"] if f.is_file()]
        elif kind in ("snapshot", "txnindex"):
            found += [f for f in sorted(d.glob(f"*.{kind}")) if f.stat().st_size > 0]
        elif kind == "index":
            found += [f for f in sorted(d.glob("*.index")) + sorted(d.glob("*.timeindex"))
                      if f.stat().st_size > 0]
        else:
            found += [f for f in sorted(d.glob("*.log")) if f.stat().st_size > 0]
    return found


def _apply(kind: str, path: Path, rng: random.Random) -> str:
    size = path.stat().st_size
    if kind == "txnindex":
        return _damage_txn_index(path, size, rng)
    if kind == "snapshot" and rng.random() < 0.5:
        kind = "truncate"
    if kind in ("flip", "snapshot"):
        spots = sorted({rng.randrange(size) for _ in range(rng.randint(1, FLIPS_MAX))})
        with open(path, "r+b") as f:
            for spot in spots:
                f.seek(spot)
                byte = f.read(1)[0]
                f.seek(spot)
                f.write(bytes([byte ^ (1 << rng.randrange(8))]))
            _sync(f)
        return f"flipped a bit at byte(s) {', '.join(map(str, spots))} of {path}"
    if kind == "zero-page":
        start = rng.randrange(max(1, (size + PAGE - 1) // PAGE)) * PAGE
        length = min(PAGE, size - start)
        _write_at(path, start, bytes(length))
        return f"zeroed bytes {start}-{start + length - 1} of {path}"
    if kind == "index" and path.suffix == ".index" and size >= 16 and rng.random() < 0.4:
        return _shift_entry(path, size, rng)
    if kind == "truncate" or (kind == "index" and rng.random() < 0.5):
        keep = rng.randrange(size)
        with open(path, "r+b") as f:
            f.truncate(keep)
            _sync(f)
        return f"cut {path} from {size} to {keep} bytes"
    if kind == "index":
        spot = rng.randrange(size)
        length = min(rng.randint(1, 8), size - spot)
        _write_at(path, spot, rng.randbytes(length))
        return f"overwrote bytes {spot}-{spot + length - 1} of {path} with random bytes"
    # a checkpoint: never into other plausible numbers (see the module's notes)
    how = rng.choice(("cut", "zeroed", "garbage"))
    if how == "cut":
        # never inside a number, which would leave a smaller one that parses: the cut ends at
        # a separator, so that a line is left incomplete or the entry count does not match
        data = path.read_bytes()[:rng.randrange(size)].rstrip(b"0123456789")
    elif how == "zeroed":
        data = bytes(size)
    else:
        data = b"\xff garbage \x00" * max(1, size // 12)
    with open(path, "wb") as f:
        f.write(data)
        _sync(f)
    return f"{how} {path} (was {size} bytes)"


def _damage_txn_index(path: Path, size: int, rng: random.Random) -> str:
    """A cut inside an entry, or an entry's version (its first two bytes) made non-zero."""
    entries = size // TXN_ENTRY_BYTES
    if entries == 0 or rng.random() < 0.5:
        keep = rng.randrange(size)
        keep += 1 if keep % TXN_ENTRY_BYTES == 0 else 0
        with open(path, "r+b") as f:
            f.truncate(keep)
            _sync(f)
        return f"cut {path} from {size} to {keep} bytes (inside an entry)"
    i = rng.randrange(entries)
    _write_at(path, i * TXN_ENTRY_BYTES, rng.randint(1, 0xFFFF).to_bytes(2, "big"))
    return f"overwrote the version of entry {i} of {path}"


def _shift_entry(path: Path, size: int, rng: random.Random) -> str:
    """One offset index entry (4-byte relative offset, 4-byte position) moved a few bytes on,
    inside its batch, still in range and in order: the damage an open's checks cannot see."""
    data = path.read_bytes()
    entries = size // 8
    i = rng.randrange(entries)
    position = int.from_bytes(data[i * 8 + 4:i * 8 + 8], "big")
    limit = int.from_bytes(data[i * 8 + 12:i * 8 + 16], "big") if i + 1 < entries else None
    shift = rng.randint(1, 7)
    if limit is not None and position + shift >= limit:
        shift = max(0, limit - position - 1)
    _write_at(path, i * 8 + 4, (position + shift).to_bytes(4, "big"))
    return f"overwrote entry {i} of {path}: position {position} moved to {position + shift}"


def _write_at(path: Path, position: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(position)
        f.write(data)
        _sync(f)


def _sync(f: BinaryIO) -> None:
    f.flush()
    os.fsync(f.fileno())

