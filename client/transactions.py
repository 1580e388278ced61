"""The transactional producer's half that talks to the coordinators (KIP-98, KIP-447).

A `Producer(transactional_id=...)` owns one TransactionManager. The manager keeps the
transaction's state, as Java's TransactionManager names it, and makes the requests:

    UNINITIALIZED --init_transactions--> READY --begin--> IN_TRANSACTION
    IN_TRANSACTION --commit--> COMMITTING --EndTxn(commit)--> READY
    IN_TRANSACTION | ABORTABLE_ERROR --abort--> ABORTING --EndTxn(abort)--> READY
    a failed batch or offset commit: IN_TRANSACTION -> ABORTABLE_ERROR (only abort leaves it)
    fenced (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH) or refused for good: -> FATAL_ERROR

Requests, each to the transaction coordinator (FindCoordinator with key type 1) unless named:
- InitProducerId(transactional_id, transaction_timeout_ms): the producer id and a new epoch, which
  fences every older producer with the same transactional id; after an abort that left a gap in
  a partition's sequence, again with the current id and epoch (KIP-360) to bump the epoch;
- AddPartitionsToTxn before a partition's first batch of the transaction is sent (the sender
  holds the partition's batches until it is answered);
- AddOffsetsToTxn(group) then TxnOffsetCommit to the group's coordinator, carrying the consumer's
  generation and member id when given (KIP-447: a zombie consumer-producer is refused);
- EndTxn(commit or abort).
Coordinators that moved or are loading (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
COORDINATOR_LOAD_IN_PROGRESS), CONCURRENT_TRANSACTIONS (the previous transaction is still being
completed) and lost connections are retried after retry_backoff_ms, each call within max_block_ms
(Java's bound for initTransactions, commitTransaction and abortTransaction); past it
KafkaTimeoutError, and the same call may be made again to resume.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Callable, Mapping
from typing import Any

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.add_offsets_to_txn import AddOffsetsToTxnRequest
from epochlog.protocol.apis.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from epochlog.protocol.apis.end_txn import EndTxnRequest
from epochlog.protocol.apis.init_producer_id import InitProducerIdRequest
from epochlog.protocol.apis.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from epochlog.protocol.error_codes import ErrorCode

from .accumulator import ProducerIdentity
from .cluster import ClusterClient
from .errors import (
    InvalidTxnStateError,
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    ProducerFencedError,
    error_for,
)
from .types import TopicPartition

log = logging.getLogger("epochlog.producer")

E = ErrorCode
GROUP, TRANSACTION = 0, 1  # FindCoordinator key types
CONCURRENT_BACKOFF_S = 0.02  # Java's ADD_PARTITIONS_RETRY_BACKOFF_MS, for CONCURRENT_TRANSACTIONS
# Answers after which the same request is asked again (the coordinator is looked up again first
# for the first three).
_MOVED = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE,
                    E.COORDINATOR_LOAD_IN_PROGRESS})
_AGAIN = _MOVED | {E.CONCURRENT_TRANSACTIONS, E.REQUEST_TIMED_OUT,
                   E.UNKNOWN_TOPIC_OR_PARTITION}
# Answers that end the producer: a newer one took the transactional id, or it may never use it.
FENCED = frozenset({E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH})
# (UNKNOWN_PRODUCER_ID is not: a partition leader that lost our state answers it to a batch,
# and, as in Java since KIP-360, the transaction is aborted and the epoch bumped.)
_FATAL = FENCED | {E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, E.INVALID_TXN_STATE,
                   E.INVALID_PRODUCER_ID_MAPPING, E.UNSUPPORTED_VERSION,
                   E.INVALID_TRANSACTION_TIMEOUT, E.CLUSTER_AUTHORIZATION_FAILED}
# TxnOffsetCommit answers saying the consumer is not (any more) the member it was (KIP-447).
_NOT_MEMBER = frozenset({E.UNKNOWN_MEMBER_ID, E.ILLEGAL_GENERATION, E.FENCED_INSTANCE_ID})


class TxnState(enum.Enum):
    UNINITIALIZED = "Uninitialized"
    INITIALIZING = "Initializing"
    READY = "Ready"
    IN_TRANSACTION = "InTransaction"
    COMMITTING = "CommittingTransaction"
    ABORTING = "AbortingTransaction"
    ABORTABLE_ERROR = "AbortableError"
    FATAL_ERROR = "FatalError"


class _Retry(Exception):
    """An answer or failure after which the request is made again (after the backoff)."""

    def __init__(self, error: KafkaError, moved: bool, soon: bool = False) -> None:
        super().__init__(str(error))
        self.error = error
        self.moved = moved
        self.soon = soon  # CONCURRENT_TRANSACTIONS: the previous transaction ends in ms


class TransactionManager:
    def __init__(self, cluster: ClusterClient, identity: ProducerIdentity, *,
                 transactional_id: str, transaction_timeout_ms: int, retry_backoff_s: float,
                 max_block_s: float) -> None:
        self.cluster = cluster
        self.identity = identity
        self.transactional_id = transactional_id
        self.timeout_ms = transaction_timeout_ms
        self.backoff_s = retry_backoff_s
        self.max_block_s = max_block_s
        self.state = TxnState.UNINITIALIZED
        self.error: KafkaError | None = None  # why ABORTABLE_ERROR or FATAL_ERROR
        self.partitions: set[TopicPartition] = set()  # in the open transaction
        self.pending: set[TopicPartition] = set()  # written to, not yet added
        self.adding: asyncio.Task[None] | None = None
        self.offsets_added = False
        self.bump_needed = False  # an abort must bump the epoch (a sequence has a gap)
        self._coordinator: int | None = None
        self.commits = 0
        self.aborts = 0

    # ----------------------------------------------------------------- checks, state
    def check_can_send(self) -> None:
        """Raise unless records may be sent now (a transaction is open and healthy)."""
        if self.state is TxnState.IN_TRANSACTION:
            return
        self.raise_failure()
        raise InvalidTxnStateError(f"send() needs an open transaction (begin_transaction()); "
                                   f"the producer is {self.state.value}")

    def raise_failure(self) -> None:
        """Raise what put the producer in ABORTABLE_ERROR or FATAL_ERROR (nothing otherwise)."""
        if self.state is TxnState.ABORTABLE_ERROR or self.state is TxnState.FATAL_ERROR:
            assert self.error is not None
            raise type(self.error)(f"{self.error} (abort it)"
                                   if self.state is TxnState.ABORTABLE_ERROR else
                                   f"the producer can no longer be used: {self.error}")

    def may_send(self, tp: TopicPartition) -> bool:
        return tp in self.partitions

    def begin(self) -> None:
        if self.state is TxnState.FATAL_ERROR:
            self.raise_failure()
        if self.state is not TxnState.READY:
            raise InvalidTxnStateError(f"begin_transaction() in state {self.state.value}"
                                       + (": call init_transactions() first"
                                          if self.state is TxnState.UNINITIALIZED else ""))
        self.state = TxnState.IN_TRANSACTION

    def failed(self, exc: BaseException) -> None:
        """A batch or an offset commit of the open transaction failed with exc."""
        if self.state is TxnState.FATAL_ERROR:
            return
        code = getattr(exc, "code", None)
        if code in FENCED or code in _FATAL:
            self._to_fatal(exc if isinstance(exc, KafkaError) else KafkaError(str(exc)))
        elif self.state in (TxnState.IN_TRANSACTION, TxnState.COMMITTING):
            self.state = TxnState.ABORTABLE_ERROR
            self.error = exc if isinstance(exc, KafkaError) else KafkaError(repr(exc))
            log.info("transactional id %s: the transaction must be aborted: %s",
                     self.transactional_id, exc)

    def _to_fatal(self, exc: KafkaError) -> None:
        if exc.code in FENCED and not isinstance(exc, ProducerFencedError):
            exc = ProducerFencedError(f"{exc}: a newer producer with transactional id "
                                      f"{self.transactional_id!r} fenced this one")
        self.state, self.error = TxnState.FATAL_ERROR, exc
        log.warning("transactional id %s: the producer can no longer be used: %s",
                    self.transactional_id, exc)

    # ----------------------------------------------------------------- the calls
    async def init(self) -> None:
        if self.state is TxnState.FATAL_ERROR:
            self.raise_failure()
        if self.state not in (TxnState.UNINITIALIZED, TxnState.INITIALIZING):
            raise InvalidTxnStateError(f"init_transactions() in state {self.state.value}")
        self.state = TxnState.INITIALIZING
        await self._init_producer_id(bump=False)
        self.state = TxnState.READY

    async def _init_producer_id(self, bump: bool) -> None:
        request = InitProducerIdRequest(
            transactional_id=self.transactional_id, transaction_timeout_ms=self.timeout_ms,
            producer_id=self.identity.producer_id if bump else -1,
            producer_epoch=self.identity.producer_epoch if bump else -1)
        answer = await self._call("init the producer id", ApiKey.INIT_PRODUCER_ID, request)
        self.identity.producer_id = answer.producer_id
        self.identity.producer_epoch = answer.producer_epoch
        log.info("transactional id %s: producer id %d epoch %d", self.transactional_id,
                 answer.producer_id, answer.producer_epoch)

    async def add_pending(self) -> set[TopicPartition]:
        """AddPartitionsToTxn for the partitions written to since the last; the ones added.
        Raises what failed it (the transaction is then abortable or the producer fatal)."""
        wanted = set(self.pending)
        if not wanted:  # an abort cleared them before this task ran: nothing to add
            return wanted
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(wanted):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.transactional_id,
            v3_and_below_producer_id=self.identity.producer_id,
            v3_and_below_producer_epoch=self.identity.producer_epoch,
            v3_and_below_topics=[AddPartitionsToTxnTopic(name=t, partitions=ps)
                                 for t, ps in by_topic.items()])

        def first_error(answer: Any) -> int:
            codes = [p.partition_error_code for t in answer.results_by_topic_v3_and_below
                     for p in t.results_by_partition if p.partition_error_code]
            # OPERATION_NOT_ATTEMPTED: another partition's error stopped the whole request
            real = [c for c in codes if c != E.OPERATION_NOT_ATTEMPTED]
            return int((real or codes or [0])[0])

        try:
            await self._call(f"add partitions {_names(wanted)} to the transaction",
                             ApiKey.ADD_PARTITIONS_TO_TXN, request, error_of=first_error)
        except KafkaError as exc:
            self.failed(exc)
            raise
        self.partitions |= wanted
        self.pending -= wanted
        return wanted

    async def send_offsets(self, offsets: Mapping[TopicPartition, tuple[int, int]],
                           group: str | Mapping[str, Any]) -> None:
        """AddOffsetsToTxn, then TxnOffsetCommit at the group's coordinator."""
        self.check_can_send()
        if isinstance(group, str):
            group_id, generation, member_id, instance_id = group, -1, "", None
        else:  # Consumer.group_metadata(): the member's identity, so a zombie is fenced
            group_id, generation = str(group["group_id"]), int(group["generation"])
            member_id, instance_id = str(group["member_id"]), group.get("group_instance_id")
        try:
            await self._call(f"add the offsets of group {group_id} to the transaction",
                             ApiKey.ADD_OFFSETS_TO_TXN, AddOffsetsToTxnRequest(
                                 transactional_id=self.transactional_id,
                                 producer_id=self.identity.producer_id,
                                 producer_epoch=self.identity.producer_epoch, group_id=group_id))
            self.offsets_added = True
            by_topic: dict[str, list[TxnOffsetCommitRequestPartition]] = {}
            for tp, (offset, epoch) in sorted(offsets.items()):
                by_topic.setdefault(tp.topic, []).append(TxnOffsetCommitRequestPartition(
                    partition_index=tp.partition, committed_offset=offset,
                    committed_leader_epoch=epoch, committed_metadata=""))
            request = TxnOffsetCommitRequest(
                transactional_id=self.transactional_id, group_id=group_id,
                producer_id=self.identity.producer_id, producer_epoch=self.identity.producer_epoch,
                generation_id=generation, member_id=member_id, group_instance_id=instance_id,
                topics=[TxnOffsetCommitRequestTopic(name=t, partitions=ps)
                        for t, ps in by_topic.items()])

            def first_error(answer: Any) -> int:
                return next((p.error_code for t in answer.topics for p in t.partitions
                             if p.error_code), 0)

            await self._call(f"commit the offsets of group {group_id} in the transaction",
                             ApiKey.TXN_OFFSET_COMMIT, request, error_of=first_error,
                             key=group_id, key_type=GROUP)
        except KafkaError as exc:
            self.failed(exc)
            raise

    async def end(self, commit: bool) -> None:
        """EndTxn, when the coordinator knows of the transaction; then READY again. The caller
        has waited for every batch of it."""
        what = "commit" if commit else "abort"
        if self.partitions or self.offsets_added:
            await self._call(f"{what} the transaction", ApiKey.END_TXN, EndTxnRequest(
                transactional_id=self.transactional_id, producer_id=self.identity.producer_id,
                producer_epoch=self.identity.producer_epoch, committed=commit))
        if not commit and self.bump_needed:
            await self._init_producer_id(bump=True)
            self.bump_needed = False
        self.partitions.clear()
        self.pending.clear()
        self.offsets_added = False
        self.error = None
        self.state = TxnState.READY
        if commit:
            self.commits += 1
        else:
            self.aborts += 1

    # ----------------------------------------------------------------- requests
    async def _call(self, what: str, api_key: int, request: Any, *,
                    error_of: Callable[[Any], int] = lambda a: int(a.error_code),
                    key_type: int = TRANSACTION, key: str | None = None) -> Any:
        """The request to the coordinator of `key` (our transactional id by default), asked
        again while the answer says to, within max_block_ms. Raises the answer's error."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.max_block_s
        last: KafkaError | None = None
        while True:
            try:
                return await self._once(what, api_key, request, error_of, key_type,
                                        key if key is not None else self.transactional_id)
            except _Retry as again:
                last = again.error
                if again.moved and key_type == TRANSACTION:
                    self._coordinator = None
                # Java's: the next transaction's first request usually meets the last one's
                # markers still being written, so it is asked again sooner than the backoff
                backoff_s = min(self.backoff_s, CONCURRENT_BACKOFF_S) if again.soon \
                    else self.backoff_s
            if loop.time() + backoff_s >= deadline:
                raise KafkaTimeoutError(f"{what}: not done within max_block_ms "
                                        f"({self.max_block_s * 1000:.0f} ms); last error: {last}")
            await asyncio.sleep(backoff_s)

    async def _once(self, what: str, api_key: int, request: Any,
                    error_of: Callable[[Any], int], key_type: int, key: str) -> Any:
        try:
            node = await self._find(key, key_type)
            answer = await self.cluster.request_broker(node, api_key, request)
        except (ConnectionError, OSError, TimeoutError) as exc:
            raise _Retry(KafkaConnectionError(f"{what}: {exc}"), moved=True) from exc
        code = error_of(answer)
        if not code:
            return answer
        error = error_for(code, what)
        if code in _AGAIN:
            raise _Retry(error, moved=code in _MOVED, soon=code == E.CONCURRENT_TRANSACTIONS)
        if code in FENCED or code in _FATAL:
            self._to_fatal(error)
            assert self.error is not None
            raise self.error
        raise error

    async def _find(self, key: str, key_type: int) -> int:
        if key_type == TRANSACTION and self._coordinator is not None:
            return self._coordinator
        code, node = await self.cluster.find_coordinator(key, key_type)
        if code:
            error = error_for(code, f"find the coordinator of {key}")
            if code in _AGAIN:
                raise _Retry(error, moved=True)
            if code in _FATAL:
                self._to_fatal(error)
            raise error
        if key_type == TRANSACTION:
            if self._coordinator != node:
                log.info("transactional id %s: coordinator is broker %d", key, node)
            self._coordinator = node
        return node


def _names(tps: set[TopicPartition]) -> str:
    return ", ".join(f"{tp.topic}-{tp.partition}" for tp in sorted(tps))

