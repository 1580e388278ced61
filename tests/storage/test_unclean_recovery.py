"""KIP-966 unclean recovery on real processes: when only an unclean election can bring a partition
back, the controller asks the surviving replicas what they hold and elects the one holding the
most, not the first in assignment order (controller/unclean_recovery.py).

Three brokers, replication factor 3, min.insync.replicas 1, unclean elections allowed. The
leader's followers are killed one after the other while records are written, so the first
follower in assignment order holds 100 records, the second 200 and the leader 250. The leader is
killed too; the followers come back, the first first. Before unclean recovery, its return elected
it at once and the second follower, returning, truncated 100 acknowledged records away; now the
controller waits for the answers and elects the second. What only the dead leader held (50
records) is lost either way: that is what an unclean election is.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from epochlog import Producer
from epochlog.testing import Cluster, until

from .test_corrupt_read import consume

FIRST, SECOND, LEADER_ONLY = 100, 100, 50


async def produce(bootstrap: str, start: int, count: int) -> None:
    async with Producer(bootstrap_servers=bootstrap, acks="all", linger_ms=0) as producer:
        for n in range(start, start + count, 10):
            futures = [await producer.send("t", str(i).encode(), partition=0)
                       for i in range(n, n + 10)]
            await asyncio.gather(*futures)


@pytest.mark.parametrize("recovery", [True, False], ids=["recovery", "first-live-replica"])
def test_the_replica_holding_the_most_is_elected(tmp_path: Path, recovery: bool) -> None:
    base = tmp_path / "cluster"
    settings = {"min.insync.replicas": 1, "unclean.leader.election.enable": True,
                "unclean.recovery.timeout.ms": 30_000 if recovery else -1}
    with Cluster(3, base_dir=base, settings=settings) as cluster:
        cluster.create_topic("t", partitions=1, replication_factor=3)
        state = cluster.wait_fully_replicated("t")[0]
        leader = state.leader_id
        first, second = [r for r in state.replica_nodes if r != leader]  # assignment order

        def isr_is(*members: int) -> None:
            until(lambda: sorted(cluster.partitions("t")[0].isr_nodes) == sorted(members) or None,
                  f"the ISR to be {sorted(members)}", 30)

        asyncio.run(produce(cluster.bootstrap_servers, 0, FIRST))
        cluster.kill(first)
        isr_is(leader, second)
        asyncio.run(produce(cluster.bootstrap_servers, FIRST, SECOND))
        cluster.kill(second)
        isr_is(leader)
        asyncio.run(produce(cluster.bootstrap_servers, FIRST + SECOND, LEADER_ONLY))
        cluster.kill(leader)

        cluster.restart(first)
        # with recovery, the controller waits for the other replicas up to the timeout: long
        # enough for the second restart on a loaded machine (the dead leader never answers, so
        # the wait runs out and the best answer leads)
        cluster.restart(second)
        elected = cluster.leader_of("t", 0, timeout_s=60)
        got = asyncio.run(consume(cluster.bootstrap_servers, 30.0, enough=FIRST + SECOND))
        controller_log = (base / "logs" / "controller.log").read_text()
        if not recovery:  # what the test guards against: the first to return leads
            assert elected == first
            assert len(got) == FIRST
            return
        assert elected == second, f"broker {elected} elected; broker {second} held the most"
        assert f"UNCLEAN leader election for t-0: broker {second} holds the most" in controller_log
        assert got == [(n, str(n).encode()) for n in range(FIRST + SECOND)], \
            f"{FIRST + SECOND - len(got)} records lost that a surviving replica held"
        print(f"broker {second} elected by unclean recovery: {FIRST + SECOND} records kept, "
              f"{LEADER_ONLY} lost with the dead leader (the first live replica would have kept "
              f"{FIRST})")
