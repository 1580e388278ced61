"""epochlog's transactional Producer (issue 18) against three real brokers, checked with
confluent-kafka's read_committed consumer (librdkafka: software nobody here wrote).

The API is aiokafka's and Java's: `transactional_id`, `init_transactions()`,
`begin_transaction()`, `send_offsets_to_transaction()`, `commit_transaction()`,
`abort_transaction()` and `async with producer.transaction():`.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from epochlog import Admin, Consumer, Producer, TopicPartition
from epochlog.client.errors import (
    InvalidTxnStateError,
    KafkaError,
    ProducerFencedError,
    TransactionAbortedError,
)
from epochlog.protocol.error_codes import ErrorCode
from epochlog.testing import Cluster, until
from tests.interop.test_transactions_interop import SETTINGS, consume_all, stable_offsets


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    with Cluster(3, base_dir=tmp_path_factory.mktemp("our-txn"), settings=SETTINGS) as c:
        yield c


def topic(cluster: Cluster, name: str, partitions: int = 2, **configs: str) -> str:
    cluster.create_topic(name, partitions=partitions, replication_factor=3, configs=configs)
    cluster.wait_fully_replicated(name)
    return name


async def describe(cluster: Cluster, transactional_id: str) -> Any:
    async with Admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
        return (await admin.describe_transactions([transactional_id]))[transactional_id]


async def completed(cluster: Cluster, transactional_id: str) -> str:
    """The id's state once its last transaction is complete (EndTxn is answered once the
    Prepare state is written; the markers and the Complete state follow)."""
    deadline = asyncio.get_running_loop().time() + 60
    while True:
        state = str((await describe(cluster, transactional_id)).state)
        if not state.startswith("Prepare"):
            return state
        assert asyncio.get_running_loop().time() < deadline, f"{transactional_id}: {state}"
        await asyncio.sleep(0.1)


def producer(cluster: Cluster, transactional_id: str, **kw: Any) -> Producer:
    return Producer(bootstrap_servers=cluster.bootstrap_servers,
                    transactional_id=transactional_id, **kw)


async def test_committed_transactions_are_read_and_aborted_ones_are_not(
        cluster: Cluster) -> None:
    name = topic(cluster, "ours-commit-abort", partitions=3)
    async with producer(cluster, "ours-1") as p:
        await p.init_transactions()
        p.begin_transaction()
        for i in range(30):
            await p.send(name, f"committed {i}".encode(), key=str(i).encode())
        await p.commit_transaction()

        p.begin_transaction()
        sent = [await p.send(name, f"aborted {i}".encode(), key=str(i).encode())
                for i in range(30)]
        await p.flush()
        assert all(f.done() and f.exception() is None for f in sent)  # written, then aborted
        await p.abort_transaction()

        async with p.transaction():
            for i in range(10):
                await p.send(name, f"block {i}".encode())
        with pytest.raises(RuntimeError, match="the block failed"):
            async with p.transaction():
                unsent = await p.send(name, b"raised before it was sent", partition=0)
                raise RuntimeError("the block failed")
        with pytest.raises(TransactionAbortedError):
            await unsent
        assert p.metrics()["transactions_committed_total"] == 2
        assert p.metrics()["transactions_aborted_total"] == 2
    # the raised block's record was never sent; whether its partition had been added already
    # (AddPartitionsToTxn goes out as soon as the sender runs) decides if the abort had to ask
    # the coordinator: the id ends committed (the block before) or aborted (this one)
    assert await completed(cluster, "ours-1") in ("CompleteCommit", "CompleteAbort")
    committed = consume_all(cluster, name, 40, "read_committed")
    assert sorted(committed) == sorted([f"committed {i}".encode() for i in range(30)]
                                       + [f"block {i}".encode() for i in range(10)])
    everything = consume_all(cluster, name, 70, "read_uncommitted")
    assert {v for v in everything if v.startswith(b"aborted")} == {
        f"aborted {i}".encode() for i in range(30)}


async def test_a_new_producer_with_the_same_id_fences_the_old_one(cluster: Cluster) -> None:
    """init_transactions() of a second instance bumps the epoch and aborts what the first left
    open; the first can then only fail (ProducerFencedError), and none of its records is
    read."""
    name = topic(cluster, "ours-fenced", partitions=1)
    async with producer(cluster, "ours-2") as old, producer(cluster, "ours-2") as new:
        await old.init_transactions()
        old.begin_transaction()
        await (await old.send(name, b"zombie 1"))
        await new.init_transactions()
        async with new.transaction():
            await new.send(name, b"new 1")
        late = await old.send(name, b"zombie 2")
        with pytest.raises(ProducerFencedError):
            await old.commit_transaction()
        with pytest.raises(KafkaError):
            await late
        with pytest.raises(ProducerFencedError):
            old.begin_transaction()
        async with new.transaction():
            await new.send(name, b"new 2")
    assert sorted(consume_all(cluster, name, 2, "read_committed")) == [b"new 1", b"new 2"]


async def test_a_failed_record_makes_the_transaction_abortable(cluster: Cluster) -> None:
    """A record the broker refuses (too large for the topic) fails; commit raises its error;
    after the abort, which bumps the epoch because the refused batch used sequence numbers,
    the next transaction commits."""
    name = topic(cluster, "ours-abortable", partitions=1, **{"max.message.bytes": "2000"})
    async with producer(cluster, "ours-3", linger_ms=0) as p:
        await p.init_transactions()
        epoch = (await describe(cluster, "ours-3")).producer_epoch
        p.begin_transaction()
        await (await p.send(name, b"fine"))
        too_large = await p.send(name, b"x" * 10_000)
        with pytest.raises(KafkaError) as failed:
            await p.commit_transaction()
        assert failed.value.code == ErrorCode.MESSAGE_TOO_LARGE
        with pytest.raises(KafkaError):
            await too_large
        with pytest.raises(KafkaError, match="abort it"):
            await p.send(name, b"refused while the transaction must be aborted")
        await p.abort_transaction()
        assert (await describe(cluster, "ours-3")).producer_epoch == epoch + 1
        async with p.transaction():
            await p.send(name, b"after")
    assert consume_all(cluster, name, 1, "read_committed") == [b"after"]


async def test_offsets_are_committed_with_the_transaction(cluster: Cluster) -> None:
    """Our consume-transform-produce: a read_committed consumer in a group, the records written
    and the consumer's offsets sent in one transaction with its group_metadata() (KIP-447).
    The offsets are unstable until the commit, then stable; an aborted transaction's offsets
    never take effect."""
    source, sink = topic(cluster, "ours-ctp-in"), topic(cluster, "ours-ctp-out")
    async with Producer(bootstrap_servers=cluster.bootstrap_servers) as plain:
        for i in range(20):
            await plain.send(source, f"in {i}".encode(), partition=i % 2)
    async with Consumer(bootstrap_servers=cluster.bootstrap_servers, group_id="ours-ctp",
                        isolation_level="read_committed", auto_offset_reset="earliest",
                        enable_auto_commit=False) as consumer, \
            producer(cluster, "ours-4") as p:
        consumer.subscribe([source])
        await p.init_transactions()
        seen: list[Any] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while len(seen) < 20:
            assert loop.time() < deadline, f"read {len(seen)} of 20"
            seen += await consumer.poll(timeout_ms=200)
        p.begin_transaction()
        for r in seen:
            await p.send(sink, r.value.replace(b"in", b"out"), partition=r.partition)
        await p.send_offsets_to_transaction(
            {TopicPartition(source, part): 10 for part in (0, 1)}, consumer.group_metadata())
        await p.flush()
        pending = stable_offsets(cluster, "ours-ctp", source, 2)
        assert {o.error_code for o in pending} == {ErrorCode.UNSTABLE_OFFSET_COMMIT}, pending
        await p.commit_transaction()

        def committed_at_10() -> bool:
            return all(o.error_code == 0 and o.committed_offset == 10
                       for o in stable_offsets(cluster, "ours-ctp", source, 2))
        until(committed_at_10, "the offsets committed with the transaction", 30)
        p.begin_transaction()
        await p.send(sink, b"never")
        await p.send_offsets_to_transaction({TopicPartition(source, 0): (0, -1)}, "ours-ctp")
        await p.abort_transaction()
        # unstable until the abort's markers are written, then as the commit left them
        until(committed_at_10, "the offsets as the committed transaction left them", 30)
    out = consume_all(cluster, sink, 20, "read_committed")
    assert sorted(out) == sorted(f"out {i}".encode() for i in range(20))


async def test_misuse_is_refused_with_a_clear_error(cluster: Cluster) -> None:
    name = topic(cluster, "ours-misuse", partitions=1)
    with pytest.raises(ValueError, match="enable_idempotence"):
        Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id="x",
                 enable_idempotence=False)
    async with producer(cluster, "ours-5") as p:
        with pytest.raises(InvalidTxnStateError, match="init_transactions"):
            p.begin_transaction()
        with pytest.raises(InvalidTxnStateError, match="open transaction"):
            await p.send(name, b"no transaction")
        await p.init_transactions()
        with pytest.raises(InvalidTxnStateError, match="open transaction"):
            await p.send(name, b"no transaction")
        with pytest.raises(InvalidTxnStateError, match="commit_transaction"):
            await p.commit_transaction()
        p.begin_transaction()
        with pytest.raises(InvalidTxnStateError, match="begin_transaction"):
            p.begin_transaction()
        await p.commit_transaction()  # an empty transaction: nothing to ask the coordinator
    async with Producer(bootstrap_servers=cluster.bootstrap_servers) as plain:
        with pytest.raises(InvalidTxnStateError, match="transactional_id"):
            await plain.init_transactions()


async def test_close_aborts_the_open_transaction(cluster: Cluster) -> None:
    """As Java's producer does: a transaction still open at close is aborted, not left for
    the coordinator's timeout to end (read_committed readers would wait for it until then)."""
    name = topic(cluster, "ours-close", partitions=1)
    async with producer(cluster, "ours-6", transaction_timeout_ms=600_000) as p:
        await p.init_transactions()
        p.begin_transaction()
        await (await p.send(name, b"left open"))
    assert await completed(cluster, "ours-6") == "CompleteAbort"
    async with Producer(bootstrap_servers=cluster.bootstrap_servers) as plain:
        await plain.send_and_wait(name, b"plain")
    assert consume_all(cluster, name, 1, "read_committed") == [b"plain"]
