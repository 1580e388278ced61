"""Broker ingest, start-up time and idle memory, each beside its yardstick (issue 4).

    python bench/broker_ingest.py [--records 3000000] [--repeat 3] [--dir PATH]

Three measurements, every process a real child on 127.0.0.1 with its data in a temp dir:
  - ingest: a controller and one broker; a topic of 1 partition (created first, replication
    factor 1); confluent-kafka (the fastest client) produces --records records of 1 KiB with
    acks=1, linger.ms=5, batch.size=1 MiB, no compression, then flushes. MB/s of acknowledged
    value bytes over the elapsed time. Yardstick, in the same run: the raw limit, a plain uvloop
    TCP server in a child process that writes what it receives to a file (fsync every second in
    an executor, like the broker's default flush), fed by a plain socket sending the same bytes
    in chunks of batch.size as fast as it can. Goal: the broker at 50% of the raw limit or more.
  - start-up: seconds from launching `epochlog cluster up --brokers 3` to the first produce that
    confluent-kafka sees acknowledged (acks=all, to a topic the produce auto-creates with
    replication factor 1). Goal: at most 2 s.
  - idle memory: VmRSS of the controller and of each broker of that cluster after ~2 s idle.
    Goal: at most 60 MB per broker.
Figures vary from run to run on a shared 2-core machine (the producer and the broker share it);
compare the ratio, a median of --repeat rounds.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import select
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import confluent_kafka

RECORD_BYTES = 1024
BATCH_BYTES = 1 << 20  # the producer's batch.size and the raw client's chunk
LINGER_MS = 5
FSYNC_INTERVAL_S = 1.0  # the broker's default log_flush_interval_ms
WAIT_S = 60.0  # bound on any one wait: a start, a flush, a transfer, a stop
IDLE_S = 2.0
STARTUP_GOAL_S = 2.0
RSS_GOAL_MB = 60.0
RATIO_GOAL = 0.5
TICKS_PER_S = os.sysconf("SC_CLK_TCK")


# ------------------------------------------------------------------------------ processes
def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a live process, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S  # utime, stime


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024 / 1e6
    raise RuntimeError(f"no VmRSS for pid {pid}")


def read_line(proc: subprocess.Popen[bytes], timeout_s: float) -> str:
    """One line of a child's stdout, waiting at most timeout_s for it."""
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
    if not ready:
        raise RuntimeError(f"no line from pid {proc.pid} within {timeout_s:.0f}s")
    return proc.stdout.readline().decode().strip()


def stop(proc: subprocess.Popen[bytes], timeout_s: float = WAIT_S) -> None:
    """SIGTERM, a bounded wait, then SIGKILL."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# ------------------------------------------------------------------- raw limit: the server
class RawSink(asyncio.Protocol):
    """Writes every chunk it receives to fd; on EOF answers with the byte count (8 bytes)."""

    def __init__(self, fd: int, done: asyncio.Future[None]) -> None:
        self.fd = fd
        self.done = done
        self.received = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        os.write(self.fd, data)  # on the loop, as the broker's append (os.pwrite) is
        self.received += len(data)

    def eof_received(self) -> bool:
        assert self.transport is not None
        self.transport.write(self.received.to_bytes(8, "big"))
        self.transport.close()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(None)


async def serve_raw(path: str) -> None:
    """One connection's bytes to path; prints the port it listens on, then serves one client."""
    loop = asyncio.get_running_loop()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    done: asyncio.Future[None] = loop.create_future()
    server = await loop.create_server(lambda: RawSink(fd, done), "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)

    async def fsync_every_second() -> None:
        while True:
            await asyncio.sleep(FSYNC_INTERVAL_S)
            await loop.run_in_executor(None, os.fsync, fd)

    syncing = asyncio.ensure_future(fsync_every_second())
    try:
        await asyncio.wait_for(done, WAIT_S * 5)
    finally:
        syncing.cancel()
        server.close()
        os.fsync(fd)
        os.close(fd)


# ------------------------------------------------------------------- raw limit: the client
def raw_ingest(root: Path, total_bytes: int) -> tuple[float, float, float]:
    """(MB/s, server CPU s, elapsed s) of total_bytes sent in BATCH_BYTES chunks to a raw sink."""
    os.sync()  # start with no dirty pages left by the measurement before
    path = root / "raw.bin"
    server = subprocess.Popen([sys.executable, __file__, "--serve-raw", str(path)],
                              stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
    try:
        port = int(read_line(server, WAIT_S))
        chunk = os.urandom(RECORD_BYTES) * (BATCH_BYTES // RECORD_BYTES)
        chunks, rest = divmod(total_bytes, len(chunk))
        with socket.create_connection(("127.0.0.1", port), timeout=WAIT_S) as sock:
            cpu_before = cpu_seconds(server.pid)
            start = time.perf_counter()
            for _ in range(chunks):
                sock.sendall(chunk)
            sock.sendall(chunk[:rest])
            sock.shutdown(socket.SHUT_WR)
            answer = sock.recv(8)
            elapsed = time.perf_counter() - start
            cpu = cpu_seconds(server.pid) - cpu_before
        received = int.from_bytes(answer, "big")
        assert received == total_bytes, f"raw server got {received} of {total_bytes} bytes"
        server.wait(WAIT_S)
        return total_bytes / elapsed / 1e6, cpu, elapsed
    finally:
        stop(server)
        path.unlink(missing_ok=True)


# ---------------------------------------------------------------------- the broker's ingest
def broker_ingest(root: Path, records: int) -> tuple[float, float, float, float, int]:
    """(MB/s, broker CPU s, producer CPU s, elapsed s, log bytes on disk) of records produced
    to one broker."""
    repo = str(Path(__file__).resolve().parent.parent)
    if repo not in sys.path:  # tests/ is not installed; its Cluster helper is reused here:
        sys.path.insert(0, repo)  # real children on free ports, every wait bounded
    from tests.broker.cluster import Cluster

    os.sync()
    with Cluster(root / "cluster", brokers=1) as cluster:
        cluster.create_topic("ingest", partitions=1, replication_factor=1)
        producer = confluent_kafka.Producer({
            "bootstrap.servers": cluster.bootstrap, "acks": 1, "linger.ms": LINGER_MS,
            "batch.size": BATCH_BYTES, "compression.type": "none",
            "message.timeout.ms": int(WAIT_S * 1000)})
        value = os.urandom(RECORD_BYTES)
        acked = [0, 0]  # bytes, errors

        def on_delivery(err: Any, msg: Any) -> None:
            if err is None:
                acked[0] += RECORD_BYTES
            else:
                acked[1] += 1

        producer.produce("ingest", value, partition=0, on_delivery=on_delivery)  # warm-up:
        assert producer.flush(WAIT_S) == 0, "warm-up produce not acknowledged"  # connections
        acked[0] = 0
        pid = cluster.broker(1).proc.pid  # type: ignore[union-attr]
        broker_cpu, producer_cpu = cpu_seconds(pid), time.process_time()
        start = time.perf_counter()
        for _ in range(records):
            while True:
                try:
                    producer.produce("ingest", value, partition=0, on_delivery=on_delivery)
                    break
                except BufferError:  # the producer's queue is full: let acks drain it
                    producer.poll(0.01)
        left = producer.flush(WAIT_S)
        elapsed = time.perf_counter() - start
        broker_cpu = cpu_seconds(pid) - broker_cpu
        producer_cpu = time.process_time() - producer_cpu
        assert left == 0 and acked[1] == 0, f"{left} unacknowledged, {acked[1]} failed"
        assert acked[0] == records * RECORD_BYTES
        del producer  # closed before the broker stops, so it does not log the disconnect
    # The acks were not empty words: the broker's log holds every record (and its framing).
    log_bytes = sum(p.stat().st_size for p in (root / "cluster").rglob("*.log"))
    assert log_bytes >= acked[0], f"broker log holds {log_bytes} of {acked[0]} bytes acked"
    shutil.rmtree(root)
    return acked[0] / elapsed / 1e6, broker_cpu, producer_cpu, elapsed, log_bytes


# ------------------------------------------------------------- start-up and idle memory
class ClusterUp:
    """`epochlog cluster up` as a child; a thread collects its output lines."""

    def __init__(self, data_dir: Path, port_base: int, brokers: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "epochlog", "cluster", "up", "--brokers", str(brokers),
             "--data-dir", str(data_dir), "--port-base", str(port_base)],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
        self.lines: list[tuple[float, str]] = []  # (perf_counter when read, line)
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            with self._changed:
                self.lines.append((time.perf_counter(), raw.decode(errors="replace").rstrip()))
                self._changed.notify_all()

    def pids(self) -> dict[str, int]:
        """'controller' / 'broker N' -> pid, from the "started ... (pid N)" lines so far."""
        with self._changed:
            found = (re.search(r"started (.+) \(pid (\d+)\)", line) for _, line in self.lines)
            return {m.group(1): int(m.group(2)) for m in found if m}

    def wait_line(self, pattern: str, timeout_s: float = WAIT_S) -> float:
        """When (perf_counter) the first line matching pattern was read; a bounded wait."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                for at, line in self.lines:
                    if re.search(pattern, line):
                        return at
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise RuntimeError(f"`epochlog cluster up`: no line matching {pattern!r}:\n"
                                       + self.output())
                self._changed.wait(min(left, 0.5))

    def output(self, lines_max: int = 40) -> str:
        with self._changed:
            return "\n".join(line for _, line in self.lines[-lines_max:])

    def stop(self) -> None:
        """SIGTERM (it stops its children in order), a bounded wait; then kill what is left."""
        children = self.pids()
        stop(self.proc, WAIT_S)
        for pid in children.values():
            try:
                os.kill(pid, signal.SIGKILL)  # only if the parent failed to stop it
            except ProcessLookupError:
                pass


def first_ack(bootstrap: str, start: float, cluster: ClusterUp) -> float:
    """Seconds from start until a produce (acks=all, auto-created topic) is acknowledged."""
    problems: list[str] = []  # the producer's errors, shown only if no ack ever comes
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap, "acks": "all",
        # Retry the not-yet-listening brokers every 50-100 ms rather than backing off to 10 s.
        "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 100, "retry.backoff.ms": 50,
        "message.timeout.ms": int(WAIT_S * 1000), "log_level": 0,
        # "all brokers down" is expected while they start: kept, not printed.
        "error_cb": lambda err: problems.append(str(err))})
    acked_at: list[float] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is None:
            acked_at.append(time.perf_counter())
        else:
            problems.append(f"delivery failed: {err}")

    deadline = time.monotonic() + WAIT_S
    while not acked_at and time.monotonic() < deadline and cluster.proc.poll() is None:
        producer.produce("startup", b"first", on_delivery=on_delivery)
        while producer.flush(0.1) and time.monotonic() < deadline and cluster.proc.poll() is None:
            pass  # short slices: a cluster that exits on its own ends the wait at once
    if not acked_at:
        why = (f"`epochlog cluster up` exited with {cluster.proc.returncode}"
               if cluster.proc.poll() is not None else f"none within {WAIT_S:.0f}s")
        raise RuntimeError(f"no produce acknowledged: {why}; producer: {problems[-5:]}; "
                           "cluster output:\n" + cluster.output())
    return acked_at[0] - start


def startup_and_memory(root: Path, brokers: int) -> tuple[float, float, dict[str, float]]:
    """(seconds to first ack, seconds to "cluster up" line, name -> idle RSS MB)."""
    os.sync()  # the ingest rounds' writeback must not slow the controller's fsyncs here
    if str(Path(__file__).resolve().parent.parent) not in sys.path:  # tests/ is not installed
        sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from tests.test_cluster_up import free_port_base  # the ports `cluster up` takes

    port_base = free_port_base()
    bootstrap = ",".join(f"127.0.0.1:{port_base + i}" for i in range(brokers))
    start = time.perf_counter()
    cluster = ClusterUp(root / "up", port_base, brokers)
    try:
        to_ack = first_ack(bootstrap, start, cluster)
        to_up = cluster.wait_line(r"^cluster up in") - start
        time.sleep(IDLE_S)
        memory = {name: rss_mb(pid) for name, pid in cluster.pids().items()}
        memory["epochlog cluster up (parent)"] = rss_mb(cluster.proc.pid)
        return to_ack, to_up, memory
    finally:
        cluster.stop()


# ------------------------------------------------------------------------------- report
def verdict(met: bool) -> str:
    return "met" if met else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=3_000_000,
                        help="1 KiB records to produce, and bytes for the raw limit "
                             "(default 3,000,000: ~3 GB, ~5-10 s each here)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="rounds of raw and broker ingest, interleaved; medians printed "
                             "(the raw limit varies a lot with the disk's writeback here)")
    parser.add_argument("--brokers", type=int, default=3, help="brokers for the start-up run")
    parser.add_argument("--dir", default=None, help="where to put data (default: a temp dir)")
    parser.add_argument("--serve-raw", metavar="PATH", help=argparse.SUPPRESS)  # the raw child
    args = parser.parse_args()
    if args.serve_raw:
        import uvloop
        uvloop.run(serve_raw(args.serve_raw))
        return
    root = Path(tempfile.mkdtemp(prefix="broker_ingest_", dir=args.dir))
    try:
        total = args.records * RECORD_BYTES
        raws, brokers = [], []
        for i in range(args.repeat):
            raws.append(raw_ingest(root, total))
            brokers.append(broker_ingest(root / f"round-{i}", args.records))
        raw_mb_s = statistics.median(r[0] for r in raws)
        broker_mb_s, broker_cpu, producer_cpu, elapsed, log_bytes = sorted(brokers)[
            len(brokers) // 2]
        _, raw_cpu, raw_elapsed = sorted(raws)[len(raws) // 2]
        ratio = broker_mb_s / raw_mb_s
        print(f"ingest: {args.records:,} records of {RECORD_BYTES} B ({total / 1e6:,.0f} MB), "
              f"one broker, acks=1, median of {args.repeat}:")
        print(f"  {'raw uvloop server -> file (yardstick)':<44} {raw_mb_s:8.1f} MB/s   "
              f"server CPU {100 * raw_cpu / raw_elapsed:3.0f}% of a core")
        print(f"  {'epochlog broker, confluent-kafka producer':<44} {broker_mb_s:8.1f} MB/s   "
              f"{100 * ratio:5.1f}% of raw  (goal >= {100 * RATIO_GOAL:.0f}%: "
              f"{verdict(ratio >= RATIO_GOAL)})")
        print(f"  {'':<44} {'':>13}   broker CPU {100 * broker_cpu / elapsed:3.0f}% of a core, "
              f"producer CPU {100 * producer_cpu / elapsed:3.0f}%")
        print(f"  {'':<44} {'':>13}   broker log {log_bytes / 1e6:,.0f} MB on disk "
              f"(+{100 * (log_bytes / total - 1):.1f}% record and batch framing)")

        to_ack, to_up, memory = startup_and_memory(root, args.brokers)
        if args.repeat > 1:
            print(f"  {'each round, raw / broker MB/s':<44} " + ", ".join(
                f"{r[0]:.0f} / {b[0]:.0f}" for r, b in zip(raws, brokers)))
        print(f"start-up: `epochlog cluster up --brokers {args.brokers}`:")
        print(f"  {'launch -> `cluster up in` printed':<44} {to_up:8.2f} s")
        print(f"  {'launch -> first acknowledged produce':<44} {to_ack:8.2f} s      "
              f"(goal <= {STARTUP_GOAL_S:g} s: {verdict(to_ack <= STARTUP_GOAL_S)})")
        print(f"idle memory (VmRSS after {IDLE_S:g} s idle):")
        for name, mb in memory.items():
            goal = (f"(goal <= {RSS_GOAL_MB:g} MB: {verdict(mb <= RSS_GOAL_MB)})"
                    if name.startswith("broker") else "(no goal)")
            print(f"  {name:<44} {mb:8.1f} MB     {goal}")
        print("notes:")
        print("  - raw vs broker is partly apples to oranges: the raw server does no protocol work"
              " (no framing,\n    parsing, CRC check, offsets, index, response) and its client"
              f" sends {BATCH_BYTES >> 20} MiB chunks with no\n    per-record cost, while the"
              " producer builds record batches (librdkafka, in C threads) and the\n    Python side"
              " calls produce() once per record; both share this machine's cores.")
        print("  - both fsync once a second in an executor thread and count bytes as done when"
              " written to the\n    page cache (acks=1 does not wait for fsync).")
        print("  - MB/s counts record values (1 KiB each), the same bytes the raw client sends;"
              " the broker\n    also receives and writes the framing shown above. Ingest uses"
              " a topic created first\n    (1 partition, replication factor 1).")
        print("  - start-up: the produce is sent at launch and retried; its topic is auto-created"
              " by the\n    producer's Metadata request (replication factor 1); the producer's"
              " reconnect backoff is\n    capped at 100 ms so its retries do not dominate.")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
