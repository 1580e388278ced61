"""`check_transactions(history)`: the anomalies of transactions (issue 18), beside `check`'s.

    verdict = check_transactions(history, pipeline=Pipeline("in", "out", source_of))

The history's transactional sends name their transaction (`Send.txn`), each commit or abort asked
for is a `Txn` op with its outcome, and polls by read_committed consumers are marked
(`Poll.read_committed`). A transaction *committed* when a commit of it returned, or when any of
its records was read by a read_committed consumer (a commit whose call failed, or never
returned, may still have happened: the log says so); *aborted* when an abort of it returned and
it did not commit.

The anomalies, each about records read by read_committed consumers:

- aborted-read: a record of an aborted transaction was read.
- uncommitted-read: a record of a transaction was read before its commit was asked for (read
  while the transaction was open), or the transaction was never asked to commit.
- incomplete-transaction: a committed transaction's record was acknowledged but never read,
  although read_committed consumers read past its offset in its partition: the transaction was
  not wholly visible.

And, for a consume-transform-produce pipeline (`Pipeline`: records read from `source` and written
to `sink` in transactions that also commit the consumer's offsets; `source_of(value)` names the
source value a sink value was made from):

- duplicate-processing: one source record's output was read (read_committed) at two or more
  sink offsets: it was processed into the output twice.
- lost-processing: a source record acknowledged by its producer has no output at all in what
  read_committed consumers read of the sink. Judged only when the caller says the pipeline ran
  until done (`pipeline.drained`); otherwise such records may merely be unprocessed yet.

Exactly once is: no duplicate-processing and no lost-processing.

As with `check`, a history that tested nothing fails: with no committed transaction, or no
record read by a read_committed consumer, `Verdict.unexercised` says which, and `ok` is false.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from .checker import ANOMALIES_PER_KIND_MAX, Anomaly, Verdict
from .history import AnyOp, History, Poll, Send, Txn

TXN_KINDS = ("aborted-read", "uncommitted-read", "incomplete-transaction",
             "duplicate-processing", "lost-processing")
VALUE_SHOWN_BYTES_MAX = 40


@dataclass(frozen=True)
class Pipeline:
    source: str
    sink: str
    source_of: Callable[[bytes], bytes]
    drained: bool = False  # every acknowledged source record should have its output by now


@dataclass
class _Txn:
    name: str
    sends: list[int] = field(default_factory=list)  # op positions
    commit_asked_wall: int | None = None  # when a commit was first asked for (wall ms)
    committed: bool = False
    aborted: bool = False
    read: bool = False  # some record of it was read by a read_committed consumer
    end_ops: list[int] = field(default_factory=list)


class _Found:
    def __init__(self, per_kind_max: int) -> None:
        self.per_kind_max = per_kind_max
        self.anomalies: list[Anomaly] = []
        self.counts: dict[str, int] = dict.fromkeys(TXN_KINDS, 0)

    def add(self, kind: str, topic: str, partition: int, ops: Iterable[int], text: str) -> None:
        self.counts[kind] += 1
        if self.counts[kind] <= self.per_kind_max:
            self.anomalies.append(Anomaly(kind=kind, topic=topic, partition=partition,
                                          ops=sorted(set(ops)), explanation=text))


def check_transactions(history: History | Iterable[AnyOp], *, pipeline: Pipeline | None = None,
                       anomalies_per_kind_max: int = ANOMALIES_PER_KIND_MAX) -> Verdict:
    if isinstance(history, History):
        if history.incomplete:
            raise ValueError(f"the history is incomplete ({history.incomplete})")
        ops = history.ops
    else:
        ops = list(history)
    txns = _transactions(ops)
    in_txn: dict[bytes, str] = {}  # value -> its transaction
    for t in txns.values():
        for i in t.sends:
            op = ops[i]
            assert isinstance(op, Send)
            if op.value is not None:
                in_txn[op.value] = t.name
    # what read_committed consumers read: (topic, partition) -> offset -> value, first poll op
    read: dict[tuple[str, int], dict[int, tuple[bytes, int]]] = defaultdict(dict)
    found = _Found(anomalies_per_kind_max)
    for i, op in enumerate(ops):
        if not isinstance(op, Poll) or not op.read_committed:
            continue
        for r in op.records:
            if r.value is None:
                continue
            read[(r.topic, r.partition)].setdefault(r.offset, (r.value, i))
            name = in_txn.get(r.value)
            if name is not None:
                txns[name].read = True
                _judge_read(found, txns[name], op, i, r.topic, r.partition, r.offset, r.value)
    _incomplete(found, ops, txns, read)
    if pipeline is not None:
        _pipeline(found, ops, read, pipeline)
    counts = {k: n for k, n in found.counts.items() if n}
    stats = _stats(ops, txns, read)
    unexercised = _unexercised(stats)
    return Verdict(ok=not counts and not unexercised, loss_expected=False,
                   anomalies=found.anomalies, counts=counts, failing=dict(counts), stats=stats,
                   unexercised=unexercised)


def _unexercised(stats: dict[str, int]) -> list[str]:
    """Why the history tested no transaction: none committed, nothing read_committed."""
    why: list[str] = []
    if not stats["committed"]:
        why.append(f"no transaction committed ({stats['transactions']} transactions, "
                   f"{stats['aborted']} aborted)")
    if not stats["read_committed_records"]:
        why.append("no record was read by a read_committed consumer")
    return why


def _transactions(ops: list[AnyOp]) -> dict[str, _Txn]:
    txns: dict[str, _Txn] = {}
    for i, op in enumerate(ops):
        if isinstance(op, Send) and op.txn is not None:
            txns.setdefault(op.txn, _Txn(op.txn)).sends.append(i)
        elif isinstance(op, Txn):
            t = txns.setdefault(op.txn, _Txn(op.txn))
            t.end_ops.append(i)
            if op.wanted == "commit" and (t.commit_asked_wall is None
                                          or op.start_wall_ms < t.commit_asked_wall):
                t.commit_asked_wall = op.start_wall_ms
            if op.outcome == "commit":
                t.committed = True
            elif op.outcome == "abort":
                t.aborted = True
    return txns


def _judge_read(found: _Found, t: _Txn, op: Poll, i: int, topic: str, partition: int,
                offset: int, value: bytes) -> None:
    where = f"{_show(value)} at {topic}-{partition} offset {offset}"
    if t.aborted and not t.committed:
        found.add("aborted-read", topic, partition, [i, *t.end_ops],
                  f"{op.client} read {where}, of transaction {t.name}, which was aborted")
    elif t.commit_asked_wall is None:
        found.add("uncommitted-read", topic, partition, [i, *t.sends[:1]],
                  f"{op.client} read {where}, of transaction {t.name}, which was never asked "
                  "to commit")
    elif op.wall_ms < t.commit_asked_wall:
        found.add("uncommitted-read", topic, partition, [i, *t.end_ops],
                  f"{op.client} read {where} {t.commit_asked_wall - op.wall_ms} ms before "
                  f"transaction {t.name}'s commit was asked for")


def _incomplete(found: _Found, ops: list[AnyOp], txns: dict[str, _Txn],
                read: dict[tuple[str, int], dict[int, tuple[bytes, int]]]) -> None:
    furthest = {key: max(offsets) for key, offsets in read.items() if offsets}
    read_values = {v for offsets in read.values() for v, _ in offsets.values()}
    for t in txns.values():
        if (t.aborted and not t.committed) or not (t.committed or t.read):
            continue  # aborted (any read of it is an aborted-read), or not known to commit
        for i in t.sends:
            op = ops[i]
            assert isinstance(op, Send)
            if (not op.acked or op.value is None or op.partition is None or op.offset is None
                    or op.value in read_values):
                continue
            key = (op.topic, op.partition)
            if furthest.get(key, -1) > op.offset:
                found.add("incomplete-transaction", op.topic, op.partition, [i, *t.end_ops],
                          f"{_show(op.value)} of committed transaction {t.name}, acknowledged "
                          f"at offset {op.offset}, was never read; read_committed consumers "
                          f"read up to offset {furthest[key]}")


def _pipeline(found: _Found, ops: list[AnyOp],
              read: dict[tuple[str, int], dict[int, tuple[bytes, int]]], p: Pipeline) -> None:
    outputs: dict[bytes, list[tuple[int, int, int]]] = defaultdict(list)  # source value ->
    for (topic, partition), offsets in read.items():                     # (part, off, op)
        if topic != p.sink:
            continue
        for offset, (value, i) in offsets.items():
            outputs[p.source_of(value)].append((partition, offset, i))
    for source_value, places in sorted(outputs.items()):
        if len(places) > 1:
            found.add("duplicate-processing", p.sink, places[0][0], [i for _, _, i in places],
                      f"source record {_show(source_value)} was processed into {len(places)} "
                      "output records: " + ", ".join(f"{p.sink}-{part} offset {off}"
                                                     for part, off, _ in sorted(places)[:5]))
    if not p.drained:
        return
    for i, op in enumerate(ops):
        if (isinstance(op, Send) and op.topic == p.source and op.acked and op.value is not None
                and op.value not in outputs):
            found.add("lost-processing", op.topic, op.partition if op.partition is not None
                      else -1, [i], f"source record {_show(op.value)} (offset {op.offset}) has "
                      f"no output in {p.sink}")


def _stats(ops: list[AnyOp], txns: dict[str, _Txn],
           read: dict[tuple[str, int], dict[int, tuple[bytes, int]]]) -> dict[str, int]:
    return {"transactions": len(txns),
            "committed": sum(t.committed for t in txns.values()),
            "aborted": sum(t.aborted and not t.committed for t in txns.values()),
            "unknown": sum(not t.committed and not t.aborted for t in txns.values()),
            "read_committed_records": sum(len(offsets) for offsets in read.values()),
            "ops": len(ops)}


def _show(value: bytes) -> str:
    text = value[:VALUE_SHOWN_BYTES_MAX].decode("utf-8", "replace")
    return repr(text + ("..." if len(value) > VALUE_SHOWN_BYTES_MAX else ""))
