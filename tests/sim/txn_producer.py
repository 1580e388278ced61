"""A simulated transactional producer process, following the rules of client/transactions.py
(the real TransactionManager is asyncio code around the cluster client, so it is mirrored here,
as the cluster simulation's producer mirrors the real one).

Theory of operation
-------------------
A process inits (InitProducerId: its id's producer id and a new epoch, which fences every older
producer of the id), then runs transactions one after another: AddPartitionsToTxn for 1-3
partitions, 1-2 transactional batches to each (real RecordBatches with the epoch and per
partition sequences, which restart at 0 with each new epoch), then EndTxn, commit or (now and
then) abort. Each record's value names its transaction (`tid/process/life/number/record`).

As the real client: coordinator calls are asked again after NOT_COORDINATOR,
COORDINATOR_NOT_AVAILABLE, COORDINATOR_LOAD_IN_PROGRESS (after a new FindCoordinator),
CONCURRENT_TRANSACTIONS, a timeout or a lost connection, every retry_backoff_ms within
max_block_ms (past it the application gives up: the process exits). PRODUCER_FENCED,
INVALID_PRODUCER_EPOCH and the other fatal answers end the producer (it exits; its supervisor
starts it again, which is a re-init). A failed batch makes the transaction abortable; its abort
then bumps the epoch (KIP-360: InitProducerId naming the current id and epoch).

Faults it takes (txn_harness.py): crash, pause (a zombie when it resumes after a newer producer
or the coordinator's timeout fenced it), and dawdling past its transaction timeout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnTopic,
)
from epochlog.protocol.apis.end_txn import EndTxnRequest
from epochlog.protocol.apis.init_producer_id import InitProducerIdRequest
from epochlog.protocol.error_codes import ErrorCode as E
from epochlog.protocol.records import build_batch

from .scheduler import Node, Scheduler
from .txn_broker import FIND, PRODUCE
from .txn_partitions import leader_of

if TYPE_CHECKING:
    from .network import Network
    from .txn_checkers import TxnCheckers

TP = tuple[str, int]
VERSION = 3  # InitProducerId v3 (KIP-360's bump), AddPartitionsToTxn v3, EndTxn v3
_MOVED = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE,
                    E.COORDINATOR_LOAD_IN_PROGRESS})
_AGAIN = _MOVED | {E.CONCURRENT_TRANSACTIONS, E.REQUEST_TIMED_OUT,
                   E.UNKNOWN_TOPIC_OR_PARTITION}
FENCED = frozenset({E.PRODUCER_FENCED, E.INVALID_PRODUCER_EPOCH})
RECORDS_PER_BATCH_MAX = 3


class ProducerNode(Node):
    def __init__(self, sim: Scheduler, node_id: int, name: str, network: Network,
                 checkers: TxnCheckers, tid: str, tps: list[TP], brokers: int, *,
                 txn_timeout_ms: int, request_timeout_ms: int, retry_backoff_ms: int,
                 max_block_ms: int, think_ms_max: int) -> None:
        super().__init__(sim, node_id, name)
        self.network = network
        self.checkers = checkers
        self.tid = tid
        self.tps = tps
        self.brokers = brokers
        self.txn_timeout_ms = txn_timeout_ms
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.max_block_ms = max_block_ms
        self.think_ms_max = think_ms_max
        self.draining = False  # after the heal: finish the transaction, begin no other
        self.dawdle_ms = 0  # the next transaction stalls this long before its end
        self.on_exit: Callable[[ProducerNode], None] = lambda node: None
        self._reset()

    def _reset(self) -> None:
        self.producer_id, self.producer_epoch = -1, -1
        self.coordinator: int | None = None
        self.sequences: dict[TP, int] = {}
        self.txn = 0
        self.tag = ""  # of the open transaction; "" between transactions
        self.writes: list[TP] = []
        self.records = 0
        self.commit = True
        self.bump_needed = False

    # ------------------------------------------------------------------------ lifecycle
    def on_start(self) -> None:
        self._reset()
        self._init(bump=False)

    def on_crash(self) -> None:
        self.network.crashed(self)
        if self.tag:
            self.checkers.abandoned(self.tag, "crashed")

    def _exit(self, why: str) -> None:
        self.sim.log(f"{self.name}: exits: {why}")
        if self.tag:
            self.checkers.abandoned(self.tag, why)
            self.tag = ""
        self.crash()
        self.on_exit(self)

    # ------------------------------------------------------------------------ init
    def _init(self, bump: bool) -> None:
        request = InitProducerIdRequest(
            transactional_id=self.tid, transaction_timeout_ms=self.txn_timeout_ms,
            producer_id=self.producer_id if bump else -1,
            producer_epoch=self.producer_epoch if bump else -1)
        self._call(ApiKey.INIT_PRODUCER_ID, request, lambda a: int(a.error_code), self._inited)

    def _inited(self, answer: Any) -> None:
        self.producer_id, self.producer_epoch = answer.producer_id, answer.producer_epoch
        self.sequences = {}
        self.bump_needed = False
        self.sim.log(f"{self.name}: {self.tid} is producer {self.producer_id} epoch "
                     f"{self.producer_epoch}")
        self._ready()

    def _ready(self) -> None:
        self.tag = ""
        if not self.draining:
            self.timer(self.sim.rng.randint(1, self.think_ms_max), self._begin)

    # ------------------------------------------------------------------------ a transaction
    def _begin(self) -> None:
        if self.draining or self.tag:
            return
        rng = self.sim.rng
        self.txn += 1
        self.tag = f"{self.tid}/{self.name}/{self.life}/{self.txn}"
        self.records = 0
        chosen = sorted(rng.sample(self.tps, rng.randint(1, min(3, len(self.tps)))))
        self.writes = [tp for tp in chosen for _ in range(rng.randint(1, 2))]
        rng.shuffle(self.writes)
        self.commit = rng.random() < 0.85
        self.checkers.began(self.tag, self.producer_id, self.producer_epoch)
        by_topic: dict[str, list[int]] = {}
        for topic, index in chosen:
            by_topic.setdefault(topic, []).append(index)
        request = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.tid, v3_and_below_producer_id=self.producer_id,
            v3_and_below_producer_epoch=self.producer_epoch,
            v3_and_below_topics=[AddPartitionsToTxnTopic(name=t, partitions=ps)
                                 for t, ps in by_topic.items()])
        self._call(ApiKey.ADD_PARTITIONS_TO_TXN, request, _first_add_error,
                   lambda _: self._write_next())

    def _write_next(self) -> None:
        if not self.writes:
            if self.dawdle_ms:  # the application stalls: the coordinator may time it out
                delay, self.dawdle_ms = self.dawdle_ms, 0
                self.timer(delay, self._end, self.commit)
            else:
                self._end(self.commit)
            return
        tp = self.writes.pop()
        n = self.sim.rng.randint(1, RECORDS_PER_BATCH_MAX)
        values = [f"{self.tag}/{self.records + i}".encode() for i in range(n)]
        self.records += n
        sequence = self.sequences.get(tp, 0)
        self.sequences[tp] = sequence + n
        batch = build_batch([(None, v, None, self.sim.now_ms) for v in values],
                            producer_id=self.producer_id, producer_epoch=self.producer_epoch,
                            base_sequence=sequence, is_transactional=True)
        self.network.call(self, leader_of(tp, self.brokers), PRODUCE, 0, (tp, batch),
                          self.request_timeout_ms, self._produced,
                          lambda why: self._produce_failed(E.REQUEST_TIMED_OUT, why))

    def _produced(self, answer: tuple[int, int]) -> None:
        error, _ = answer
        if error:
            self._produce_failed(error, E(error).name)
        else:
            self._write_next()

    def _produce_failed(self, error: int, why: str) -> None:
        if error in FENCED:
            self._exit(f"fenced on produce ({why})")
            return
        # the transaction is abortable; its sequence numbers were used: the abort bumps
        self.sim.log(f"{self.name}: a batch of {self.tag} failed ({why}): aborting")
        self.bump_needed = True
        self.writes = []
        self._end(False)

    def _end(self, commit: bool) -> None:
        if commit:
            self.checkers.commit_sent(self.tag)
        request = EndTxnRequest(transactional_id=self.tid, producer_id=self.producer_id,
                                producer_epoch=self.producer_epoch, committed=commit)
        self._call(ApiKey.END_TXN, request, lambda a: int(a.error_code),
                   lambda _: self._ended(commit))

    def _ended(self, commit: bool) -> None:
        self.checkers.told(self.tag, commit)
        self.sim.log(f"{self.name}: {'committed' if commit else 'aborted'} {self.tag}")
        self.tag = ""
        if not commit and self.bump_needed:
            self._init(bump=True)
        else:
            self._ready()

    # ------------------------------------------------------------------------ calls
    def _call(self, key: int, request: Any, error_of: Callable[[Any], int],
              on_ok: Callable[[Any], None]) -> None:
        """client/transactions.py's _call: asked again while the answer says so, within
        max_block_ms."""
        deadline = self.sim.now_ms + self.max_block_ms

        def again(moved: bool, why: str) -> None:
            if moved:
                self.coordinator = None
            if self.sim.now_ms + self.retry_backoff_ms >= deadline:
                self._exit(f"gave up: not done within max_block_ms ({why})")
                return
            self.timer(self.retry_backoff_ms, attempt)

        def answered(answer: Any) -> None:
            code = error_of(answer)
            if not code:
                on_ok(answer)
            elif code in _AGAIN:
                again(code in _MOVED, E(code).name)
            else:
                self._exit(f"{E(code).name} answered to {ApiKey(key).name}")

        def attempt() -> None:
            if self.coordinator is None:
                self._find(attempt, again)
                return
            self.network.call(self, self.coordinator, key, VERSION, request,
                              self.request_timeout_ms, answered,
                              lambda why: again(True, why))

        attempt()

    def _find(self, then: Callable[[], None], again: Callable[[bool, str], None]) -> None:
        def found(answer: tuple[int, int]) -> None:
            error, node = answer
            if error:
                again(True, E(error).name)
            else:
                self.coordinator = node
                then()

        broker = self.sim.rng.randint(1, self.brokers)
        self.network.call(self, broker, FIND, 0, self.tid, self.request_timeout_ms, found,
                          lambda why: again(True, why))


def _first_add_error(answer: Any) -> int:
    codes = [p.partition_error_code for t in answer.results_by_topic_v3_and_below
             for p in t.results_by_partition if p.partition_error_code]
    real = [c for c in codes if c != E.OPERATION_NOT_ATTEMPTED]
    return int((real or codes or [0])[0])
