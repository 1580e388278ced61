"""The producer's accumulator alone (sans-IO): ordering of retries, sequences, memory bound.

These rules are what keep an idempotent producer's records in order and unduplicated; the
integration tests (test_producer.py) show the outcome against a broker, these show the rules.
"""

from __future__ import annotations

import asyncio

import pytest

from epochlog.client.accumulator import Accumulator, Batch, ProducerIdentity
from epochlog.client.errors import MessageTooLargeError
from epochlog.client.types import TopicPartition
from epochlog.protocol.batch import check
from epochlog.protocol.records import decode_batch

TP = TopicPartition("t", 0)


def make(loop: asyncio.AbstractEventLoop, *, memory: int = 1 << 20, batch: int = 300,
         idempotent: bool = True) -> Accumulator:
    identity = ProducerIdentity()
    identity.producer_id, identity.producer_epoch = 7, 0
    return Accumulator(batch_size=batch, linger_s=0.0, compression=0, memory_max=memory,
                       new_future=loop.create_future, idempotent=idempotent, identity=identity)


def fill(acc: Accumulator, batches: int) -> None:
    """Records of 90 B (98 with framing): two per 300-byte batch (61 bytes of header)."""
    pq = acc.queue(TP)
    for i in range(batches * 2):
        assert acc.append(pq, None, b"%089d" % i, None, 1000, lambda: 0.0) is not None


def drain_all(acc: Accumulator, now_s: float = 1.0) -> list[Batch]:
    out: list[Batch] = []
    while True:
        by_node, _ = acc.drain(now_s, lambda tp: (1, 5), lambda node: True)
        if not by_node:
            return out
        out += by_node[1]


def drain_first(acc: Accumulator) -> None:
    """Send and acknowledge the partition's first batch, after which batches pipeline."""
    [first] = drain_all(acc)
    acc.acknowledged(first)


async def test_the_first_batch_of_a_sequence_goes_alone() -> None:
    """A broker that does not know the producer accepts any first sequence: a second batch sent
    beside a first one that fails (e.g. too large) would be written ahead of it."""
    acc = make(asyncio.get_running_loop())
    fill(acc, 3)
    [first] = drain_all(acc)
    assert drain_all(acc) == []
    acc.acknowledged(first)
    assert [b.base_sequence for b in drain_all(acc)] == [2, 4], "then they pipeline"


async def test_sequences_follow_record_counts_and_batches_are_valid() -> None:
    acc = make(asyncio.get_running_loop())
    fill(acc, 3)
    sent = drain_all(acc)
    acc.acknowledged(sent[0])
    sent += drain_all(acc)
    assert [b.base_sequence for b in sent] == [0, 2, 4]
    for b in sent:
        header = check(b.data)
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == \
            (7, 0, b.base_sequence)
        assert b.leader_epoch == 5


async def test_a_retry_waits_for_the_partition_to_be_clear_and_keeps_its_place() -> None:
    acc = make(asyncio.get_running_loop())
    fill(acc, 4)
    drain_first(acc)
    first, second, third = drain_all(acc)
    acc.retry(first, now_s=1.0, backoff_s=0.1, why="NOT_LEADER_OR_FOLLOWER")
    assert drain_all(acc, now_s=2.0) == [], "others still in flight: the retry must wait"
    acc.retry(second, now_s=1.0, backoff_s=0.1, why="NOT_LEADER_OR_FOLLOWER")
    acc.acknowledged(third)  # the broker could not have, but the queue must still drain in order
    assert drain_all(acc, now_s=2.0) == [first]
    acc.acknowledged(first)
    assert drain_all(acc, now_s=2.0) == [second]
    assert second.base_sequence == 4, "a retry keeps its sequence, so duplicates are recognised"


async def test_a_failed_batch_restarts_the_sequence_under_a_new_epoch() -> None:
    acc = make(asyncio.get_running_loop())
    fill(acc, 3)
    [first] = drain_all(acc)
    acc.acknowledged(first)
    second, third = drain_all(acc)
    acc.failed(second, RuntimeError("MESSAGE_TOO_LARGE"))
    acc.retry(third, now_s=1.0, backoff_s=0.0, why="OUT_OF_ORDER_SEQUENCE_NUMBER")
    [again] = drain_all(acc, now_s=2.0)
    assert again is third
    header = check(third.data)  # restamped: CRC recomputed over the new fields
    assert (header.producer_epoch, header.base_sequence) == (1, 0)
    assert acc.identity.producer_epoch == 1
    with pytest.raises(RuntimeError):
        second.future.result()


async def test_memory_bound_refuses_a_new_batch() -> None:
    acc = make(asyncio.get_running_loop(), memory=600, batch=300)
    pq = acc.queue(TP)
    for i in range(4):  # two batches of two records fill 600 bytes
        assert acc.append(pq, None, b"%089d" % i, None, 1000, lambda: 0.0) is not None
    assert acc.append(pq, None, b"x" * 89, None, 1000, lambda: 0.0) is None
    assert acc.used_bytes == 600
    while sent := drain_all(acc):
        for b in sent:
            acc.acknowledged(b)
    assert acc.used_bytes == 0
    assert acc.append(pq, None, b"x" * 89, None, 1000, lambda: 0.0) is not None


# ------------------------------------------------------------------ max_request_size, per request
def fill_partitions(acc: Accumulator, partitions: int, batches: int) -> None:
    for p in range(partitions):
        pq = acc.queue(TopicPartition("t", p))
        for i in range(batches * 2):
            assert acc.append(pq, None, b"%089d" % i, None, 1000, lambda: 0.0) is not None


async def test_a_request_carries_at_most_request_bytes_max_of_batches() -> None:
    acc = make(asyncio.get_running_loop(), batch=300, idempotent=False)
    acc.request_bytes_max = 1000  # three built batches of 257 bytes fit, a fourth does not
    fill_partitions(acc, partitions=10, batches=1)
    requests = []
    while True:
        by_node, _ = acc.drain(1.0, lambda tp: (1, 5), lambda node: True)
        if not by_node:
            break
        requests.append(by_node[1])
    assert [len(r) for r in requests] == [3, 3, 3, 1]
    assert all(sum(len(b.data) for b in r) <= 1000 for r in requests)
    assert sorted(b.tp.partition for r in requests for b in r) == list(range(10))


async def test_a_batch_bigger_than_a_request_still_goes_alone() -> None:
    acc = make(asyncio.get_running_loop(), batch=300, idempotent=False)
    acc.request_bytes_max = 200  # below any batch here: Java's "at least one batch" rule
    fill_partitions(acc, partitions=3, batches=1)
    requests = [acc.drain(1.0, lambda tp: (1, 5), lambda node: True)[0][1] for _ in range(3)]
    assert [len(r) for r in requests] == [1, 1, 1]


async def test_partitions_passed_over_go_first_next_time() -> None:
    """A full request leaves partitions out; they lead the next one, so none starves even
    when each request fills before the last partition."""
    acc = make(asyncio.get_running_loop(), batch=300, idempotent=False)
    acc.request_bytes_max = 600  # two batches per request
    fill_partitions(acc, partitions=5, batches=3)
    first, second, third = ([b.tp.partition for b in
                             acc.drain(1.0, lambda tp: (1, 5), lambda node: True)[0][1]]
                            for _ in range(3))
    assert len(set(first + second + [third[0]])) == 5, "every partition before any twice"


# -------------------------------------------------------------- records that could never be sent
@pytest.mark.parametrize("memory, request_max, named", [(1 << 20, 1000, "max_request_size"),
                                                        (1000, 1 << 20, "buffer_memory")])
async def test_a_record_bigger_than_a_request_or_the_buffer_is_refused(
        memory: int, request_max: int, named: str) -> None:
    acc = Accumulator(batch_size=300, linger_s=0.0, compression=0, memory_max=memory,
                      new_future=asyncio.get_running_loop().create_future, idempotent=False,
                      identity=ProducerIdentity(), request_bytes_max=request_max)
    pq = acc.queue(TP)
    fits = 1000 - 61 - 9  # the largest value whose record (9 bytes of framing) and batch
    # header (61) take 1000 bytes
    assert acc.append(pq, None, b"v" * fits, None, 1000, lambda: 0.0) is not None
    with pytest.raises(MessageTooLargeError, match=named):
        acc.append(pq, None, b"v" * (fits + 1), None, 1000, lambda: 0.0)
    assert acc.used_bytes == 1000, "a refused record reserves nothing"


# ---------------------------------------------------------------------------------- splitting
async def test_a_split_batch_keeps_its_place_sequences_memory_and_records() -> None:
    acc = make(asyncio.get_running_loop(), batch=2000)
    pq = acc.queue(TP)
    handles = [acc.append(pq, f"k{i}".encode(), b"%089d" % i, [("h", b"%d" % i)], 1000 + i,
                          lambda: 0.0) for i in range(30)]  # two batches
    used = acc.used_bytes
    [big] = drain_all(acc)
    n = big.record_count
    assert 2 < n < 30
    left, right = acc.split(big, "MESSAGE_TOO_LARGE")
    assert (left.record_count, right.record_count) == ((n + 1) // 2, n // 2)
    assert (left.base_sequence, right.base_sequence) == (0, (n + 1) // 2)
    assert acc.used_bytes == used, "the halves hold the original's reservation"
    for half in (left, right):
        header = check(half.data)
        assert (header.producer_id, header.base_sequence) == (7, half.base_sequence)
    assert list(pq.ready)[:2] == [left, right], "at the front, ahead of the later batch"
    [sent] = drain_all(acc)
    assert sent is left, "the first sequence goes alone until acknowledged"
    acc.acknowledged(left)
    sent_after = drain_all(acc)
    assert sent_after[0] is right and sent_after[1].base_sequence == n
    acc.acknowledged(right)
    assert big.future.done(), "the original resolves once both halves have"
    records = [r for half in (left, right) for r in decode_batch(half.data)[1]]
    assert [(r.key, r.value, r.headers, r.timestamp) for r in records] == \
        [(f"k{i}".encode(), b"%089d" % i, [("h", b"%d" % i)], 1000 + i) for i in range(n)]
    assert big.locate(0) == (left, 0) and big.locate((n + 1) // 2 + 2) == (right, 2)
    assert handles[0] is not None and handles[0][0] is big


async def test_halves_split_again_stay_ahead_of_their_sibling() -> None:
    acc = make(asyncio.get_running_loop(), batch=2000)
    pq = acc.queue(TP)
    for i in range(8):
        acc.append(pq, None, b"%089d" % i, None, 1000, lambda: 0.0)
    [big] = drain_all(acc)
    left, right = acc.split(big, "MESSAGE_TOO_LARGE")
    assert drain_all(acc) == [left], "right waits: nothing of this sequence is acknowledged"
    a, b = acc.split(left, "MESSAGE_TOO_LARGE")  # still too large: split again
    assert list(pq.ready) == [a, b, right]
    assert [x.base_sequence for x in pq.ready] == [0, 2, 4]
    assert big.locate(3) == (b, 1) and big.locate(5) == (right, 1)
    acc.failed(a, RuntimeError("too large"))
    acc.acknowledged(b)
    assert not big.future.done()
    acc.acknowledged(right)
    assert big.future.done() and left.future.done()
