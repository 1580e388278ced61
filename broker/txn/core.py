"""`TxnCore`: the transaction coordinator's decisions, sans-IO (no I/O, no clock, no asyncio).

Theory of operation
-------------------
The core holds the `__transaction_state` partitions we lead as shards (coordinator_shards.py),
each with its `TxnState` (state.py: what each request does to its id). A driver feeds it events
and carries out the actions it returns, in order: coordinator.py's `TxnCoordinator` in the
broker, the transaction simulation's broker in tests/sim.

    events in                                          actions out
    partition_applied / leadership_lost / unload_all   Load(index, epoch)   read the log: replay()
    replay(...) each record, then loaded(...)                                each record, loaded()
    init_producer_id / add_partitions / end_txn,       Append(id, index, epoch, records, errors)
      each with the driver's token                                          then appended(id, ..)
    appended(append_id, error, first offset)           Resolve(token, answer) answer a request
    markers_done(now_ms, w) / markers_given_up(w, ..)  WriteMarkers(...)   the second phase
    tick(now_ms), at next_deadline_ms()                CoordinatorAbort(...) for observers
    queries, answered at once: describe, list_transactions, id_counts

- A request's answer is the state machine's `Answer` (kept as it is: one decision, an error or
  a transition to write): an error is resolved at once; a transition is appended (`_write`) and,
  once replicated, applied (`written`) or dropped (`write_failed`) before the request is
  answered. An append that ends after its shard was unloaded answers NOT_COORDINATOR (the next
  coordinator reads the log as it is). Append errors map as Kafka's transaction state manager
  maps them (_WRITE_ERRORS).
- The second phase: once a Prepare* is written (EndTxn, an InitProducerId that fences an open
  transaction, a timeout), or found in the log by a load, the core asks for its markers
  (`WriteMarkers`, one at a time per id); once the driver reports them all written, Complete*
  is written, retried after a failure with a backoff from retry_first_ms to retry_max_ms while
  the shard is ours. A newer coordinator's marker (fenced) or a lost leadership ends it.
- `tick` (every min(check_ms, expiration_check_ms)) aborts the transactions past their timeout,
  bumping the epoch so that their producer is fenced; every expiration_check_ms it writes a
  tombstone for the ids idle past expiration_ms (at most EXPIRE_BATCH_MAX an append). The retries
  of Complete* run at their time, too.
- `CoordinatorAbort` says the core is aborting the open transaction of a producer epoch it
  fences, and why: the broker's driver has nothing to do with it, the simulation's checkers
  hold the producer to it.
Producer ids come from the injected allocator (producer_ids.py in the broker): one it cannot
reserve (OSError) answers COORDINATOR_NOT_AVAILABLE.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from epochlog.protocol.error_codes import ErrorCode

from ..coordinator_shards import Append, Load, Resolve, Shard, ShardedCore, Shards
from . import log_records
from .log_records import Status, TxnLogEntry
from .state import PREPARED, TxnMetadata, TxnState

log = logging.getLogger("epochlog.broker")
E = ErrorCode

TXN_TOPIC = "__transaction_state"
TICK_MS = 1000  # how often transactions are checked against their timeouts
RETRY_FIRST_MS = 50  # a failed Complete* is written again after this, doubling
RETRY_MAX_MS = 1000
EXPIRED_NAMED_MAX = 10  # ids an expiry's log line names
EXPIRE_BATCH_MAX = 500  # tombstones per append (a bounded batch); the rest at the next check

_WRITE_ERRORS: dict[int, int] = {
    E.UNKNOWN_TOPIC_OR_PARTITION: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_ENOUGH_REPLICAS_AFTER_APPEND: E.COORDINATOR_NOT_AVAILABLE,
    E.REQUEST_TIMED_OUT: E.COORDINATOR_NOT_AVAILABLE,
    E.NOT_LEADER_OR_FOLLOWER: E.NOT_COORDINATOR,
    E.KAFKA_STORAGE_ERROR: E.NOT_COORDINATOR,
    E.MESSAGE_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
    E.RECORD_LIST_TOO_LARGE: E.UNKNOWN_SERVER_ERROR,
}


@dataclass(frozen=True)
class ProducerIdAndEpoch:
    error: int
    producer_id: int = -1
    producer_epoch: int = -1


@dataclass(frozen=True)
class WriteMarkers:
    """Write the COMMIT (commit) or ABORT markers of (producer_id, producer_epoch) to every
    partition of the transaction (markers.py), as coordinator epoch `leader_epoch`, for as long
    as we lead shard `index` at that epoch; then report `markers_done` or `markers_given_up`
    with this action."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool
    partitions: frozenset[tuple[str, int]]
    index: int
    leader_epoch: int


@dataclass(frozen=True)
class CoordinatorAbort:
    """The open transaction of (producer_id, producer_epoch) is being aborted by the
    coordinator, its producer fenced: `why` is "fenced" (a new producer took the id) or
    "timed out"."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    why: str


TxnAnswer = ProducerIdAndEpoch | int
Action = Resolve[TxnAnswer] | Append | Load | WriteMarkers | CoordinatorAbort


@dataclass
class TxnCounters:
    """Since start, for the broker's metrics."""

    inits_total: int = 0  # InitProducerId answered with a producer id and epoch
    committed_total: int = 0  # transactions completed (markers written, Complete* written)
    aborted_total: int = 0
    timed_out_total: int = 0  # aborted by us, past their timeout (their producer fenced)
    fenced_total: int = 0  # open transactions aborted because a new producer took the id
    expired_total: int = 0  # ids forgotten after transactional_id_expiration_ms
    loads_total: int = 0  # state partitions loaded (became coordinator)


@dataclass(frozen=True)
class _Retry:
    shard: Shard[TxnState]
    due_ms: int
    delay_ms: int  # the wait after this attempt, should it fail too


# an append's continuation: (now_ms, error, offset of its first record) -> actions
_Then = Callable[[int, int, int], list[Action]]
TxnShard = Shard[TxnState]


class TxnCore(ShardedCore[TxnState, Action, _Then]):
    def __init__(self, new_producer_id: Callable[[], int], *,
                 partition_of: Callable[[str], int], timeout_max_ms: int, expiration_ms: int,
                 expiration_check_ms: int, check_ms: int = TICK_MS,
                 retry_first_ms: int = RETRY_FIRST_MS, retry_max_ms: int = RETRY_MAX_MS) -> None:
        self.partition_of = partition_of  # transactional id -> its state partition
        self.expiration_ms = expiration_ms
        self.expiration_check_ms = expiration_check_ms
        self.check_every_ms = min(check_ms, expiration_check_ms)
        self.retry_first_ms, self.retry_max_ms = retry_first_ms, retry_max_ms
        super().__init__(Shards(
            TXN_TOPIC, "transactional ids", lambda: TxnState(new_producer_id, timeout_max_ms),
            lambda state: len(state.ids)))
        self.counters = TxnCounters()
        self._completing: dict[str, TxnShard] = {}  # ids whose second phase is under way
        self._retries: dict[str, _Retry] = {}  # Complete* to write again
        self._next_check_ms = 0  # the first tick checks at once
        self._next_expiry_ms: int | None = None  # an expiration_check_ms after the first tick

    # ----------------------------------------------------------------------------- shards
    # An unloaded shard's requests are answered by their appends' continuations, its second
    # phases end with their markers (the driver stops once we no longer lead).

    def replay(self, index: int, leader_epoch: int, offset: int, key: bytes | None,
               value: bytes | None, *, producer_id: int = -1, transactional: bool = False,
               control: bool = False) -> None:
        """One record of the partition being loaded, in log order (control records, which the
        transaction log does not hold, are skipped)."""
        shard = self.shards.loading(index, leader_epoch)
        if shard is None or control:
            return
        shard.replayed += 1
        try:
            transactional_id, entry = log_records.parse(key, value, offset)
        except log_records.BadRecord as exc:
            log.error("%s-%d: skipped: %s", TXN_TOPIC, index, exc)
            return
        shard.held.load(transactional_id, entry)

    def loaded(self, now_ms: int, index: int, leader_epoch: int, log_start: int, log_end: int,
               took_ms: int) -> list[Action]:
        """The partition's log is replayed: the ids left in Prepare* are completed."""
        shard = self.shards.loading(index, leader_epoch)
        if shard is None:
            return []
        self.counters.loads_total += 1
        self.shards.loaded(shard, log_start, log_end, took_ms)
        return [a for t in shard.held.unfinished() for a in self._complete_soon(shard, t)]

    def _shard(self, transactional_id: str) -> TxnShard | int:
        return self.shards.lookup(self.partition_of(transactional_id))

    # -------------------------------------------------------------------------- the log
    def appended(self, now_ms: int, append_id: int, error: int, first_offset: int
                 ) -> list[Action]:
        """An Append is replicated (error 0) or failed."""
        return self._continuation(append_id)(now_ms, error, first_offset)

    def _write(self, shard: TxnShard, transactional_id: str, entry: TxnLogEntry,
               then: Callable[[int, int], list[Action]]) -> Append:
        """Append the id's new state; once replicated, apply it; then `then(now_ms, error)`."""

        def written(now_ms: int, error: int, _: int) -> list[Action]:
            error = _WRITE_ERRORS.get(error, error)
            if not self.shards.current(shard):
                return then(now_ms, error or E.NOT_COORDINATOR)  # the new leader reloads it
            if error:
                shard.held.write_failed(transactional_id)
                log.info("transactional id %s: writing %s failed: %s", transactional_id,
                         entry.status.kafka_name, E(error).name)
                return then(now_ms, error)
            shard.held.written(transactional_id, entry)
            return then(now_ms, 0)

        records = [(log_records.txn_key(transactional_id), log_records.txn_value(entry))]
        return self._append(shard, records, _WRITE_ERRORS, written)

    # -------------------------------------------------------------------------- requests
    def init_producer_id(self, now_ms: int, transactional_id: str, timeout_ms: int,
                         expected: tuple[int, int] | None, token: int) -> list[Action]:
        """InitProducerId with a transactional id: the id's producer id and a new epoch, which
        fences every earlier producer of the id."""
        shard = self._shard(transactional_id)
        if isinstance(shard, int):
            return [Resolve(token, ProducerIdAndEpoch(shard))]
        try:
            answer = shard.held.init_producer_id(transactional_id, timeout_ms, now_ms, expected)
        except OSError as exc:  # the next block of producer ids could not be reserved
            log.warning("transactional id %s: no producer id: %s", transactional_id, exc)
            return [Resolve(token, ProducerIdAndEpoch(E.COORDINATOR_NOT_AVAILABLE))]
        given = ProducerIdAndEpoch(answer.error, answer.producer_id, answer.producer_epoch)
        write = answer.write
        if write is None:
            if not answer.error:
                self.counters.inits_total += 1
            return [Resolve(token, given)]

        def written(now_ms: int, error: int) -> list[Action]:
            if error:
                return [Resolve(token, ProducerIdAndEpoch(error))]
            actions: list[Action] = []
            if write.status in PREPARED:  # fenced an open transaction: abort it
                self.counters.fenced_total += 1
                log.info("transactional id %s: a new producer fences epoch %d and aborts its "
                         "transaction", transactional_id, write.producer_epoch - 1)
                actions.append(CoordinatorAbort(transactional_id, write.producer_id,
                                                write.producer_epoch - 1, "fenced"))
                actions += self._complete_soon(shard, transactional_id)
            else:
                log.info("transactional id %s: producer id %d at epoch %d", transactional_id,
                         write.producer_id, write.producer_epoch)
            if not answer.error:
                self.counters.inits_total += 1
            return [*actions, Resolve(token, given)]

        return [self._write(shard, transactional_id, write, written)]

    def add_partitions(self, now_ms: int, transactional_id: str, producer_id: int,
                       producer_epoch: int, partitions: Iterable[tuple[str, int]],
                       token: int) -> list[Action]:
        """AddPartitionsToTxn (and AddOffsetsToTxn's offsets partition): an error code."""
        shard = self._shard(transactional_id)
        if isinstance(shard, int):
            return [Resolve(token, shard)]
        answer = shard.held.add_partitions(transactional_id, producer_id, producer_epoch,
                                           partitions, now_ms)
        if answer.write is None:
            return [Resolve(token, answer.error)]
        return [self._write(shard, transactional_id, answer.write,
                            lambda now_ms, error: [Resolve(token, error)])]

    def end_txn(self, now_ms: int, transactional_id: str, producer_id: int, producer_epoch: int,
                commit: bool, token: int) -> list[Action]:
        """EndTxn: the decision written (Prepare*), the markers then on their way."""
        shard = self._shard(transactional_id)
        if isinstance(shard, int):
            return [Resolve(token, shard)]
        answer = shard.held.end_txn(transactional_id, producer_id, producer_epoch, commit, now_ms)
        if answer.write is None:
            return [Resolve(token, answer.error)]

        def written(now_ms: int, error: int) -> list[Action]:
            if error:
                return [Resolve(token, error)]
            return [*self._complete_soon(shard, transactional_id), Resolve(token, answer.error)]

        return [self._write(shard, transactional_id, answer.write, written)]

    # ------------------------------------------------------------------- the second phase
    def _complete_soon(self, shard: TxnShard, transactional_id: str) -> list[Action]:
        if self._completing.get(transactional_id) is shard:
            return []
        m = shard.held.ids.get(transactional_id)
        if m is None or m.status not in PREPARED:
            return []
        self._completing[transactional_id] = shard
        e = m.entry
        return [WriteMarkers(transactional_id, e.producer_id, e.producer_epoch,
                             e.status is Status.PREPARE_COMMIT, e.partitions, shard.index,
                             shard.leader_epoch)]

    def _completion(self, w: WriteMarkers) -> TxnShard | None:
        """The shard whose second phase w is, if that is still under way."""
        shard = self._completing.get(w.transactional_id)
        if shard is None or (shard.index, shard.leader_epoch) != (w.index, w.leader_epoch):
            return None
        return shard

    def _completed(self, shard: TxnShard, transactional_id: str) -> None:
        if self._completing.get(transactional_id) is shard:
            del self._completing[transactional_id]

    def markers_done(self, now_ms: int, w: WriteMarkers) -> list[Action]:
        """Every partition of w holds its marker: Complete* is written."""
        shard = self._completion(w)
        if shard is None:
            return []
        return self._finish(now_ms, shard, w.transactional_id, self.retry_first_ms)

    def markers_given_up(self, w: WriteMarkers, fenced: str | None) -> list[Action]:
        """The markers were not all written: we stopped leading (the next coordinator writes
        them again), or `fenced` says which partition holds a newer coordinator's marker."""
        if fenced is not None:
            log.warning("transactional id %s: markers not written, %s", w.transactional_id,
                        fenced)
        shard = self._completion(w)
        if shard is not None:
            self._completed(shard, w.transactional_id)
        return []

    def _finish(self, now_ms: int, shard: TxnShard, transactional_id: str,
                delay_ms: int) -> list[Action]:
        """Write Complete*; on failure again after delay_ms (doubling) while the shard is ours."""
        if not self.shards.current(shard):
            self._completed(shard, transactional_id)
            return []
        m = shard.held.ids.get(transactional_id)
        answer = shard.held.markers_written(transactional_id, now_ms)
        if m is None or answer.write is None:
            self._completed(shard, transactional_id)
            return []
        prepared = m.entry
        commit = prepared.status is Status.PREPARE_COMMIT

        def written(now_ms: int, error: int) -> list[Action]:
            if not error:
                if commit:
                    self.counters.committed_total += 1
                else:
                    self.counters.aborted_total += 1
                log.debug("transactional id %s: producer id %d epoch %d %s in %d partitions",
                          transactional_id, prepared.producer_id, prepared.producer_epoch,
                          "committed" if commit else "aborted", len(prepared.partitions))
                self._completed(shard, transactional_id)
            else:  # again after delay_ms, if the shard is still ours then
                self._retries[transactional_id] = _Retry(
                    shard, now_ms + delay_ms, min(delay_ms * 2, self.retry_max_ms))
            return []

        return [self._write(shard, transactional_id, answer.write, written)]

    # ------------------------------------------------------------------------- timers
    def tick(self, now_ms: int) -> list[Action]:
        """Complete* retries that are due; every check_every_ms the transactions past their
        timeout, and every expiration_check_ms the ids past their expiration."""
        actions: list[Action] = []
        for transactional_id, retry in list(self._retries.items()):
            if retry.due_ms <= now_ms:
                del self._retries[transactional_id]
                actions += self._finish(now_ms, retry.shard, transactional_id, retry.delay_ms)
        if now_ms < self._next_check_ms:
            return actions
        self._next_check_ms = now_ms + self.check_every_ms
        if self._next_expiry_ms is None:
            self._next_expiry_ms = now_ms + self.expiration_check_ms
        check_expiry = now_ms >= self._next_expiry_ms
        if check_expiry:
            self._next_expiry_ms = now_ms + self.expiration_check_ms
        for shard in self.shards:
            if shard.loading:
                continue
            for transactional_id in shard.held.timed_out(now_ms):
                answer = shard.held.abort_timed_out(transactional_id, now_ms)
                if answer.write is not None:
                    actions.append(self._abort(shard, transactional_id, answer.write))
            if check_expiry:
                actions += self._expire(shard, shard.held.expired(now_ms, self.expiration_ms))
        return actions

    def next_deadline_ms(self) -> int | None:
        return min([self._next_check_ms, *(r.due_ms for r in self._retries.values())])

    def _abort(self, shard: TxnShard, transactional_id: str, entry: TxnLogEntry) -> Append:
        def written(now_ms: int, error: int) -> list[Action]:
            if error:
                return []
            self.counters.timed_out_total += 1
            log.info("transactional id %s: aborting the transaction past its timeout of %d ms "
                     "(producer epoch now %d)", transactional_id, entry.timeout_ms,
                     entry.producer_epoch)
            return [CoordinatorAbort(transactional_id, entry.producer_id,
                                     entry.producer_epoch - 1, "timed out"),
                    *self._complete_soon(shard, transactional_id)]

        return self._write(shard, transactional_id, entry, written)

    def _expire(self, shard: TxnShard, transactional_ids: list[str]) -> list[Action]:
        """A tombstone for each id (in one append of at most EXPIRE_BATCH_MAX; the rest wait for
        the next check), then the ids are forgotten."""
        ids = [t for t in transactional_ids[:EXPIRE_BATCH_MAX] if shard.held.begin_expire(t)]
        if not ids:
            return []

        def written(now_ms: int, error: int, _: int) -> list[Action]:
            if not self.shards.current(shard):
                return []  # unloaded meanwhile: the next coordinator reads the log as it is
            for t in ids:
                if error:
                    shard.held.write_failed(t)
                else:
                    shard.held.expire_written(t)
            if error:
                log.info("%s-%d: expiring %d transactional ids failed: %s", TXN_TOPIC,
                         shard.index, len(ids), E(_WRITE_ERRORS.get(error, error)).name)
                return []
            self.counters.expired_total += len(ids)
            log.info("%s-%d: %d transactional ids expired (no transaction for %d ms): %s",
                     TXN_TOPIC, shard.index, len(ids), self.expiration_ms,
                     ", ".join(ids[:EXPIRED_NAMED_MAX]) + (" ..." if len(ids) > EXPIRED_NAMED_MAX
                                                           else ""))
            return []

        return [self._append(shard, [(log_records.txn_key(t), None) for t in ids], _WRITE_ERRORS,
                             written)]

    # ---------------------------------------------------------------------- describing
    def describe(self, transactional_id: str) -> tuple[int, TxnMetadata | None]:
        """DescribeTransactions: (error, the id's state)."""
        shard = self._shard(transactional_id)
        if isinstance(shard, int):
            return shard, None
        m = shard.held.ids.get(transactional_id)
        if m is None or m.entry.producer_epoch < 0:
            return E.TRANSACTIONAL_ID_NOT_FOUND, None
        return 0, m

    def list_transactions(self, now_ms: int, states: set[Status] | None,
                          producer_ids: set[int] | None, open_longer_than_ms: int
                          ) -> tuple[int, list[TxnMetadata]]:
        """ListTransactions over the ids this broker coordinates: (error, their states).
        COORDINATOR_LOAD_IN_PROGRESS (with what is loaded) while a partition loads."""
        error = 0
        found: list[TxnMetadata] = []
        for shard in self.shards:
            if shard.loading:
                error = E.COORDINATOR_LOAD_IN_PROGRESS
                continue
            for m in shard.held.ids.values():
                e = m.entry
                if e.producer_epoch < 0 or (states is not None and e.status not in states) or (
                        producer_ids is not None and e.producer_id not in producer_ids):
                    continue
                if open_longer_than_ms >= 0 and not (
                        e.status is Status.ONGOING and now_ms - e.start_ms > open_longer_than_ms):
                    continue
                found.append(m)
        return error, sorted(found, key=lambda m: m.transactional_id)

    def id_counts(self) -> dict[str, int]:
        """Ids coordinated here by state (Kafka's names), for the metrics."""
        return dict(Counter(m.status.kafka_name for s in self.shards
                            for m in list(s.held.ids.values())))
