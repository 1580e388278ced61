"""`OpenFiles`: the log files' descriptors, a bounded cache; files open on use and the least
recently used close first, so the descriptors held grow with the partitions in use, not with all
the partitions hosted (descriptors.py says how big it is).

Theory of operation. Segments and their indexes name their files by path and ask for a
descriptor at each use (`fd(path)`), never keeping one across a call that may open another file:
a descriptor handed out stays valid only until the next `fd`, `dup` or `close` of this cache.
Opening a file beyond `files_max` closes the least recently used clean one first, and
`close_idle` (the data dir's tick) closes the clean files unused for FILE_IDLE_MS_MAX: an idle
partition (followers' fetches at its end read no file) holds no descriptor.

Durability. Data written through a descriptor lives in the page cache of the file, not of the
descriptor: closing it loses nothing, and a later fsync through any descriptor of the file makes
it durable. What is not safe is to close a file written since its last fsync and then let the
kernel drop the file's state with a write-back error nobody saw. So a file written through the
cache (`mark_dirty`) is pinned: never closed by eviction until a flush has taken it over, by
fsyncing it (`fsync`) or by duplicating its descriptor (`dup`, for an fsync on another thread,
storage's FlushJob, whose failure stops the broker as before). Index files are not pinned (their
writers do not mark them): they are checked at every load and rebuilt from the log when wrong.
Pinned files may take the cache past `files_max`; with the broker's default flush interval they
are the files written in the last second or so.

Running out anyway (sockets took the rest, another process filled the system's table): an open
that fails with EMFILE/ENFILE closes clean files (half of them) and tries once more; failing
again, it raises the OSError, which the storage classifies (descriptors.py: not a disk failure).

One thread: the broker's event loop. The cleaner's executor thread builds its `.cleaned`
segments on a cache of its own.
"""

from __future__ import annotations

import os
from collections import OrderedDict

from ..clock import Clock, monotonic_ms
from .descriptors import is_exhaustion

FILES_MAX_DEFAULT = 4096  # a Log or Segment built without a cache gets one of this size
EVICT_SCAN_MAX = 64  # clean files looked for past pinned ones per eviction
FILE_IDLE_MS_MAX = 30_000  # a clean file unused this long is closed by close_idle


class OpenFiles:
    def __init__(self, files_max: int = FILES_MAX_DEFAULT, clock: Clock = monotonic_ms) -> None:
        assert files_max >= 1, files_max
        self.files_max = files_max
        self.clock = clock
        self._open: OrderedDict[str, int] = OrderedDict()  # least recently used first
        # when each open file was last asked for, to the clock read at the latest open or
        # close_idle (a use is not worth a clock read: a file may close up to one tick early)
        self._used_ms: dict[str, int] = {}
        self._now_ms = clock()
        self._dirty: set[str] = set()
        self.opens_total = 0
        self.evictions_total = 0

    def __len__(self) -> int:
        return len(self._open)

    def __contains__(self, path: object) -> bool:
        return path in self._open

    @property
    def pinned(self) -> int:
        return len(self._dirty)

    def fd(self, path: str, *, create: bool = False) -> int:
        """A descriptor of path (read-write), opening it if needed; create: make the file if it
        is missing (else FileNotFoundError). Valid until this cache's next call."""
        found = self._open.get(path)
        if found is not None:  # the hot path: a lookup and two stores, no clock read
            self._open.move_to_end(path)
            self._used_ms[path] = self._now_ms
            return found
        while len(self._open) >= self.files_max and self._evict_one():
            pass
        flags = os.O_RDWR | (os.O_CREAT if create else 0)
        try:
            opened = os.open(path, flags, 0o644)
        except OSError as exc:
            if not is_exhaustion(exc) or not self._evict_half():
                raise
            opened = os.open(path, flags, 0o644)  # once more; OSError goes to the caller
        self._now_ms = self.clock()
        self._used_ms[path] = self._now_ms
        self._open[path] = opened
        self.opens_total += 1
        return opened

    def mark_dirty(self, path: str) -> None:
        """path was written through its descriptor: pinned until fsync or dup. (A file no
        longer open has nothing to pin: a flush fsyncs it through a new descriptor.)"""
        if path in self._open:
            self._dirty.add(path)

    def fsync(self, path: str) -> None:
        """fsync path (opening it if needed); it is clean from then on."""
        os.fsync(self.fd(path))
        self._dirty.discard(path)

    def dup(self, path: str) -> int:
        """A duplicate of path's descriptor for the caller to fsync and close (on any thread);
        the file is clean for this cache from then on (the duplicate carries its fsync)."""
        duplicate = os.dup(self.fd(path))
        self._dirty.discard(path)
        return duplicate

    def close(self, path: str) -> None:
        """Close path if it is open (its owner closes or deletes the file)."""
        found = self._open.pop(path, None)
        self._dirty.discard(path)
        self._used_ms.pop(path, None)
        if found is not None:
            os.close(found)

    def close_all(self) -> None:
        for path in list(self._open):
            self.close(path)

    def close_idle(self, idle_ms_max: int = FILE_IDLE_MS_MAX) -> int:
        """Close the clean files unused for idle_ms_max (oldest first: the LRU order is the
        order of last use); how many."""
        self._now_ms = self.clock()
        since_ms = self._now_ms - idle_ms_max
        idle = []
        for path in self._open:
            if self._used_ms[path] > since_ms:
                break
            if path not in self._dirty:
                idle.append(path)
        for path in idle:
            self.close(path)
        return len(idle)

    def _evict_one(self) -> bool:
        """Close the least recently used clean file; False if none is found (all pinned)."""
        for scanned, path in enumerate(self._open):
            if scanned >= EVICT_SCAN_MAX:
                break
            if path not in self._dirty:
                self.close(path)
                self.evictions_total += 1
                return True
        for path in [p for p in list(self._open)[:EVICT_SCAN_MAX] if p in self._dirty]:
            self._open.move_to_end(path)  # pinned: needed by the next flush anyway
        return False

    def _evict_half(self) -> bool:
        """Out of descriptors: close half of the clean files; False if there were none."""
        clean = [p for p in self._open if p not in self._dirty]
        for path in clean[:max(1, len(clean) // 2)]:
            self.close(path)
            self.evictions_total += 1
        return bool(clean)
