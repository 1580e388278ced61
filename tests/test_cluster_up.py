"""`epochlog cluster up` as a user runs it: one command, a working cluster, a clean Ctrl-C; it
keeps running when a broker dies, and another terminal drives it with `epochlog cluster ...`.

The `cluster up` child is an `epochlog.testing` Process (its own process group, its output read
line by line, reaped whatever happens); the control commands run as subprocesses, as typed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from epochlog.testing import netns
from epochlog.testing.network import free_port_base
from epochlog.testing.nodes import epochlog_command
from epochlog.testing.processes import Process, process_state

WAIT_S = 60.0


class ClusterUp(Process):
    def __init__(self, data_dir: Path, *args: str) -> None:
        super().__init__("cluster up", stdout_too=True)
        self.data_dir = data_dir
        self.start(epochlog_command("cluster", "up", "--brokers", "3", "--data-dir",
                                    str(data_dir), *args))

    def bootstrap(self) -> str:
        return self.wait_line(r"bootstrap servers: (\S+)", timeout_s=WAIT_S).group(1)

    def interrupt(self) -> int:
        self.send_signal(signal.SIGINT)
        return self.wait_exit(WAIT_S)

    def control(self, *args: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
        out = subprocess.run(epochlog_command("cluster", *args, "--data-dir", str(self.data_dir)),
                             capture_output=True, text=True, timeout=WAIT_S * 3)
        assert (out.returncode == 0) == ok, out.stdout + out.stderr
        return out

    def status(self) -> dict[Any, dict[str, Any]]:
        answer = json.loads(self.control("status", "--json").stdout)
        return {row["node"]: row for row in answer["nodes"]}


@pytest.fixture
def cluster_up(tmp_path: Path) -> Iterator[ClusterUp]:
    base = free_port_base()
    up = ClusterUp(tmp_path, "--port-base", str(base))
    try:
        yield up
    finally:
        if up.alive:
            up.interrupt()


def produce_and_count(bootstrap: str, topic: str, n: int) -> int:
    confluent = pytest.importorskip("confluent_kafka")
    producer = confluent.Producer({"bootstrap.servers": bootstrap, "acks": "all"})
    for i in range(n):
        producer.produce(topic, value=b"%d" % i)
    assert producer.flush(WAIT_S) == 0
    consumer = confluent.Consumer({"bootstrap.servers": bootstrap, "group.id": "unused"})
    low, high = consumer.get_watermark_offsets(confluent.TopicPartition(topic, 0), timeout=WAIT_S)
    consumer.close()
    return int(high - low)


def test_cluster_up_serves_clients_and_stops_cleanly_keeping_data(tmp_path: Path) -> None:
    base = free_port_base()
    cluster = ClusterUp(tmp_path, "--port-base", str(base))
    try:
        bootstrap = cluster.bootstrap()
        assert bootstrap == f"127.0.0.1:{base},127.0.0.1:{base + 1},127.0.0.1:{base + 2}"
        assert produce_and_count(bootstrap, "up", 100) == 100
        assert cluster.interrupt() == 0
    finally:
        cluster.kill()
    lines = cluster.lines
    for name in ("broker 1", "broker 2", "broker 3", "controller"):
        assert f"stopped {name} (exit code 0)" in lines
    # Brokers stopped before the controller, each through a controlled shutdown.
    assert lines.index("stopped broker 3 (exit code 0)") < \
        lines.index("stopped controller (exit code 0)")
    for i in (1, 2, 3):
        assert "controlled shutdown" in (tmp_path / "logs" / f"broker-{i}.log").read_text()
        assert (tmp_path / f"broker-{i}" / ".kafka_cleanshutdown").exists()
    assert not (tmp_path / "cluster.sock").exists()

    again = ClusterUp(tmp_path, "--port-base", str(base))
    try:
        bootstrap = again.bootstrap()
        assert produce_and_count(bootstrap, "up", 1) == 101, "data did not survive the restart"
        assert again.interrupt() == 0
    finally:
        again.kill()
    # A clean stop and start is routine: no process logged a warning for a person about it
    # (partitions offline while their last replica restarts, followers retrying, ...).
    warnings = [line for f in sorted((tmp_path / "logs").glob("*.log"))
                for line in f.read_text().splitlines() if " WARNING " in line or " ERROR " in line]
    assert warnings == [], "\n".join(warnings[:20])


def test_cluster_up_refuses_bad_arguments(tmp_path: Path) -> None:
    out = subprocess.run(epochlog_command("cluster", "up", "--brokers", "0", "--data-dir",
                                          str(tmp_path)), capture_output=True, timeout=WAIT_S)
    assert out.returncode == 2 and b"--brokers must be" in out.stderr
    out = subprocess.run(epochlog_command("cluster", "up", "--set", "min.insync.replica=2",
                                          "--data-dir", str(tmp_path)),
                         capture_output=True, timeout=WAIT_S)
    assert out.returncode == 2 and b"unknown setting 'min.insync.replica'" in out.stderr


def test_a_dead_broker_is_reported_and_the_rest_runs_on(cluster_up: ClusterUp) -> None:
    bootstrap = cluster_up.bootstrap()
    mark = cluster_up.mark()
    pid = cluster_up.status()[3]["pid"]
    os.kill(pid, signal.SIGKILL)  # from outside, as a user's `kill -9` would
    cluster_up.wait_line(r"broker 3 exited with code -9 \(SIGKILL\); the rest of the cluster "
                         r"runs on", start=mark)
    assert cluster_up.alive
    assert produce_and_count(bootstrap, "after-death", 10) == 10
    rows = cluster_up.status()
    assert rows[3]["state"] == "exited -9" and rows[3]["pid"] is None
    assert all(rows[n]["state"] == "running" for n in (1, 2, "controller"))


def test_control_commands_drive_a_running_cluster(cluster_up: ClusterUp) -> None:
    cluster_up.bootstrap()
    text = cluster_up.control("status").stdout
    for word in ("controller", "running", "generation", "leads", "bootstrap servers"):
        assert word in text
    before = cluster_up.status()
    assert [before[n]["rack"] for n in (1, 2, 3)] == ["a", "b", "c"]

    cluster_up.control("kill", "1")
    assert process_state(before[1]["pid"]) in ("", "Z")
    cluster_up.control("pause", "2")
    assert process_state(before[2]["pid"]) == "T"
    assert cluster_up.status()[2]["state"] == "paused"
    cluster_up.control("resume", "2")
    assert process_state(before[2]["pid"]) in ("R", "S")
    cluster_up.control("stop", "3")
    assert cluster_up.status()[3]["state"] == "stopped"
    for n in ("1", "3"):
        assert "now running" in cluster_up.control("restart", n).stdout
    cluster_up.control("kill", "controller")
    cluster_up.control("restart", "controller")
    after = cluster_up.status()
    assert all(after[n]["state"] == "running" for n in (1, 2, 3, "controller"))
    assert after[1]["pid"] != before[1]["pid"] and after[1]["generation"] > before[1]["generation"]
    assert after["controller"]["generation"] > before["controller"]["generation"]

    refused = cluster_up.control("partition", "1", "2,3", ok=False)
    assert "cluster up --network" in refused.stderr
    refused = cluster_up.control("kill", "9", ok=False)
    assert "no node 9" in refused.stderr
    second = subprocess.run(epochlog_command("cluster", "up", "--data-dir",
                                             str(cluster_up.data_dir), "--port-base", "1"),
                            capture_output=True, text=True, timeout=WAIT_S)
    assert second.returncode == 2 and "already runs" in second.stderr
    assert cluster_up.interrupt() == 0
    for line in ("kill 1: SIGKILL", "pause 2: SIGSTOP", "resume 2: SIGCONT", "stop 3: SIGTERM",
                 "restart 1: pid", "restart 3: pid", "kill controller: SIGKILL"):
        assert any(line in seen for seen in cluster_up.lines), line


def test_control_commands_without_a_cluster_say_so(tmp_path: Path) -> None:
    out = subprocess.run(epochlog_command("cluster", "status", "--data-dir", str(tmp_path)),
                         capture_output=True, text=True, timeout=WAIT_S)
    assert out.returncode == 1 and "no cluster runs in" in out.stderr


@pytest.mark.skipif(os.geteuid() != 0 or netns.available() is not None,
                    reason="network namespaces need root (CI runs as root)")
def test_partition_and_heal_a_cluster_up_network(tmp_path: Path) -> None:
    up = ClusterUp(tmp_path, "--network")
    try:
        bootstrap = up.bootstrap()
        assert "127.0.0.1" not in bootstrap and bootstrap.endswith(":9092")
        up.control("partition", "1", "2,3")
        rows = up.status()
        assert rows[1]["network"] == "cannot reach 2,3; unreachable from 2,3"
        up.control("slow", "2", "--delay-ms", "50")
        assert "slow 50" in up.status()[2]["network"]
        up.control("heal")
        assert all(row["network"] == "" for row in up.status().values())
        assert up.interrupt() == 0
    finally:
        up.kill()
    assert netns.leftovers(f"el{up.pid % (1 << 24):06x}") == []


class OnTerminal:
    """`cluster up` with its stdout and stderr a pseudo-terminal of the given width (COLUMNS),
    what it has written so far kept in `seen`."""

    def __init__(self, tmp_path: Path, columns: int, port_base: int) -> None:
        import pty
        import threading

        self.master, slave = pty.openpty()
        self.proc = subprocess.Popen(
            epochlog_command("cluster", "up", "--brokers", "2", "--data-dir", str(tmp_path),
                             "--port-base", str(port_base)),
            stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, start_new_session=True,
            env={**os.environ, "COLUMNS": str(columns)})
        os.close(slave)
        self.seen = bytearray()
        self.changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                return
            if not chunk:
                return
            with self.changed:
                self.seen.extend(chunk)
                self.changed.notify_all()

    def text(self) -> str:
        """What was written, without the terminal's escape sequences."""
        return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", bytes(self.seen).decode(errors="replace"))

    def wait_for(self, *words: bytes) -> None:
        self.wait_until(lambda: all(w in self.seen for w in words))

    def wait_until(self, done: Callable[[], bool]) -> None:
        import time

        deadline = time.monotonic() + WAIT_S
        with self.changed:
            while not done():
                left = deadline - time.monotonic()
                assert left > 0, self.text()[-3000:]
                self.changed.wait(min(left, 1.0))

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        os.close(self.master)


def test_on_a_terminal_cluster_up_keeps_a_live_status_table(tmp_path: Path) -> None:
    """stdout a terminal (a pseudo-terminal here): the rich table with every node, redrawn."""
    up = OnTerminal(tmp_path, 160, free_port_base())
    try:
        up.wait_for(b"bootstrap servers:", b"generation", b"controller", b"running")
        os.killpg(up.proc.pid, signal.SIGINT)
        assert up.proc.wait(WAIT_S) == 0
        up.wait_for(b"stopped controller")
    finally:
        up.close()


@pytest.mark.parametrize("columns", [80, 40])
def test_on_a_narrow_terminal_the_live_table_drops_columns_not_ports(
        tmp_path: Path, columns: int) -> None:
    """At 80 columns the live table once cut every address to `127.0.0.…`: now each node's row
    holds its address whole, and the columns that did not fit are named instead."""
    base = free_port_base()
    up = OnTerminal(tmp_path, columns, base)
    ports = (base, base + 1, base + 100)
    rows = [re.compile(rf"127\.0\.0\.1:{port}\s*(│|$)", re.M) for port in ports]
    try:
        up.wait_for(b"press Ctrl-C")
        # the live view erasing its first frame to draw the next: that frame is whole
        up.wait_until(lambda: b"\x1b[2K" in up.seen[up.seen.find(b"press Ctrl-C"):])
        text = up.text()
        table = text[text.index("\n", text.index("press Ctrl-C")):]  # the lines before wrap
        assert all(row.search(table) for row in rows), table
        assert "not shown at this width" in table, table
        assert "127.0.0.…" not in table and "127.…" not in table, table
        assert all(len(line) <= columns for line in re.split(r"[\r\n]", table)), table
    finally:
        up.close()


def test_logs_at_warning_show_what_needs_a_person_only(tmp_path: Path) -> None:
    """`--logs --log-level WARNING`: a broker SIGKILLed shows the controller's warning about the
    lost generation, and none of the INFO lines the processes write to their files."""
    up = ClusterUp(tmp_path, "--port-base", str(free_port_base()), "--logs", "--log-level",
                   "warning")
    try:
        up.bootstrap()
        mark = up.mark()
        os.kill(up.status()[3]["pid"], signal.SIGKILL)
        up.wait_line(r"\[controller\] .* WARNING .*broker 3 generation \d+: ",
                     start=mark)
        assert up.alive
        assert not [line for line in up.lines if re.search(r"^\[\S+ ?\S*\] \S+ \S+ INFO ", line)]
        assert "INFO" in (tmp_path / "logs" / "controller.log").read_text()
    finally:
        if up.alive:
            up.interrupt()


def _tools_taking_a_bootstrap() -> set[tuple[str, ...]]:
    """Every command line of `epochlog` that takes --bootstrap-server, read from its parser."""
    import argparse

    from epochlog.cli import build_parser

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]
             ) -> Iterator[tuple[str, ...]]:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, (*path, name))
        if any(action.dest == "bootstrap_server" for action in parser._actions):
            yield path

    return set(walk(build_parser(), ()))


# One harmless use of each tool that takes --bootstrap-server (the topic "found" exists).
BOOTSTRAP_TOOLS: dict[tuple[str, ...], tuple[str, ...]] = {
    ("topics", "create"): ("topics", "create", "made-here", "--replication-factor", "1"),
    ("topics", "list"): ("topics", "list"),
    ("topics", "describe"): ("topics", "describe", "found"),
    ("topics", "delete"): ("topics", "delete", "made-here"),
    ("produce",): ("produce", "found"),
    ("consume",): ("consume", "found", "--from-beginning"),
    ("groups", "list"): ("groups", "list"),
    ("groups", "describe"): ("groups", "describe", "readers"),
    ("groups", "reset-offsets"): ("groups", "reset-offsets", "readers", "--topic", "found",
                                  "--to-earliest"),
    ("groups", "delete-offsets"): ("groups", "delete-offsets", "readers", "--topic", "found"),
    ("groups", "delete"): ("groups", "delete", "readers"),
    ("transactions", "list"): ("transactions", "list"),
    ("transactions", "describe"): ("transactions", "describe", "no-such-id"),
    ("delete-records",): ("delete-records", "found", "--partition", "0", "--offset", "0"),
    ("configs", "describe"): ("configs", "describe", "--topic", "found"),
    ("configs", "alter"): ("configs", "alter", "--topic", "found", "--set",
                           "retention.ms=600000"),
}


def test_every_tool_finds_the_cluster_up_of_its_folder_unless_told_otherwise(
        tmp_path: Path) -> None:
    """A cluster up on other ports than the default, in the folder the tools run in: each tool
    that takes --bootstrap-server finds it as `cluster status` does, and says so on stderr.
    EPOCHLOG_BOOTSTRAP_SERVERS wins over the folder's cluster, and --bootstrap-server over both
    (said nowhere); with none of them, 127.0.0.1:9092, said too."""
    assert _tools_taking_a_bootstrap() == set(BOOTSTRAP_TOOLS), "a tool without a case here"
    folder = tmp_path / "project"
    folder.mkdir()
    base = free_port_base()
    up = ClusterUp(folder / ".epochlog", "--port-base", str(base))
    env = {k: v for k, v in os.environ.items() if k != "EPOCHLOG_BOOTSTRAP_SERVERS"}

    def tool(*args: str, cwd: Path = folder, stdin: str = "", **extra: str
             ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(epochlog_command(*args), cwd=cwd, input=stdin, text=True,
                              capture_output=True, timeout=WAIT_S, env={**env, **extra})

    try:
        bootstrap = up.bootstrap()
        found_line = f"epochlog: bootstrap servers {bootstrap} (the cluster running in ./.epochlog)"
        made = tool("produce", "found", stdin="one\ntwo\n")
        assert made.returncode == 0 and made.stderr.splitlines() == [
            found_line, "produced 2 records to found"], made.stderr
        read = tool("consume", "found", "--group", "readers", "--from-beginning",
                    "--max-messages", "2")
        assert read.returncode == 0 and read.stdout.split() == ["one", "two"], read.stderr
        for key, args in BOOTSTRAP_TOOLS.items():
            out = tool(*args)
            assert out.stderr.splitlines()[:1] == [found_line], (key, out.stderr)
            assert "127.0.0.1:9092" not in out.stdout + out.stderr, (key, out.stderr)

        dead = f"127.0.0.1:{free_port_base()}"  # nothing listens there
        env_first = tool("topics", "list", EPOCHLOG_BOOTSTRAP_SERVERS=dead)
        assert env_first.returncode == 1, env_first.stdout
        assert env_first.stderr.splitlines()[0] == \
            f"epochlog: bootstrap servers {dead} (from EPOCHLOG_BOOTSTRAP_SERVERS)"
        assert f"no broker answered: {dead}" in env_first.stderr
        flag_first = tool("topics", "list", "--bootstrap-server", f"127.0.0.1:{base + 1}",
                          EPOCHLOG_BOOTSTRAP_SERVERS=dead)
        assert flag_first.returncode == 0 and flag_first.stderr == "", flag_first.stderr
        assert "found" in flag_first.stdout.split()

        elsewhere = tmp_path / "elsewhere"
        elsewhere.mkdir()
        default = tool("topics", "list", cwd=elsewhere)
        assert default.stderr.splitlines()[0] == (
            "epochlog: bootstrap servers 127.0.0.1:9092 (the default: no --bootstrap-server, "
            "EPOCHLOG_BOOTSTRAP_SERVERS not set, no cluster runs in ./.epochlog)")
        assert up.interrupt() == 0
    finally:
        up.kill()
    # The cluster has stopped: its socket is gone, and the folder's tools fall back, saying so.
    gone = tool("topics", "list")
    assert gone.stderr.splitlines()[0].endswith("no cluster runs in ./.epochlog)"), gone.stderr


PYTHON_EXCEPTION = re.compile(r"\b\w*(Error|Exception)\b|Traceback")


def test_cli_mistakes_are_said_plainly_and_exit_1(cluster_up: ClusterUp) -> None:
    """Each mistake a newcomer makes (issue 29) gets one line saying what was wrong, no Python
    exception's name, and exit 1."""
    bootstrap = cluster_up.bootstrap()

    def said(args: tuple[str, ...], stdin: str = "") -> str:
        out = subprocess.run(epochlog_command(*args), input=stdin, capture_output=True,
                             text=True, timeout=WAIT_S)
        assert out.returncode == 1, (args, out.returncode, out.stdout, out.stderr)
        assert not PYTHON_EXCEPTION.search(out.stderr), (args, out.stderr)
        return out.stderr.strip()

    here = ("--data-dir", str(cluster_up.data_dir))
    assert said(("cluster", "kill", "7", *here)) == \
        "epochlog cluster kill: no node 7: the nodes are brokers 1, 2, 3 and 'controller'"
    assert said(("cluster", "kill", "abc", *here)) == \
        "epochlog cluster kill: 'abc' is not a node: a broker id (1, 2, 3) or 'controller'"
    assert said(("cluster", "stop", "clients", *here)) == \
        "epochlog cluster stop: 'clients' is not a node: a broker id (1, 2, 3) or 'controller'"
    assert said(("cluster", "partition", "1", "2,x", "--one-way", *here)).endswith(
        "'x' is not a node: a broker id (1, 2, 3), 'controller' or 'clients'")

    flag = ("--bootstrap-server", bootstrap)
    one = subprocess.run(epochlog_command("produce", "demo", *flag), input="hello\n",
                         capture_output=True, text=True, timeout=WAIT_S)
    assert one.returncode == 0 and one.stderr.strip() == "produced 1 record to demo", one.stderr
    missing = "epochlog: topic nosuchtopic does not exist (UNKNOWN_TOPIC_OR_PARTITION)"
    assert said(("consume", "nosuchtopic", *flag)) == missing
    assert said(("topics", "describe", "nosuchtopic", *flag)) == missing
    # as Kafka's console consumer, an offset without a partition is refused, not applied to all
    assert said(("consume", "demo", "--offset", "0", *flag)) == \
        "epochlog: --offset needs --partition: an offset is a position in one partition"
    assert said(("groups", "describe", "nosuchgroup", *flag)) == \
        "epochlog: no such group nosuchgroup"


def test_cluster_up_on_a_port_in_use_says_which_before_starting_anything(tmp_path: Path) -> None:
    base = free_port_base()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", base + 1))
        holder.listen()
        out = subprocess.run(epochlog_command("cluster", "up", "--port-base", str(base),
                                              "--data-dir", str(tmp_path)),
                             capture_output=True, text=True, timeout=WAIT_S)
    assert out.returncode == 1, out.stdout + out.stderr
    assert out.stderr.strip() == (f"epochlog cluster up: port {base + 1} (broker 2) in use on "
                                  "127.0.0.1: stop what listens there, or choose another "
                                  "--port-base"), out.stderr
    assert "started" not in out.stdout and not (tmp_path / "logs").exists()


def test_a_node_that_dies_while_starting_is_reported_with_its_own_error(tmp_path: Path) -> None:
    """A port taken after cluster up's check (or by a test's own Cluster): the start fails
    with the broker's error first, not the line it waited for."""
    from epochlog.testing.cluster import Cluster
    from epochlog.testing.processes import ProcessError

    base = free_port_base()
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", base + 1))
        holder.listen()
        cluster = Cluster(3, base_dir=tmp_path, port_base=base)
        try:
            with pytest.raises(ProcessError) as failed:
                cluster.start()
        finally:
            cluster._kill_all()
    head = str(failed.value).splitlines()[0]
    assert head.startswith("broker 2 exited with code 1 before it was ready: broker 2 failed "
                           "to start: "), head
    assert "address already in use" in head, head


def test_cluster_up_with_ssl_writes_the_client_settings_that_work(tmp_path: Path) -> None:
    """`--security ssl`: certificates under <data-dir>/tls, <data-dir>/client.json in librdkafka's
    names (also printed), and those settings, as they are, produce and read over mutual TLS
    with confluent-kafka. The folder's tools, which have no TLS yet, find the brokers'
    plaintext CONTROLLER listeners and say so. Ctrl-C still stops it cleanly."""
    confluent = pytest.importorskip("confluent_kafka")
    base = free_port_base((0, 1, 2, 100, 200, 201, 202))
    data_dir = tmp_path / ".epochlog"
    up = ClusterUp(data_dir, "--port-base", str(base), "--security", "ssl")
    try:
        bootstrap = up.bootstrap()
        assert bootstrap == ",".join(f"127.0.0.1:{base + 200 + i}" for i in range(3))
        up.wait_line(r"  ssl.key.location=", timeout_s=WAIT_S)
        settings = json.loads((data_dir / "client.json").read_text())
        assert settings == {
            "bootstrap.servers": bootstrap, "security.protocol": "SSL",
            "ssl.ca.location": str(data_dir / "tls" / "ca.pem"),
            "ssl.certificate.location": str(data_dir / "tls" / "client.pem"),
            "ssl.key.location": str(data_dir / "tls" / "client.key")}
        producer = confluent.Producer({**settings, "acks": "all"})
        producer.produce("secured", value=b"over tls")
        assert producer.flush(WAIT_S) == 0
        consumer = confluent.Consumer({**settings, "group.id": "g",
                                       "auto.offset.reset": "earliest"})
        consumer.subscribe(["secured"])
        message = None
        for _ in range(int(WAIT_S)):
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                break
        consumer.close()
        assert message is not None and message.value() == b"over tls"

        env = {k: v for k, v in os.environ.items() if k != "EPOCHLOG_BOOTSTRAP_SERVERS"}
        listed = subprocess.run(epochlog_command("topics", "list"), cwd=tmp_path, env=env,
                                capture_output=True, text=True, timeout=WAIT_S)
        plaintext = ",".join(f"127.0.0.1:{base + i}" for i in range(3))
        assert listed.returncode == 0 and "secured" in listed.stdout.split(), listed.stderr
        assert listed.stderr.splitlines()[0] == (
            f"epochlog: bootstrap servers {plaintext} (the cluster running in ./.epochlog: its "
            f"plaintext CONTROLLER listeners, as the tools have no TLS yet)")
    finally:
        if up.alive:
            assert up.interrupt() == 0
