"""`History`: what the clients of a test did, in the order they did it, to be judged by `check`.

    history = History()
    producer = adapter_confluent.Producer(conf, history=history)    # records itself
    history.record_fault("kill", (2,), "SIGKILL broker 2")           # the harness does this
    history.save(folder / "history.jsonl")
    verdict = check(history)

Theory of operation
-------------------
A history is one list of operations (`Op`s), appended in the order they are recorded under one
lock: producers' sends (recorded when the application calls send, and completed in place when the
acknowledgement or the error arrives), consumers' polls (the records handed to the application,
with offset and leader epoch), commits, rebalances (partitions assigned, revoked, lost),
truncations a consumer reported (a LogTruncationError, or a reset it announced), faults the
harness applied, and the declaration that loss is expected (an unclean election with acks=1).
Each op carries `t_ms`, monotonic milliseconds since the history began (for ordering and
latency), and `wall_ms`, the wall clock in ms since the epoch (to line up with logs). A send
also has `start_ms`, when the application called send; its `t_ms` is when the outcome arrived
(None while none has: such a send's outcome is unknown, as Jepsen's :info).

Recording is safe from any thread (confluent-kafka's delivery callbacks run on librdkafka's
threads) and from asyncio code: every method takes the lock for a few dictionary operations and
never waits for anything else, so it may be called on an event loop.

Records are identified by their value (Jepsen's model: each value is sent once), so give each
send a unique value; values and keys are kept as bytes (str is UTF-8 encoded; serialize other
types first; the adapters record what their serializers produce).

Memory is bounded per kind of op (`HistoryLimits`); the op that would pass a limit raises
`HistoryLimitError`, naming the limit, and the history is marked incomplete: `check` refuses an
incomplete history, since a missing send or poll would read as loss.

On disk a history is JSON lines (`save`, `load`): a header line, then one op per line, tagged by
its "type", with bytes in base64 (msgspec's JSON encoding), so a report folder can hold it and a
saved history can be checked again.
"""

from __future__ import annotations

import heapq
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import msgspec

HISTORY_FORMAT_VERSION = 2  # 2: transactions (Txn ops, Send.txn, Poll.read_committed)
FORMAT_VERSIONS_READ = (1, 2)  # version 1 is version 2 without them
LINE_BYTES_MAX = 64 << 20  # one saved op (a poll of many large records) at most this long

TopicPartitionPair = tuple[str, int]
RebalanceChange = Literal["assigned", "revoked", "lost"]
TruncationHow = Literal["error", "reset", "seek"]
TxnOutcome = Literal["commit", "abort"]


class HistoryLimitError(RuntimeError):
    """Recording one more op would pass a HistoryLimits bound; the message names it."""


class Op(msgspec.Struct, kw_only=True, tag_field="type", gc=False):
    t_ms: float | None  # monotonic ms since the history began; None: not happened (yet)
    wall_ms: int  # wall clock, ms since the Unix epoch, when the op was recorded


class Send(Op, tag="send"):
    """One record a producer was asked to send. Acknowledged: offset set (>= 0, or -1 when the
    broker acknowledged without telling the offset); failed: error set; neither: no outcome
    recorded (the producer closed or crashed first): indeterminate, as Jepsen's :info."""

    client: str
    topic: str
    partition: int | None  # None until the producer said (it picks one when none is given)
    key: bytes | None
    value: bytes | None
    start_ms: float  # when send was called
    offset: int | None = None
    leader_epoch: int | None = None
    error: str | None = None
    txn: str | None = None  # the transaction it was sent in (a Txn op's name), if any

    @property
    def acked(self) -> bool:
        return self.offset is not None and self.error is None


class Polled(msgspec.Struct, kw_only=True, gc=False, array_like=True):
    """One record a poll returned (array_like: a poll of many records stays compact on disk)."""

    topic: str
    partition: int
    offset: int
    leader_epoch: int | None
    key: bytes | None
    value: bytes | None


class Poll(Op, tag="poll"):
    client: str
    group: str | None
    records: list[Polled]
    read_committed: bool = False  # by a consumer with isolation_level="read_committed"


class Committed(msgspec.Struct, kw_only=True, gc=False, array_like=True):
    topic: str
    partition: int
    offset: int  # the next offset to read, as Kafka commits it
    leader_epoch: int | None


class Commit(Op, tag="commit"):
    client: str
    group: str | None
    offsets: list[Committed]
    error: str | None = None  # None: the coordinator accepted every offset


class Rebalance(Op, tag="rebalance"):
    """Partitions a consumer was given (assigned, also by a manual assign()), gave up (revoked)
    or had taken away (lost: its generation expired)."""

    client: str
    group: str | None
    change: RebalanceChange
    partitions: list[TopicPartitionPair]


class Truncation(Op, tag="truncation"):
    """A consumer reported that its position left the log it had read: `error`, a
    LogTruncationError (offset: the divergent offset); `reset`, the consumer announced it moved
    its position by itself (offset: where to); `seek`, the application moved it."""

    client: str
    group: str | None
    topic: str
    partition: int
    how: TruncationHow
    offset: int | None
    leader_epoch: int | None = None
    detail: str = ""


class Fault(Op, tag="fault"):
    kind: str  # "kill", "pause", "partition", "heal", ... (the harness's names)
    targets: list[int | str]  # broker ids, "controller", ...
    detail: str


class LossExpected(Op, tag="loss-expected"):
    """The scenario loses acknowledged writes by design (an unclean election with acks=1):
    check reports lost writes as expected rather than failing on them."""

    reason: str


class Txn(Op, tag="txn"):
    """A transaction's end: recorded when the application asks to commit or abort it
    (`start_ms`, `start_wall_ms`), completed with the outcome: `outcome` "commit" or "abort"
    once the producer said it succeeded, None while unknown (the call failed or never returned:
    the final log says which it was); `error` what the call raised."""

    client: str
    txn: str  # unique in the history; the sends of the transaction name it
    transactional_id: str
    wanted: TxnOutcome
    start_ms: float
    start_wall_ms: int
    outcome: TxnOutcome | None = None
    error: str | None = None


AnyOp = Send | Poll | Commit | Rebalance | Truncation | Fault | LossExpected | Txn


class Header(msgspec.Struct, kw_only=True, tag_field="type", tag="history"):
    version: int
    started_wall_ms: int
    incomplete: str | None = None


@dataclass(frozen=True)
class HistoryLimits:
    """How much one history may hold, per kind of op (polls count their records)."""

    sends_max: int = 2_000_000
    polled_records_max: int = 10_000_000
    commits_max: int = 500_000
    rebalances_max: int = 100_000
    truncations_max: int = 100_000
    faults_max: int = 100_000
    transactions_max: int = 500_000


_LIMIT_OF: dict[type[Op], str] = {
    Send: "sends_max", Poll: "polled_records_max", Commit: "commits_max",
    Rebalance: "rebalances_max", Truncation: "truncations_max", Fault: "faults_max",
    LossExpected: "faults_max", Txn: "transactions_max",
}
_ENCODER = msgspec.json.Encoder()
_OP_DECODER = msgspec.json.Decoder(AnyOp)
_HEADER_DECODER = msgspec.json.Decoder(Header)


def as_bytes(data: Any, what: str = "value") -> bytes | None:
    """bytes as they are, str as UTF-8, None as None; anything else is refused, naming it."""
    if data is None or isinstance(data, bytes):
        return data
    if isinstance(data, (bytearray, memoryview)):
        return bytes(data)
    if isinstance(data, str):
        return data.encode()
    raise TypeError(f"a history records a {what} as bytes or str, not {type(data).__name__}: "
                    "serialize it first")


def error_text(error: BaseException | str) -> str:
    if isinstance(error, str):
        return error
    return f"{type(error).__name__}: {error}"


class History:
    def __init__(self, limits: HistoryLimits | None = None, *,
                 monotonic_ns: Callable[[], int] = time.monotonic_ns,
                 wall_ns: Callable[[], int] = time.time_ns) -> None:
        self.limits = limits or HistoryLimits()
        self._monotonic_ns = monotonic_ns
        self._wall_ns = wall_ns
        self._start_ns = monotonic_ns()
        self.started_wall_ms = wall_ns() // 1_000_000
        self._lock = threading.Lock()
        self._ops: list[AnyOp] = []
        self._counts: dict[str, int] = dict.fromkeys(_LIMIT_OF.values(), 0)
        self._names: dict[str, int] = {}
        self.incomplete: str | None = None  # why, once a limit was hit

    # ------------------------------------------------------------------------------ reading
    @property
    def ops(self) -> list[AnyOp]:
        """A snapshot of the ops recorded so far, in recording order."""
        with self._lock:
            return list(self._ops)

    def __len__(self) -> int:
        return len(self._ops)

    def new_name(self, prefix: str) -> str:
        """A client name unique in this history: prefix-1, prefix-2, ..."""
        with self._lock:
            n = self._names[prefix] = self._names.get(prefix, 0) + 1
        return f"{prefix}-{n}"

    # ------------------------------------------------------------------------------ sends
    def send_started(self, client: str, topic: str, value: Any, key: Any = None,
                     partition: int | None = None, txn: str | None = None) -> Send:
        """The application asked for one send; complete the returned op with send_acked or
        send_failed when the producer says how it went."""
        value_bytes, key_bytes = as_bytes(value), as_bytes(key, "key")
        with self._lock:
            now = self._now_ms()
            op = Send(t_ms=None, wall_ms=self._wall_ms(), client=client, topic=topic,
                      partition=partition if partition is not None and partition >= 0 else None,
                      key=key_bytes, value=value_bytes, start_ms=now, txn=txn)
            self._append(op, 1)
        return op

    def send_acked(self, op: Send, partition: int, offset: int,
                   leader_epoch: int | None = None) -> None:
        with self._lock:
            op.t_ms, op.wall_ms = self._now_ms(), self._wall_ms()
            op.partition, op.offset = partition, offset
            op.leader_epoch = leader_epoch if leader_epoch is not None and leader_epoch >= 0 \
                else None

    def send_failed(self, op: Send, error: BaseException | str,
                    partition: int | None = None) -> None:
        with self._lock:
            op.t_ms, op.wall_ms = self._now_ms(), self._wall_ms()
            if partition is not None and partition >= 0:
                op.partition = partition
            op.error = error_text(error)

    # ------------------------------------------------------------------------- transactions
    def txn_ending(self, client: str, txn: str, transactional_id: str,
                   wanted: TxnOutcome) -> Txn:
        """The application asked to commit or abort transaction `txn`; complete the returned op
        with txn_ended."""
        if wanted not in ("commit", "abort"):
            raise ValueError(f"wanted must be commit or abort, not {wanted!r}")
        with self._lock:
            now, wall = self._now_ms(), self._wall_ms()
            op = Txn(t_ms=None, wall_ms=wall, client=client, txn=txn,
                     transactional_id=transactional_id, wanted=wanted, start_ms=now,
                     start_wall_ms=wall)
            self._append(op, 1)
        return op

    def txn_ended(self, op: Txn, error: BaseException | str | None = None) -> None:
        """The commit or abort returned (error None) or raised error (outcome unknown)."""
        with self._lock:
            op.t_ms, op.wall_ms = self._now_ms(), self._wall_ms()
            if error is None:
                op.outcome = op.wanted
            else:
                op.error = error_text(error)

    # ------------------------------------------------------------------------------ consumers
    def record_poll(self, client: str, records: Iterable[Polled], group: str | None = None,
                    read_committed: bool = False) -> None:
        """The records one poll handed to the application (an empty poll is not recorded)."""
        batch = list(records)
        if not batch:
            return
        with self._lock:
            self._append(Poll(t_ms=self._now_ms(), wall_ms=self._wall_ms(), client=client,
                              group=group, records=batch, read_committed=read_committed),
                         len(batch))

    def record_commit(self, client: str,
                      offsets: Mapping[TopicPartitionPair, tuple[int, int | None]],
                      error: BaseException | str | None = None,
                      group: str | None = None) -> None:
        """offsets: (topic, partition) -> (next offset, leader epoch or None)."""
        committed = [Committed(topic=t, partition=p, offset=o,
                               leader_epoch=e if e is not None and e >= 0 else None)
                     for (t, p), (o, e) in sorted(offsets.items())]
        with self._lock:
            self._append(Commit(t_ms=self._now_ms(), wall_ms=self._wall_ms(), client=client,
                                group=group, offsets=committed,
                                error=None if error is None else error_text(error)), 1)

    def record_rebalance(self, client: str, change: RebalanceChange,
                         partitions: Iterable[TopicPartitionPair],
                         group: str | None = None) -> None:
        if change not in ("assigned", "revoked", "lost"):
            raise ValueError(f"change must be assigned, revoked or lost, not {change!r}")
        pairs = sorted((str(t), int(p)) for t, p in partitions)
        with self._lock:
            self._append(Rebalance(t_ms=self._now_ms(), wall_ms=self._wall_ms(), client=client,
                                   group=group, change=change, partitions=pairs), 1)

    def record_assignment(self, client: str, before: Iterable[TopicPartitionPair],
                          after: Iterable[TopicPartitionPair], group: str | None = None) -> None:
        """A manual assignment changed from `before` to `after`: what left is recorded as
        revoked, what came as assigned (nothing when nothing changed)."""
        old, new = set(before), set(after)
        if old - new:
            self.record_rebalance(client, "revoked", old - new, group)
        if new - old:
            self.record_rebalance(client, "assigned", new - old, group)

    def record_truncation(self, client: str, topic: str, partition: int, how: TruncationHow,
                          offset: int | None, leader_epoch: int | None = None, detail: str = "",
                          group: str | None = None) -> None:
        if how not in ("error", "reset", "seek"):
            raise ValueError(f"how must be error, reset or seek, not {how!r}")
        with self._lock:
            self._append(Truncation(
                t_ms=self._now_ms(), wall_ms=self._wall_ms(), client=client, group=group,
                topic=topic, partition=partition, how=how, offset=offset,
                leader_epoch=leader_epoch if leader_epoch is not None and leader_epoch >= 0
                else None, detail=detail), 1)

    # ------------------------------------------------------------------------------ the harness
    def record_fault(self, kind: str, targets: tuple[int | str, ...], detail: str) -> None:
        """A fault the harness applied (or healed), at this moment."""
        with self._lock:
            self._append(Fault(t_ms=self._now_ms(), wall_ms=self._wall_ms(), kind=kind,
                               targets=list(targets), detail=detail), 1)

    def expect_loss(self, reason: str) -> None:
        """Declare that this scenario loses acknowledged writes by design (check reports them as
        expected; a truncation a consumer read across without reporting it still fails)."""
        with self._lock:
            self._append(LossExpected(t_ms=self._now_ms(), wall_ms=self._wall_ms(),
                                      reason=reason), 1)

    # ------------------------------------------------------------------------------ files
    def save(self, path: str | Path) -> None:
        """Write the history as JSON lines: a header, then one op per line."""
        with self._lock:
            ops = list(self._ops)
            header = Header(version=HISTORY_FORMAT_VERSION, started_wall_ms=self.started_wall_ms,
                            incomplete=self.incomplete)
        with open(path, "wb") as f:
            f.write(_ENCODER.encode(header) + b"\n")
            for op in ops:
                f.write(_ENCODER.encode(op) + b"\n")

    @classmethod
    def load(cls, path: str | Path, limits: HistoryLimits | None = None) -> History:
        """A history saved by `save`. A bad line is refused with its line number."""
        history = cls(limits)
        with open(path, "rb") as f:
            for number, line in enumerate(f, start=1):
                if len(line) > LINE_BYTES_MAX:
                    raise ValueError(f"{path}:{number}: line longer than {LINE_BYTES_MAX} bytes")
                if not line.strip():
                    continue
                try:
                    if number == 1:
                        header = _HEADER_DECODER.decode(line)
                        if header.version not in FORMAT_VERSIONS_READ:
                            raise ValueError(f"format version {header.version}, this reader "
                                             f"knows {FORMAT_VERSIONS_READ}")
                        history.started_wall_ms = header.started_wall_ms
                        history.incomplete = header.incomplete
                        continue
                    op = _OP_DECODER.decode(line)
                except (msgspec.DecodeError, ValueError) as exc:
                    raise ValueError(f"{path}:{number}: not a history line: {exc}") from None
                with history._lock:
                    history._append(op, len(op.records) if isinstance(op, Poll) else 1)
        return history

    @classmethod
    def merged(cls, histories: Iterable[History], limits: HistoryLimits | None = None
               ) -> History:
        """One history of several recorded apart (each worker process records its own): their
        ops in wall-clock order, each op's times moved onto the earliest history's start (the
        histories share the machine's clock; their monotonic clocks may not). Incomplete if
        any of them is."""
        parts = list(histories)
        out = cls(limits)
        if not parts:
            return out
        out.started_wall_ms = min(h.started_wall_ms for h in parts)
        out.incomplete = next((h.incomplete for h in parts if h.incomplete), None)

        def shifted(h: History) -> Iterator[tuple[float, AnyOp]]:
            """h's ops in h's order, keyed by when each was recorded (on the merged clock)."""
            shift = h.started_wall_ms - out.started_wall_ms
            for op in h.ops:
                op = msgspec.structs.replace(op)
                if op.t_ms is not None:
                    op.t_ms += shift
                if isinstance(op, Send | Txn):
                    op.start_ms += shift
                    yield op.start_ms, op
                else:
                    yield float(op.wall_ms - out.started_wall_ms), op

        # heapq.merge keeps each history's own order (an op is taken only after the one before)
        with out._lock:
            for _, op in heapq.merge(*(shifted(h) for h in parts), key=lambda kv: kv[0]):
                out._append(op, len(op.records) if isinstance(op, Poll) else 1)
        return out

    # ------------------------------------------------------------------------------ inside
    def _now_ms(self) -> float:
        return (self._monotonic_ns() - self._start_ns) / 1e6

    def now_ms(self) -> float:
        """Milliseconds since the history began, on the clock its ops' t_ms use: for a note a
        test keeps beside the history (an error a client reported, say)."""
        return self._now_ms()

    def _wall_ms(self) -> int:
        return self._wall_ns() // 1_000_000

    def _append(self, op: AnyOp, weight: int) -> None:
        """Under the lock: append op, counting weight against its kind's limit."""
        limit_name = _LIMIT_OF[type(op)]
        limit = getattr(self.limits, limit_name)
        count = self._counts[limit_name] + weight
        if count > limit:
            self.incomplete = (f"{limit_name} ({limit}) reached: the history stops short of "
                               f"this {type(op).__name__.lower()}")
            raise HistoryLimitError(f"History: recording this {type(op).__name__.lower()} would "
                                    f"pass {limit_name}={limit}; pass History(HistoryLimits("
                                    f"{limit_name}=...)) for longer runs")
        self._counts[limit_name] = count
        self._ops.append(op)
