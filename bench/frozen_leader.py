"""Produce through a frozen leader: `epochlog produce` beside kcat, at the same moment, in one run.

    python bench/frozen_leader.py [--rounds 3] [--records 20] [--baseline-python PATH]
                                  [--connected] [--paused-first] [--dir PATH]

A controller and three brokers as real children on 127.0.0.1 (epochlog.testing's Cluster,
default settings, so the failover takes what a user's cluster takes: the broker session). Each
round makes a topic of one partition, replication factor 3, pauses its leader (SIGSTOP), and at
once starts both producers on it, each with --records lines on stdin and acks=all, every other
setting at its default, bootstrapped from the two live brokers (as a user whose bootstrap server
is up):

    seq 1 N | epochlog produce TOPIC --acks all --bootstrap-server LIVE
    seq 1 N | kcat -P -b LIVE -t TOPIC -X acks=all

--connected starts the producers before the pause instead, each delivering one record through
the leader first, so what they send after the pause goes out on a connection that was working
and gets no answer: the request timeout (30 s) is the bound, unless the client gives the silent
connection up once metadata names the new leader (ours does).
kcat cannot take part (its stdin reader waits for a full buffer or the end of input), so
librdkafka takes part through confluent-kafka, reading stdin line by line (`rdkafka`).

--paused-first puts the paused broker first in the producers' bootstrap list (then the live
ones): a list of every broker, in an order that happens to start with the frozen one.

--baseline-python adds a third producer at the same moment: `epochlog produce` of another build
(the python of a venv with another checkout installed, e.g. main's), with that build's defaults.

Printed per round: when the controller named a new leader (the failover), and each tool's time
to exit after the pause, the CPU time it used (a sender that polls while it waits shows there),
its exit code and the records the partition holds from it. The leader is resumed and the
partition fully replicated again before the next round. The goal (issue 29) is that ours costs
no more than the failover plus a few seconds; figures vary from run to run on a shared 2-core
machine, so compare ours with kcat's of the same round.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from epochlog.testing.cluster import Cluster  # noqa: E402

# librdkafka (confluent-kafka) producing each line of stdin as it arrives, acks=all, every other
# setting at its default: kcat's own stdin reader waits for a full buffer or the end.
RDKAFKA_LINES = """
import os, sys
from confluent_kafka import Producer
producer = Producer({"bootstrap.servers": sys.argv[1], "acks": "all"})
failed = []
def report(err, msg):
    if err is not None:
        failed.append(err)
        print(err, file=sys.stderr)
rest = b""
while chunk := os.read(0, 65536):
    *lines, rest = (rest + chunk).split(b"\\n")
    for line in lines:
        producer.produce(sys.argv[2], line, on_delivery=report)
    producer.poll(0)
producer.flush()
sys.exit(1 if failed else 0)
"""
TOOL_S_MAX = 200.0  # past both tools' delivery timeouts (ours 120 s): a hang is reported
FAILOVER_POLL_S = 0.05
FAILOVER_S_MAX = 60.0


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--records", type=int, default=20)
    parser.add_argument("--baseline-python", help="also run `epochlog produce` of the build "
                        "this interpreter has installed")
    parser.add_argument("--connected", action="store_true", help="each producer delivers a "
                        "record through the leader before it is paused")
    parser.add_argument("--paused-first", action="store_true", help="the bootstrap list "
                        "starts with the paused broker (as a user's list of every broker may)")
    parser.add_argument("--dir", type=Path, help="the cluster's data (default: a temp folder)")
    return parser.parse_args()


class Run:
    """One tool's process: launched, maybe given a first record, then the rest, timed from
    `origin` to its exit."""

    def __init__(self, name: str, command: list[str], cwd: Path) -> None:
        self.name = name
        self.command = command
        self.cwd = cwd
        self.took_s = float("nan")
        self.cpu_s = float("nan")
        self.code: int | None = None
        self.err = ""
        self.child: subprocess.Popen[bytes] | None = None
        self.thread: threading.Thread | None = None

    def launch(self, first: bytes = b"") -> None:
        self.child = subprocess.Popen(self.command, stdin=subprocess.PIPE,
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                      cwd=self.cwd)
        if first:
            assert self.child.stdin is not None
            self.child.stdin.write(first)
            self.child.stdin.flush()

    def finish(self, origin: float, lines: bytes) -> None:
        """Write the rest and close stdin, in the background; join() waits for the exit."""
        self.thread = threading.Thread(target=self._finish, args=(origin, lines), daemon=True)
        self.thread.start()

    def join(self) -> None:
        assert self.thread is not None
        self.thread.join()

    def _finish(self, origin: float, lines: bytes) -> None:
        child = self.child
        assert child is not None and child.stdin is not None and child.stderr is not None
        killer = threading.Timer(TOOL_S_MAX, child.kill)
        killer.start()
        try:
            child.stdin.write(lines)
            child.stdin.close()
            _, status, usage = os.wait4(child.pid, 0)  # its own CPU time, not other children's
        finally:
            killer.cancel()
        self.took_s = time.monotonic() - origin
        self.cpu_s = usage.ru_utime + usage.ru_stime
        self.code = child.returncode = os.waitstatus_to_exitcode(status)
        self.err = child.stderr.read().decode(errors="replace")
        child.stderr.close()


def failover_s(c: Cluster, topic: str, frozen: int, origin: float) -> float:
    """Seconds from origin until the controller names a leader other than `frozen`."""
    deadline = origin + FAILOVER_S_MAX
    while time.monotonic() < deadline:
        p = c.partitions(topic).get(0)
        if p is not None and p.leader_id not in (-1, frozen):
            return time.monotonic() - origin
        time.sleep(FAILOVER_POLL_S)
    return float("nan")


def wait_held(c: Cluster, topic: str, live: str, values: set[bytes]) -> None:
    deadline = time.monotonic() + FAILOVER_S_MAX
    while held(c, topic, live, values) < len(values):
        if time.monotonic() > deadline:
            sys.exit(f"{topic} holds {held(c, topic, live, values)} of {sorted(values)} only")
        time.sleep(0.2)


def held(c: Cluster, topic: str, live: str, values: set[bytes]) -> int:
    """How many of `values` the partition holds (read from its start with kcat)."""
    out = subprocess.run(["kcat", "-C", "-b", live, "-t", topic, "-p", "0", "-o", "beginning",
                          "-e", "-q", "-X", "fetch.wait.max.ms=100"], capture_output=True,
                         timeout=60).stdout
    return sum(1 for line in out.splitlines() if line in values)


def one_round(c: Cluster, index: int, records: int, baseline: str | None,
              connected: bool, paused_first: bool) -> dict[str, float]:
    topic = f"frozen-{index}"
    c.create_topic(topic, partitions=1, replication_factor=3)
    c.wait_fully_replicated(topic)
    frozen = c.leader_of(topic, 0)
    live = ",".join(c.brokers[b].address for b in c.broker_ids if b != frozen)
    bootstrap = f"{c.brokers[frozen].address},{live}" if paused_first else live
    pythons = {"ours": sys.executable, **({"base": baseline} if baseline else {})}
    values = {name: [b"%s-%d" % (name.encode(), i) for i in range(1, records + 1)]
              for name in (*pythons, "rdkafka" if connected else "kcat")}
    # Not from the checkout's folder: a baseline build must import its own package, not ours.
    cwd = c.base_dir
    runs = [Run(name, [python, "-m", "epochlog", "produce", topic, "--acks", "all",
                       "--bootstrap-server", bootstrap], cwd)
            for name, python in pythons.items()]
    if connected:  # kcat reads stdin in whole buffers: librdkafka through a line reader
        runs.append(Run("rdkafka", [sys.executable, "-c", RDKAFKA_LINES, bootstrap, topic],
                        cwd))
    else:
        runs.append(Run("kcat", ["kcat", "-P", "-b", bootstrap, "-t", topic, "-X", "acks=all"],
                        cwd))
    firsts = {name: b"%s-first" % name.encode() for name in values}
    if connected:  # each has a connection to the leader, proven by a record delivered
        for run in runs:
            run.launch(firsts[run.name] + b"\n")
        wait_held(c, topic, live, set(firsts.values()))
    c.pause(frozen)
    origin = time.monotonic()
    try:
        for run in runs:
            if not connected:
                run.launch()
            run.finish(origin, b"\n".join(values[run.name]) + b"\n")
        elected_s = failover_s(c, topic, frozen, origin)
        for run in runs:
            run.join()
    finally:
        c.resume(frozen)
    counts = {name: held(c, topic, live, set(v)) for name, v in values.items()}
    print(f"round {index}: broker {frozen} paused; new leader after {elected_s:.1f}s")
    for run in runs:
        outcome = "ok" if run.code == 0 else f"exit {run.code}: {run.err.strip()[-200:]}"
        print(f"  {run.name:7} {run.took_s:6.1f}s  (CPU {run.cpu_s:4.1f}s)  "
              f"{counts[run.name]:3d}/{records} records held  {outcome}")
    c.wait_fully_replicated(topic)
    return {"failover": elected_s, **{run.name: run.took_s for run in runs}}


def main() -> None:
    args = parse_args()
    if shutil.which("kcat") is None:
        sys.exit("kcat is not installed (apt-get install kcat)")
    base = args.dir or Path(tempfile.mkdtemp(prefix="epochlog-bench-frozen-"))
    print(f"{args.records} records, acks=all, default settings; times from the pause; "
          + ("each producer connected to the leader before it" if args.connected
             else "each producer started after it"))
    results = []
    with Cluster(brokers=3, base_dir=base, settings={"min.insync.replicas": 2}) as c:
        for index in range(1, args.rounds + 1):
            results.append(one_round(c, index, args.records, args.baseline_python,
                                     args.connected, args.paused_first))
    for key in results[0]:
        figures = [r[key] for r in results]
        print(f"{key:8} median {statistics.median(figures):5.1f}s  "
              f"min {min(figures):5.1f}s  max {max(figures):5.1f}s")


if __name__ == "__main__":
    main()
