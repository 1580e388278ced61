"""What the command-line tools share about the terminal: interrupts, stdin lines, progress.

- `Interrupts`: the first SIGINT or SIGTERM asks the tool to stop cleanly (its `requested` event:
  stop reading, deliver or commit what is in hand within a bound, say so, exit 130); a second one
  ends the process at once, as a user pressing Ctrl-C twice means.
- `StdinLines`: stdin's lines as they arrive, read on a daemon thread in chunks (a blocked read
  of a terminal or pipe must not keep the process from exiting, and the loop must not block on
  it); at most STDIN_CHUNKS_QUEUED_MAX chunks wait for the tool, so memory stays bounded however
  large the input.
- `progress`: a `rich` progress bar on stderr for long work (a known amount of bytes or records),
  only when stderr is a terminal; otherwise nothing, so pipes and logs stay clean.
"""

from __future__ import annotations

import asyncio
import os
import signal
import stat
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import IO, Any, Protocol

STDIN_CHUNK_BYTES = 64 * 1024
STDIN_CHUNKS_QUEUED_MAX = 16
LINE_BYTES_MAX = 64 * 1024 * 1024  # a line longer than this is refused, not buffered forever
EXIT_INTERRUPTED = 130


class Interrupts:
    """SIGINT/SIGTERM handlers on the running loop for the duration of a `with` block."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self, what: str) -> None:
        self.what = what  # what a first interrupt will do, for the line it prints
        self.requested = asyncio.Event()
        self._loop = asyncio.get_running_loop()

    def __enter__(self) -> Interrupts:
        for sig in self.SIGNALS:
            self._loop.add_signal_handler(sig, self._on_signal, sig)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        for sig in self.SIGNALS:
            self._loop.remove_signal_handler(sig)

    def _on_signal(self, sig: int) -> None:
        if self.requested.is_set():
            print("epochlog: interrupted again; quitting at once", file=sys.stderr, flush=True)
            os._exit(EXIT_INTERRUPTED)
        print(f"epochlog: {signal.Signals(sig).name}: {self.what} (again to quit at once)",
              file=sys.stderr, flush=True)
        self.requested.set()


class StdinLines:
    """The lines of a binary stream (without their newline), read on a daemon thread."""

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._loop = asyncio.get_running_loop()
        self._chunks: asyncio.Queue[bytes] = asyncio.Queue()
        self._room = threading.Semaphore(STDIN_CHUNKS_QUEUED_MAX)
        self.bytes_read = 0
        self.total_bytes = _regular_file_size(stream)  # None for a terminal or a pipe
        threading.Thread(target=self._read, name="epochlog-stdin", daemon=True).start()

    def _read(self) -> None:
        # os.read on the descriptor, not the buffered object: a daemon thread blocked inside a
        # BufferedReader holds its lock, and the interpreter aborts at exit trying to take it.
        fd = self._stream.fileno()
        while True:
            self._room.acquire()
            try:
                chunk = os.read(fd, STDIN_CHUNK_BYTES)
            except OSError:
                chunk = b""
            self._loop.call_soon_threadsafe(self._chunks.put_nowait, chunk)
            if not chunk:
                return

    async def lines(self, *stops: asyncio.Event) -> AsyncIterator[bytes]:
        """Each line as it is complete; the last one even without a newline. Ends at the end
        of input or once any of stops is set."""
        tail = b""
        while not any(stop.is_set() for stop in stops):
            chunk = await _first(self._chunks.get(), stops)
            if chunk is None:
                return
            self._room.release()
            if not chunk:
                break
            self.bytes_read += len(chunk)
            *complete, tail = (tail + chunk).split(b"\n")
            if len(tail) > LINE_BYTES_MAX:
                raise ValueError(f"a line of stdin is longer than {LINE_BYTES_MAX} bytes")
            for line in complete:
                yield line.removesuffix(b"\r")
        if tail and not any(stop.is_set() for stop in stops):
            yield tail.removesuffix(b"\r")


async def _first(get: Any, stops: tuple[asyncio.Event, ...]) -> bytes | None:
    """The awaited value of get, or None if one of stops is set first."""
    getter = asyncio.ensure_future(get)
    stoppers = [asyncio.ensure_future(stop.wait()) for stop in stops]
    try:
        await asyncio.wait({getter, *stoppers}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in stoppers:
            waiter.cancel()
    if getter.done():
        result: bytes = getter.result()
        return result
    getter.cancel()
    return None


def _regular_file_size(stream: IO[bytes]) -> int | None:
    try:
        info = os.fstat(stream.fileno())
    except (OSError, ValueError, AttributeError):
        return None
    return info.st_size if stat.S_ISREG(info.st_mode) else None


class Progress(Protocol):
    def advance(self, amount: int) -> None: ...


class _NoProgress:
    def advance(self, amount: int) -> None:
        pass


class _RichProgress:
    def __init__(self, progress: Any, task: Any) -> None:
        self._progress, self._task = progress, task

    def advance(self, amount: int) -> None:
        self._progress.advance(self._task, amount)


@contextmanager
def progress(description: str, total: int | None, unit: str = "bytes") -> Iterator[Progress]:
    """A progress bar on stderr while the block runs, if stderr is a terminal and the total is
    known; `advance(n)` as work is done."""
    if total is None or not sys.stderr.isatty():
        yield _NoProgress()
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    counts = (DownloadColumn(), TransferSpeedColumn()) if unit == "bytes" else \
        (MofNCompleteColumn(),)
    with Progress(TextColumn("{task.description}"), BarColumn(), *counts,
                  TimeRemainingColumn(), console=Console(stderr=True), transient=True,
                  redirect_stdout=False, redirect_stderr=False) as bar:
        yield _RichProgress(bar, bar.add_task(description, total=total))
