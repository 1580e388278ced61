"""The last in-sync replica restarts after a crash with a damaged log (issue 19, case 2), on real
processes: KIP-966's eligible leader replicas keep every acknowledged record.

Three brokers, replication factor 3, min.insync.replicas 2, acks=all. The two followers stop
cleanly one after the other, so the leader is the last ISR member; the second to stop left the
ISR below min.insync.replicas and stays an eligible leader replica (ELR). The leader is then
killed and its segment damaged in the middle (below its recovery point: found only when read). It
comes back first and says it did not shut down cleanly (BrokerRegistration v2): the controller
takes it out of the ISR and the partition waits, instead of electing it and having the intact
replicas truncate to it (before KIP-966 here: thousands of acknowledged records lost, and no
count anywhere). The eligible replica returns and leads; the damaged one follows it and fetches
what it lost; a consumer reads every acknowledged record.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

from epochlog import Admin
from epochlog.client.admin import PartitionDescription
from epochlog.testing import Cluster, until

from .test_corrupt_read import RECORDS, consume, damage_middle_batch, produce


def test_the_crashed_last_isr_member_waits_for_the_eligible_replica(tmp_path: Path) -> None:
    base = tmp_path / "cluster"
    with Cluster(3, base_dir=base, settings={"min.insync.replicas": 2}) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3)
        asyncio.run(produce(cluster.bootstrap_servers))
        state = cluster.wait_fully_replicated("t")[0]
        last = state.leader_id
        first, second = [r for r in state.replica_nodes if r != last]
        cluster.stop(first)
        cluster.stop(second)  # the ISR is now the leader alone; `second` is eligible (ELR)
        until(lambda: list(cluster.partitions("t")[0].isr_nodes) == [last] or None,
              f"the ISR shrunk to {last}", 30)
        # The ELR, as clients see it: DescribeTopicPartitions (the Admin) and `topics describe`
        described = asyncio.run(describe(cluster.bootstrap_servers))
        assert described.eligible_leader_replicas == [second], described
        # (a stopped broker's replicas are offline once the controller has seen it go, which may
        # be a moment after the ISR shrank: the command is asked again until it says so)
        wanted = (f"\tisr {last}\telr {second}\toffline {first},{second}",
                  f"\tisr {last}\telr {second}\toffline {second},{first}")
        shown = ""

        def described_offline() -> bool | None:
            nonlocal shown
            shown = subprocess.run([sys.executable, "-m", "epochlog", "topics", "describe", "t",
                                    "--bootstrap-server", cluster.bootstrap_servers],
                                   capture_output=True, timeout=60, check=True).stdout.decode()
            return any(w in shown for w in wanted) or None

        until(described_offline, "`topics describe` showing the ELR and offline replicas", 30,
              detail=lambda: f"it printed {shown!r}")
        cluster.kill(last)
        damage_middle_batch(base / f"broker-{last}" / "t-0" / f"{0:020d}.log")

        cluster.restart(last)
        controller_log = base / "logs" / "controller.log"
        until(lambda: f"broker {last} restarted after an unclean shutdown"
              in controller_log.read_text() or None, "the unclean restart noticed", 30)
        p = cluster.partitions("t")[0]
        assert p.leader_id < 0 and last not in p.isr_nodes, \
            f"the damaged replica must not lead: {p}"

        restarted = time.monotonic()
        cluster.restart(second)
        leader = cluster.leader_of("t", 0, timeout_s=30)
        elected_s = time.monotonic() - restarted
        assert leader == second
        assert "leads from the eligible leader replicas" in controller_log.read_text()
        cluster.restart(first)
        got = asyncio.run(consume(cluster.bootstrap_servers, 60.0, enough=RECORDS))
        assert got == [(n, str(n).encode()) for n in range(RECORDS)], \
            f"{RECORDS - len(got)} acknowledged records lost"
        cluster.wait_fully_replicated("t", timeout_s=60)
        print(f"0 of {RECORDS} acknowledged records lost; broker {second} led from the ELR "
              f"{elected_s:.1f} s after its restart")


async def describe(bootstrap: str) -> PartitionDescription:
    async with Admin(bootstrap_servers=bootstrap) as admin:
        return (await admin.describe_topic_partitions(["t"]))["t"].partitions[0]
