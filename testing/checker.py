"""`check(history)`: the anomalies a history shows, named and defined as in Jepsen's Kafka workload.

Theory of operation
-------------------
Jepsen's model (jepsen.tests.kafka, whose namespace documentation and checker define these
anomalies): each partition is a totally ordered log; each value is sent once, so a value names
one record; sends and polls both observe (offset, value) pairs of the partition they touched.
From every acknowledged send (with its offset) and every poll, the checker builds each
partition's *version order*: the offsets observed, in order, each with the values seen there.
Offsets nobody observed (transaction markers, records never sent by a recorded client) are gaps
that count for nothing: positions are *indices* in this dense order, not raw offsets.

The anomalies, per partition (Jepsen's names; its definitions, restated):

- inconsistent-offsets: one offset was observed holding two or more different values.
- duplicate: one value was observed at two or more offsets.
- lost-write: an acknowledged value was never polled by anyone, although some poll read an
  offset at or beyond its own. (Past the highest offset any poll read, a value merely was not
  read yet: that is `unseen`.)
- unseen: acknowledged values that no poll ever returned, at the end of the history, besides
  those reported as lost-write; one anomaly per partition with their count.
- nonmonotonic-poll: a consumer's next record of a partition is at or before the index of the
  one it read before (it went back, or repeated), between two polls or within one.
- poll-skip: a consumer's next record of a partition is more than one index after the one it
  read before: it jumped over records known to be in the log, between two polls or within one.
  (Jepsen names the within-one-poll cases int-nonmonotonic-poll and int-poll-skip; here both
  cases carry the plain name and the explanation says which.)
- nonmonotonic-send: a producer's acknowledged sends to a partition, in the order it was asked
  to send them, got offsets that do not increase.

For the two poll anomalies, a consumer's read of a partition starts afresh (as Jepsen's do after
an assign or subscribe) when the partition is assigned, revoked or lost for it, and when the
consumer reports a truncation or a seek of it: those moves are announced, not anomalies.

Besides Jepsen's, one anomaly about KIP-320, which Jepsen's Kafka workload does not check:

- unreported-truncation: a consumer read records that the log no longer holds (the value at that
  offset was later observed to be another: the leader that took over had not had them), and then
  read on from the log that replaced them, past the offset where the two logs part, without
  first reporting a truncation (a LogTruncationError, or a reset it announced) of that
  partition: it skipped records of the final log without a word. A consumer that goes back to
  where the logs part, or before, met the truncation even if the application was not told (KIP-320's
  automatic reset, which librdkafka and kafka-python do with a log line only); that move back
  shows as a nonmonotonic-poll. Also: a consumer that was assigned a partition and started
  reading past the offset where the log read by the member that committed its starting point
  parted from the final log, again without reporting a truncation.

Which value an offset "holds" in the end: the one observed there last (by time); a final read-back
of every partition makes that the final log.

Expected loss. A history in which the scenario declared loss expected (`History.expect_loss`:
an unclean election with acks=1) still reports every anomaly, but lost-write and unseen do not
fail it, nor do inconsistent-offsets, duplicate, nonmonotonic-send, nonmonotonic-poll and
poll-skip that involve a record the final log no longer holds (the mark of a truncation).
unreported-truncation always fails: losing data is allowed there, reading past the loss silently
is not.

A history that tested nothing fails too: with no acknowledged send, or no record read, there is
nothing for the anomalies to be found in, and "no anomalies" would say nothing (a client library
that did not load, a cluster nobody reached). `Verdict.unexercised` says which is missing, and
`ok` is false.

Records with no value (tombstones) cannot be told apart and are left out. Each kind lists at most
`anomalies_per_kind_max` anomalies; `Verdict.counts` has the full counts.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import msgspec

from .history import AnyOp, Commit, History, LossExpected, Poll, Rebalance, Send, Truncation

ANOMALIES_PER_KIND_MAX = 100
VALUE_SHOWN_BYTES_MAX = 40  # a value in an explanation is cut to this many bytes
VALUES_LISTED_MAX = 5  # an explanation names at most this many values or offsets
ANOMALIES_SHOWN = 20  # str(verdict) explains this many anomalies, then counts the rest

KINDS = ("lost-write", "duplicate", "inconsistent-offsets", "nonmonotonic-poll",
         "nonmonotonic-send", "poll-skip", "unseen", "unreported-truncation")
LOSS_KINDS = frozenset({"lost-write", "unseen"})  # expected outright when loss is declared

Key = tuple[str, int]


class Anomaly(msgspec.Struct, kw_only=True):
    kind: str  # one of KINDS
    topic: str
    partition: int
    ops: list[int]  # positions in the history's ops of the ops involved
    explanation: str  # one line
    expected: bool = False  # explained by a loss the history declared expected


class Verdict(msgspec.Struct, kw_only=True):
    ok: bool  # no anomaly, or only expected ones, and the history exercised something
    loss_expected: bool
    anomalies: list[Anomaly]  # at most anomalies_per_kind_max per kind
    counts: dict[str, int]  # kind -> anomalies found (all of them)
    failing: dict[str, int]  # kind -> anomalies found that fail the verdict
    stats: dict[str, int]
    # why the history tested nothing (no acknowledged send, no record read); empty when it did
    unexercised: list[str] = msgspec.field(default_factory=list)

    def __str__(self) -> str:
        head = "ok" if self.ok else "FAILED"
        found = ", ".join(f"{kind}: {n}" + (f" ({n - self.failing.get(kind, 0)} expected)"
                                            if self.failing.get(kind, 0) != n else "")
                          for kind, n in self.counts.items() if n)
        lines = [f"{head}: {found or 'no anomalies'}"
                 + (" (loss declared expected)" if self.loss_expected else "")]
        lines += [f"  nothing tested: {why}" for why in self.unexercised]
        shown = self.anomalies[:ANOMALIES_SHOWN]
        lines += [f"  {a.kind}{' (expected)' if a.expected else ''}: {a.explanation}"
                  for a in shown]
        # the remainder of what was counted, not of what was listed: the list is capped per kind
        total = sum(self.counts.values())
        if total > len(shown):
            lines.append(f"  ... and {total - len(shown)} more ({total} counted)")
        return "\n".join(lines)


@dataclass
class _Partition:
    """What the history shows of one partition."""

    seen: dict[int, dict[bytes, list[int]]] = field(default_factory=dict)  # offset -> value -> ops
    last_seen: dict[int, tuple[float, bytes]] = field(default_factory=dict)  # offset -> (t, v)
    acked: dict[bytes, list[int]] = field(default_factory=dict)  # value -> acked send ops
    read: dict[bytes, int] = field(default_factory=dict)  # value -> first poll op reading it
    max_read: tuple[int, int] = (-1, -1)  # (offset, poll op) of the highest offset polled
    order: list[int] = field(default_factory=list)  # offsets observed, sorted
    index: dict[int, int] = field(default_factory=dict)  # offset -> its index in order

    def observe(self, offset: int, value: bytes, op: int, t_ms: float) -> None:
        self.seen.setdefault(offset, {}).setdefault(value, []).append(op)
        last = self.last_seen.get(offset)
        if last is None or t_ms >= last[0]:
            self.last_seen[offset] = (t_ms, value)

    def holds(self, offset: int, value: bytes) -> bool:
        """Whether the log, as last observed, holds value at offset."""
        last = self.last_seen.get(offset)
        return last is None or last[1] == value

    def finish(self) -> None:
        self.order = sorted(self.seen)
        self.index = {offset: i for i, offset in enumerate(self.order)}

    def between(self, low: int, high: int) -> list[int]:
        """Observed offsets strictly between low and high."""
        return self.order[bisect_right(self.order, low):bisect_left(self.order, high)]


class _Findings:
    def __init__(self, loss_expected: bool, per_kind_max: int) -> None:
        self.loss_expected = loss_expected
        self.per_kind_max = per_kind_max
        self.anomalies: list[Anomaly] = []
        self.counts: dict[str, int] = dict.fromkeys(KINDS, 0)
        self.failing: dict[str, int] = dict.fromkeys(KINDS, 0)
        self._listed: dict[str, int] = dict.fromkeys(KINDS, 0)

    def add(self, kind: str, key: Key, ops: Iterable[int], explanation: str,
            lossy: bool = False) -> None:
        """lossy: the anomaly involves a record the final log no longer holds."""
        expected = self.loss_expected and (kind in LOSS_KINDS or lossy)
        self.counts[kind] += 1
        if not expected:
            self.failing[kind] += 1
        if self._listed[kind] < self.per_kind_max:
            self._listed[kind] += 1
            self.anomalies.append(Anomaly(kind=kind, topic=key[0], partition=key[1],
                                          ops=sorted(set(ops)), explanation=explanation,
                                          expected=expected))


def check(history: History | Iterable[AnyOp], *,
          anomalies_per_kind_max: int = ANOMALIES_PER_KIND_MAX) -> Verdict:
    """Judge a history (or its ops): the anomalies it shows and whether they fail it."""
    if isinstance(history, History):
        if history.incomplete:
            raise ValueError(f"the history is incomplete ({history.incomplete}); a check of "
                             "it would read the missing ops as lost")
        ops = history.ops
    else:
        ops = list(history)
    loss_expected = any(isinstance(op, LossExpected) for op in ops)
    parts = _observe(ops)
    found = _Findings(loss_expected, anomalies_per_kind_max)
    for key, part in sorted(parts.items()):
        _offsets_and_duplicates(found, key, part)
        _lost_and_unseen(found, key, part, ops)
    _sends(found, parts, ops)
    _polls(found, parts, ops)
    failing = {k: n for k, n in found.failing.items() if n}
    stats = _stats(ops, parts)
    unexercised = _unexercised(stats, ops)
    return Verdict(ok=not failing and not unexercised, loss_expected=loss_expected,
                   anomalies=found.anomalies, counts={k: n for k, n in found.counts.items() if n},
                   failing=failing, stats=stats, unexercised=unexercised)


def _unexercised(stats: dict[str, int], ops: list[AnyOp]) -> list[str]:
    """Why the history tested nothing: no send acknowledged, no record read (else empty)."""
    why: list[str] = []
    if not stats["sends_acked"]:
        first = next((op.error for op in ops if isinstance(op, Send) and op.error is not None),
                     None)
        why.append(f"no send was acknowledged ({stats['sends']} sends, {stats['sends_failed']} "
                   "failed" + (f"; the first error: {first}" if first else "") + ")")
    if not stats["values_read"]:
        why.append("no record was read: no poll returned one")
    return why


# ----------------------------------------------------------------------------- observations
def _observe(ops: list[AnyOp]) -> dict[Key, _Partition]:
    parts: dict[Key, _Partition] = defaultdict(_Partition)
    for i, op in enumerate(ops):
        if isinstance(op, Send):
            if op.acked and op.partition is not None and op.value is not None:
                part = parts[(op.topic, op.partition)]
                part.acked.setdefault(op.value, []).append(i)
                assert op.offset is not None and op.t_ms is not None
                if op.offset >= 0:
                    part.observe(op.offset, op.value, i, op.t_ms)
        elif isinstance(op, Poll):
            assert op.t_ms is not None
            for r in op.records:
                if r.value is None:
                    continue
                part = parts[(r.topic, r.partition)]
                part.observe(r.offset, r.value, i, op.t_ms)
                part.read.setdefault(r.value, i)
                if r.offset > part.max_read[0]:
                    part.max_read = (r.offset, i)
    for part in parts.values():
        part.finish()
    return dict(parts)


def _offsets_and_duplicates(found: _Findings, key: Key, part: _Partition) -> None:
    name = _name(key)
    offsets_of: dict[bytes, list[int]] = defaultdict(list)
    for offset in part.order:
        values = part.seen[offset]
        for value in values:
            offsets_of[value].append(offset)
        if len(values) > 1:
            shown = "; ".join(f"{_show(v)} ({_ops_text(ops)})" for v, ops in values.items())
            found.add("inconsistent-offsets", key, _first_each(values.values()),
                      f"{name} offset {offset} was observed holding {len(values)} values: "
                      f"{shown}", lossy=True)
    for value, offsets in offsets_of.items():
        if len(offsets) > 1:
            held = sum(part.holds(o, value) for o in offsets)
            sent = len(part.acked.get(value, []))
            ops = _first_each(part.seen[o][value] for o in offsets)
            found.add("duplicate", key, ops,
                      f"{name}: {_show(value)} is at offsets {_list(offsets)}"
                      + (f" (it was sent {sent} times)" if sent > 1 else ""), lossy=held <= 1)


def _lost_and_unseen(found: _Findings, key: Key, part: _Partition, ops: list[AnyOp]) -> None:
    name = _name(key)
    max_offset, max_op = part.max_read
    unseen: list[tuple[bytes, int]] = []
    for value, senders in part.acked.items():
        if value in part.read:
            continue
        send = ops[senders[0]]
        assert isinstance(send, Send) and send.offset is not None
        if 0 <= send.offset <= max_offset:
            found.add("lost-write", key, [senders[0], max_op],
                      f"{name}: {_show(value)} was acknowledged at offset {send.offset} (op "
                      f"{senders[0]}) and never polled, though polls reached offset "
                      f"{max_offset} (op {max_op})")
        else:
            unseen.append((value, senders[0]))
    if unseen:
        found.add("unseen", key, [op for _, op in unseen[:VALUES_LISTED_MAX]],
                  f"{name}: {len(unseen)} acknowledged value(s) never polled (polls reached "
                  f"offset {max_offset}), e.g. {_list([_show(v) for v, _ in unseen])}")


# ----------------------------------------------------------------------------- producers
def _sends(found: _Findings, parts: dict[Key, _Partition], ops: list[AnyOp]) -> None:
    last: dict[tuple[str, Key], tuple[int, int]] = {}  # (producer, key) -> (offset, op)
    for i, op in enumerate(ops):
        if not (isinstance(op, Send) and op.acked and op.partition is not None):
            continue
        assert op.offset is not None
        if op.offset < 0:
            continue
        key = (op.topic, op.partition)
        before = last.get((op.client, key))
        last[(op.client, key)] = (op.offset, i)
        if before is None or op.offset > before[0]:
            continue
        part = parts[key]
        prev = ops[before[1]]
        assert isinstance(prev, Send) and prev.value is not None and op.value is not None
        lossy = not part.holds(before[0], prev.value) or not part.holds(op.offset, op.value)
        found.add("nonmonotonic-send", key, [before[1], i],
                  f"{_name(key)}: {op.client} sent {_show(op.value)} (op {i}) after "
                  f"{_show(prev.value)} (op {before[1]}), and it got offset {op.offset}, not "
                  f"after {before[0]}", lossy=lossy)


# ----------------------------------------------------------------------------- consumers
@dataclass
class _Reader:
    """One consumer's reading of one partition since its read last started afresh."""

    offset: int = -1  # of the last record read; -1: none yet
    value: bytes = b""
    op: int = -1
    stale: tuple[int, int] | None = None  # (offset, op) of a record the log no longer holds
    fresh: bool = True  # assigned and nothing read yet


def _polls(found: _Findings, parts: dict[Key, _Partition], ops: list[AnyOp]) -> None:
    readers: dict[tuple[str, Key], _Reader] = {}
    # (group, key) -> (offset committed, op, and where the committer's log parted from the
    # final log: the first offset it read that the log no longer holds; None if none)
    commits: dict[tuple[str, Key], tuple[int, int, int | None]] = {}
    for i, op in enumerate(ops):
        if isinstance(op, Poll):
            for r in op.records:
                if r.value is not None:
                    reader = readers.setdefault((op.client, (r.topic, r.partition)), _Reader())
                    _read(found, parts[(r.topic, r.partition)], (r.topic, r.partition), reader,
                          op, i, r.offset, r.value, commits)
        elif isinstance(op, Rebalance):
            for key in op.partitions:
                readers[(op.client, key)] = _Reader(fresh=op.change == "assigned")
        elif isinstance(op, Truncation):
            readers[(op.client, (op.topic, op.partition))] = _Reader(fresh=False)
        elif isinstance(op, Commit) and op.error is None and op.group is not None:
            for c in op.offsets:
                key = (c.topic, c.partition)
                committer = readers.get((op.client, key))
                parted = committer.stale[0] if committer and committer.stale else None
                commits[(op.group, key)] = (c.offset, i, parted)


def _read(found: _Findings, part: _Partition, key: Key, reader: _Reader, op: Poll, i: int,
          offset: int, value: bytes, commits: dict[tuple[str, Key], tuple[int, int, int | None]]
          ) -> None:
    name = _name(key)
    holds = part.holds(offset, value)
    if reader.fresh and op.group is not None and holds:
        committed = commits.get((op.group, key))
        if committed is not None and committed[2] is not None and offset > committed[2]:
            found.add("unreported-truncation", key, [committed[1], i],
                      f"{name}: {op.client} started at offset {offset} (op {i}) from offset "
                      f"{committed[0]} committed (op {committed[1]}) by a member whose log "
                      f"parted from the final one at offset {committed[2]}, and reported no "
                      "truncation")
    if reader.op >= 0:
        _order(found, part, key, reader, op, i, offset, value)
    if not holds and reader.stale is None:
        reader.stale = (offset, i)
    elif holds and reader.stale is not None:
        parted, stale_op = reader.stale
        if offset > parted:  # read on past where the logs part: it never read what replaced
            found.add("unreported-truncation", key, [stale_op, i],
                      f"{name}: {op.client} read offset {parted} (op {stale_op}), which the "
                      f"log no longer holds, then read on at offset {offset} (op {i}) without "
                      "reporting a truncation")
        reader.stale = None  # (else it went back to where the logs part: the truncation met)
    reader.offset, reader.value, reader.op, reader.fresh = offset, value, i, False


def _order(found: _Findings, part: _Partition, key: Key, reader: _Reader, op: Poll, i: int,
           offset: int, value: bytes) -> None:
    """Compare a consumer's record with the one it read before it (Jepsen's poll checks)."""
    delta = part.index[offset] - part.index[reader.offset]
    if delta == 1:
        return
    where = "within one poll" if reader.op == i else "between polls"
    lossy = not part.holds(offset, value) or not part.holds(reader.offset, reader.value)
    if delta < 1:
        found.add("nonmonotonic-poll", key, [reader.op, i],
                  f"{_name(key)}: {op.client} read offset {offset} (op {i}) after offset "
                  f"{reader.offset} (op {reader.op}), {where}", lossy=lossy)
    else:
        skipped = part.between(reader.offset, offset)
        found.add("poll-skip", key, [reader.op, i],
                  f"{_name(key)}: {op.client} read offset {offset} (op {i}) right after offset "
                  f"{reader.offset} (op {reader.op}), {where}, skipping {len(skipped)} known "
                  f"record(s) at {_list(skipped)}",
                  lossy=lossy or any(not part.holds(o, v) for o in skipped
                                     for v in part.seen[o]))


# ----------------------------------------------------------------------------- words
def _stats(ops: list[AnyOp], parts: dict[Key, _Partition]) -> dict[str, int]:
    sends = [op for op in ops if isinstance(op, Send)]
    polls = [op for op in ops if isinstance(op, Poll)]
    return {
        "sends": len(sends),
        "sends_acked": sum(op.acked for op in sends),
        "sends_failed": sum(op.error is not None for op in sends),
        "sends_unknown": sum(op.t_ms is None for op in sends),
        "polls": len(polls),
        "records_polled": sum(len(op.records) for op in polls),
        "values_read": sum(len(p.read) for p in parts.values()),
        "partitions": len(parts),
        "commits": sum(isinstance(op, Commit) for op in ops),
        "rebalances": sum(isinstance(op, Rebalance) for op in ops),
        "truncations": sum(isinstance(op, Truncation) for op in ops),
    }


def _name(key: Key) -> str:
    return f"{key[0]}-{key[1]}"


def _show(value: bytes) -> str:
    text = repr(value[:VALUE_SHOWN_BYTES_MAX])
    return text + ("..." if len(value) > VALUE_SHOWN_BYTES_MAX else "")


def _list(items: Iterable[object]) -> str:
    items = list(items)
    shown = ", ".join(str(x) for x in items[:VALUES_LISTED_MAX])
    return shown + (f", ... ({len(items)} in all)" if len(items) > VALUES_LISTED_MAX else "")


def _ops_text(ops: list[int]) -> str:
    return "op " + _list(ops) if len(ops) == 1 else "ops " + _list(ops)


def _first_each(groups: Iterable[list[int]]) -> list[int]:
    return [g[0] for g in groups if g]
