"""What must hold of transactions whatever the faults (KIP-98's guarantees).

The ground truth is what was appended: each data partition's batches and markers in offset
order (reported by the brokers as the real logs accept them), the records made durable in
`__transaction_state`, and what each producer was told. A record's value names its transaction
(`tag`: transactional id, producer process, its life, its transaction number).

While running:
- producer epochs of a transactional id never go back in the transaction log, and no two
  InitProducerId answers hand out the same (producer id, epoch);
- a partition never accepts a batch or a marker of a producer epoch older than one it already
  holds for that producer id (a fenced producer stays fenced), nor a marker of an older
  coordinator epoch;
- a CompleteCommit/CompleteAbort is written only once every partition of its transaction holds
  its marker (written after the Prepare*; or a marker of a later producer epoch);
- now and then, and at the end: a read_committed view of each partition (the real last stable
  offset, aborted-transaction index and client filter) shows only records of transactions that
  committed (closed by a COMMIT marker everywhere they wrote).
At the end, after the heal and a quiet period in which producers finish and start nothing new:
- no transaction is both committed and aborted (its batches closed by markers of both kinds);
- a transaction the producer was told committed is committed, one it was told aborted (or
  never asked to commit: it crashed, was fenced, gave up, or timed out) is aborted; a batch a
  fenced epoch got in is aborted;
- every committed transaction shows whole in the read_committed views;
- liveness: no transaction left open in a partition, no transactional id left Ongoing or
  Prepare* in the log.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from epochlog.broker.txn.log_records import Status, TxnLogEntry
from epochlog.broker.txn.state import COMPLETED, PREPARED

if TYPE_CHECKING:
    from .txn_partitions import PartitionStore

TP = tuple[str, int]
VIOLATIONS_MAX = 20
COMMIT, ABORT, OPEN = "commit", "abort", "open"


def tag_of(value: bytes) -> str:
    return value.decode().rsplit("/", 1)[0]


@dataclass
class TxnFacts:
    """What is known of one transaction (one tag)."""
    producer: tuple[int, int]  # (producer id, epoch) it wrote with
    commit_sent: bool = False
    told: str = ""  # COMMIT or ABORT: the EndTxn the producer was answered
    must_abort: str = ""  # why it may not commit
    records: set[tuple[TP, int]] = field(default_factory=set)  # (partition, offset)


@dataclass
class _Batch:
    pid: int
    tag: str
    offsets: list[int]
    zombie: bool  # written by an epoch the coordinator had already fenced


class TxnCheckers:
    def __init__(self, clock: Callable[[], int]) -> None:
        self.clock = clock
        self.violations: list[str] = []
        self.liveness: list[str] = []
        self.counts: dict[str, int] = {}
        self.txns: dict[str, TxnFacts] = {}
        self.durable: dict[str, TxnLogEntry] = {}  # the last record of each id
        self._prepared: dict[str, tuple[TxnLogEntry, int]] = {}
        self._handed_out: set[tuple[str, int, int]] = set()
        self._epochs: dict[tuple[TP, int], int] = {}  # (tp, pid) -> latest producer epoch
        self._coordinator_epochs: dict[tuple[TP, int], int] = {}
        # (tp, pid) -> markers as (time, producer epoch, commit)
        self._markers: dict[tuple[TP, int], list[tuple[int, int, bool]]] = {}
        self._open: dict[tuple[TP, int], list[_Batch]] = {}  # batches awaiting their marker
        self.outcomes: dict[str, set[str]] = {}  # tag -> outcomes of its batches
        self._shown_bad: set[tuple[TP, str]] = set()  # reported once

    def count(self, what: str, n: int = 1) -> None:
        self.counts[what] = self.counts.get(what, 0) + n

    def _violation(self, text: str) -> None:
        if len(self.violations) < VIOLATIONS_MAX:
            self.violations.append(f"@{self.clock()}ms {text}")

    # ------------------------------------------------------------ the transaction log
    def logged(self, tid: str, entry: TxnLogEntry) -> None:
        """A record of `__transaction_state` is durable."""
        before = self.durable.get(tid)
        if before is not None and before.producer_epoch >= 0 and (
                (entry.producer_id, entry.producer_epoch)
                < (before.producer_id, before.producer_epoch)):
            self._violation(f"{tid}: producer epoch went back in the log from "
                            f"{before.producer_id}/{before.producer_epoch} to "
                            f"{entry.producer_id}/{entry.producer_epoch}")
        if before is not None and before.producer_epoch >= 0 and \
                entry.producer_id != before.producer_id:
            self.count("producer_id_rollovers")
        self.durable[tid] = entry
        if entry.status in PREPARED:
            self._prepared[tid] = (entry, self.clock())
            self.count("prepare_commit" if entry.status is Status.PREPARE_COMMIT
                       else "prepare_abort")
        elif entry.status in COMPLETED:
            self._check_markers_before_complete(tid, entry)

    def _check_markers_before_complete(self, tid: str, entry: TxnLogEntry) -> None:
        prepared = self._prepared.pop(tid, None)
        if prepared is None:
            self._violation(f"{tid}: {entry.status.kafka_name} with no Prepare* before it")
            return
        p, since = prepared
        commit = p.status is Status.PREPARE_COMMIT
        for tp in sorted(p.partitions):
            if not any(t >= since and (e > p.producer_epoch or (e == p.producer_epoch
                                                                and c == commit))
                       for t, e, c in self._markers.get((tp, p.producer_id), ())):
                self._violation(f"{tid}: {entry.status.kafka_name} written but {tp[0]}-{tp[1]} "
                                f"holds no {'COMMIT' if commit else 'ABORT'} marker of "
                                f"producer {p.producer_id} epoch {p.producer_epoch}")
        self.count("completed")

    def handed_out(self, tid: str, producer_id: int, producer_epoch: int) -> None:
        """An InitProducerId answer gave a producer this id and epoch."""
        key = (tid, producer_id, producer_epoch)
        if key in self._handed_out:
            self._violation(f"{tid}: producer id {producer_id} epoch {producer_epoch} handed "
                            "out twice")
        self._handed_out.add(key)

    # ------------------------------------------------------------------- the producers
    def began(self, tag: str, producer_id: int, producer_epoch: int) -> None:
        self.txns[tag] = TxnFacts((producer_id, producer_epoch))

    def commit_sent(self, tag: str) -> None:
        self.txns[tag].commit_sent = True

    def told(self, tag: str, commit: bool) -> None:
        self.txns[tag].told = COMMIT if commit else ABORT
        self.count("told_commit" if commit else "told_abort")

    def aborted_by_coordinator(self, producer_id: int, producer_epoch: int, why: str) -> None:
        """The coordinator aborted the open transaction of (producer id, epoch), bumping the
        epoch: past its timeout, or fenced by a new producer of the id."""
        self.count(why.replace(" ", "_"))
        for facts in self.txns.values():
            if facts.producer == (producer_id, producer_epoch) and not facts.told \
                    and not facts.commit_sent:
                facts.must_abort = facts.must_abort or why

    def abandoned(self, tag: str, why: str) -> None:
        """The producer stopped before asking to commit (crashed, fenced, gave up)."""
        facts = self.txns[tag]
        if not facts.commit_sent and not facts.told:
            facts.must_abort = facts.must_abort or why

    # ------------------------------------------------------------------- the partitions
    def appended(self, tp: TP, offset: int, producer_id: int, producer_epoch: int,
                 values: list[bytes]) -> None:
        """A data partition accepted a transactional batch."""
        key = (tp, producer_id)
        latest = self._epochs.get(key, -1)
        if producer_epoch < latest:
            self._violation(f"{tp[0]}-{tp[1]} accepted a batch of producer {producer_id} epoch "
                            f"{producer_epoch} after epoch {latest} (fenced)")
        self._epochs[key] = max(latest, producer_epoch)
        tag = tag_of(values[0])
        tid = tag.split("/", 1)[0]
        durable = self.durable.get(tid)
        # producer ids only grow (a roll-over past the last epoch takes a new one)
        zombie = durable is not None and durable.producer_epoch >= 0 and \
            (durable.producer_id, durable.producer_epoch) > (producer_id, producer_epoch)
        if zombie:
            self.count("zombie_batches")
        offsets = list(range(offset, offset + len(values)))
        self._open.setdefault(key, []).append(_Batch(producer_id, tag, offsets, zombie))
        facts = self.txns.get(tag)
        if facts is not None:
            facts.records.update((tp, o) for o in offsets)
        self.count("batches")

    def refused(self, what: str) -> None:
        self.count(f"refused_{what}")

    def marker(self, tp: TP, producer_id: int, producer_epoch: int, commit: bool,
               coordinator_epoch: int) -> None:
        """A data partition accepted a transaction marker."""
        key = (tp, producer_id)
        latest = self._epochs.get(key, -1)
        if producer_epoch < latest:
            self._violation(f"{tp[0]}-{tp[1]} accepted a marker of producer {producer_id} "
                            f"epoch {producer_epoch} after epoch {latest}")
        self._epochs[key] = max(latest, producer_epoch)
        coordinator_latest = self._coordinator_epochs.get(key, -1)
        if coordinator_epoch < coordinator_latest:
            self._violation(f"{tp[0]}-{tp[1]} accepted a marker of coordinator epoch "
                            f"{coordinator_epoch} after {coordinator_latest} (producer "
                            f"{producer_id})")
        self._coordinator_epochs[key] = max(coordinator_latest, coordinator_epoch)
        self._markers.setdefault(key, []).append((self.clock(), producer_epoch, commit))
        outcome = COMMIT if commit else ABORT
        for batch in self._open.pop(key, []):
            self.outcomes.setdefault(batch.tag, set()).add(outcome)
            if batch.zombie and commit:
                self._violation(f"{tp[0]}-{tp[1]}: a batch of fenced producer {producer_id} "
                                f"({batch.tag}) committed")
        self.count("markers")

    # ------------------------------------------------------------------- the views
    def view(self, tp: TP, records: list[tuple[int, bytes]]) -> set[str]:
        """A read_committed view of tp: every record shown is of a committed transaction.
        Returns the tags seen."""
        seen: set[str] = set()
        for offset, value in records:
            tag = tag_of(value)
            if tag in seen:
                continue
            seen.add(tag)
            outcomes = self.outcomes.get(tag, {OPEN})
            if outcomes != {COMMIT} and (tp, tag) not in self._shown_bad:
                self._shown_bad.add((tp, tag))
                self._violation(f"read_committed view of {tp[0]}-{tp[1]} shows offset {offset} "
                                f"of transaction {tag}, which is {'+'.join(sorted(outcomes))}")
        self.count("views")
        return seen

    # ------------------------------------------------------------------- at the end
    def final(self, stores: dict[TP, PartitionStore]) -> None:
        shown: set[tuple[TP, int]] = set()
        for tp, store in sorted(stores.items()):
            records = store.read_committed(tp)
            self.view(tp, records)
            shown.update((tp, offset) for offset, _ in records)
            for pid, first in sorted(store.open_transactions(tp).items()):
                self.liveness.append(f"{tp[0]}-{tp[1]}: transaction of producer {pid} still "
                                     f"open since offset {first}")
        for tid, entry in sorted(self.durable.items()):
            if entry.status in PREPARED or entry.status is Status.ONGOING:
                self.liveness.append(f"{tid} left {entry.status.kafka_name} in the log")
        for tag, facts in sorted(self.txns.items()):
            self._final_txn(tag, facts, shown)

    def _final_txn(self, tag: str, facts: TxnFacts, shown: set[tuple[TP, int]]) -> None:
        outcomes = self.outcomes.get(tag, set())
        if {COMMIT, ABORT} <= outcomes:
            self._violation(f"transaction {tag} both committed and aborted")
        if facts.told == COMMIT and ABORT in outcomes:
            self._violation(f"transaction {tag}: the producer was told it committed, yet a "
                            "partition aborted it")
        if (facts.told == ABORT or facts.must_abort) and COMMIT in outcomes:
            why = "told it aborted" if facts.told == ABORT else facts.must_abort
            self._violation(f"transaction {tag} committed, but its producer was {why}")
        if outcomes == {COMMIT}:
            missing = sorted(facts.records - shown)
            if missing:
                self._violation(f"committed transaction {tag} not whole in the read_committed "
                                f"views: {missing[:3]} missing")
            self.count("committed_txns")
        elif outcomes == {ABORT}:
            self.count("aborted_txns")
