"""`SourceFetcher`: the follower side of replication for the partitions led by one source broker.

Theory of operation
-------------------
Sans-IO, like h11: the driver (broker/fetcher.py on asyncio, tests/sim/ on a simulated network)
asks `next_request()` for the one request to send, hands the answer to `on_response()`, or reports
a lost connection or timeout with `on_failure()`. At most one request is outstanding per source
(as Kafka's fetcher thread); answers for partitions removed or re-added meanwhile are dropped (each
`add` starts a new generation of that partition). Time comes from the injected clock (ms), only
for backoffs.

Per partition (Kafka's AbstractFetcherThread with KIP-101, KIP-279 and KIP-320):

    state        request                         on the answer
    ----------   -----------------------------   ----------------------------------------------
    TRUNCATING   OffsetForLeaderEpoch(current    (E, O): truncate (below); done -> FETCHING,
                 leader epoch, our latest        else ask again with our (now lower) latest
                 epoch)                          epoch
    FETCHING     Fetch(current leader epoch,     append; high watermark = min(leader's, our
                 fetch offset = log end,         log end); log start follows the leader's;
                 last fetched epoch)             diverging_epoch -> truncate as above
    FENCED       nothing                         (FENCED_LEADER_EPOCH: our LeaderAndIsr is
                                                 older than the leader's; a newer one re-adds)

Truncation from a leader's answer (E, O) (`truncation_point`, Kafka's getOffsetTruncationState):
O undefined -> our high watermark (KIP-101's fallback); else look up E in our own cache, (F, P):
the largest epoch F <= E we have and where it ends, P. F == E: truncate to min(O, P, log end),
done. F < E (KIP-279: we never saw the leader's epoch E): truncate to min(P, log end), which drops
every epoch above F, and ask again. Each round removes at least one of our epochs, so the rounds
end. A partition with no epochs of its own and an empty log has nothing to truncate; with batches
but no epochs, or after OFFSET_OUT_OF_RANGE above the leader's end, it asks for the leader's
current epoch, whose answer is the leader's log end.

One OffsetForLeaderEpoch names at most EPOCH_REQUEST_PARTITIONS_MAX partitions (its answer
may cut logs and rewrite epoch checkpoints, fsyncs on the driver's loop); the others ask next.

Fetches go through an incremental fetch session (KIP-227, follower_session.py, as Kafka's
replica fetcher does): the first is full and opens a session on the leader; later ones name only
the partitions added or whose fetch parameters changed, and forget those no longer fetched (a
partition backing off, truncating or fenced leaves the session and comes back with its
parameters). The leader's answer then lists only partitions with news, so an idle follower's
long poll names no partition either way. A partition left out of a full answer backs off; one
left out of an incremental answer had nothing new. The leader refusing the session (not found,
wrong epoch) costs a full fetch, not a back-off.

Errors: OFFSET_OUT_OF_RANGE below the leader's log start -> start again, empty, at it; above the
leader's end -> TRUNCATING. FENCED_LEADER_EPOCH -> FENCED. Anything else (UNKNOWN_LEADER_EPOCH and
NOT_LEADER_OR_FOLLOWER, usually a LeaderAndIsr still on its way; a storage error on append; a lost
connection) -> that partition backs off: RETRY_FIRST_MS, doubling to backoff_ms, reset by the next
successful answer. Log lines: one per state change and per truncation (from, to, why); an error
is logged when it differs from the partition's previous one, never per request.
"""

from __future__ import annotations

import enum
import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from epochlog.protocol.apis.fetch import FetchRequest, FetchTopic, ForgottenTopic
from epochlog.protocol.apis.offset_for_leader_epoch import (
    OffsetForLeaderEpochRequest,
    OffsetForLeaderPartition,
    OffsetForLeaderTopic,
)
from epochlog.protocol.error_codes import ErrorCode, name_of
from epochlog.protocol.schema import Message

from .clock import Clock
from .follower_session import FollowerSession, fetch_partition
from .partition import Partition, Role
from .storage import Log, StorageError

log = logging.getLogger("epochlog.follower")

FETCH = 1
OFFSET_FOR_LEADER_EPOCH = 23
UNDEFINED = -1
RETRY_FIRST_MS = 50  # the first retry after an error; transient ones (a LeaderAndIsr on its way)
# clear quickly, so failover is not slowed by a full backoff_ms
FAILURES_BEFORE_WARNING = 6  # about 3 s of retries of one error before it is a WARNING
SOURCE_DOWN_WARN_MS = 15_000  # a source unreachable this long is a WARNING
FAILURES_COUNTED_MAX = 16  # the backoff exponent stops growing here (backoff_ms caps it anyway)
MIN_BYTES = 1
# Partitions asked in one OffsetForLeaderEpoch: applying its answer may cut logs and rewrite
# epoch checkpoints (an fsync or two each, on the driver's event loop); after a restart
# thousands of partitions ask at once, and one answer for all of them held the loop past the
# broker's session timeout (issue 33); at 10,000 partitions under load even 100 took 1-3 s
# each. The rest ask in the next request, right after.
EPOCH_REQUEST_PARTITIONS_MAX = 25

TopicPartition = tuple[str, int]


class FollowState(enum.Enum):
    TRUNCATING = "truncating"
    FETCHING = "fetching"
    FENCED = "fenced"


@dataclass
class FollowerStats:
    """Counters shared by every SourceFetcher of a broker (metrics read them)."""

    bytes_appended: int = 0
    records_appended: int = 0
    truncations: int = 0
    errors: Counter[str] = field(default_factory=Counter)  # error name -> count


@dataclass(eq=False)
class _Followed:
    partition: Partition
    leader_epoch: int  # the leader epoch of the LeaderAndIsr we follow under
    generation: int  # a new one at every add, so answers to older requests are dropped
    state: FollowState = FollowState.TRUNCATING
    check_end: bool = False  # ask for the leader's log end even without epochs of our own
    retry_at_ms: int = 0
    failures: int = 0
    last_error: str = ""
    warned: bool = False  # the persisting error was logged as a WARNING
    lag: int = 0  # the leader's high watermark minus our log end, at the last fetch

    @property
    def name(self) -> str:
        return self.partition.name


@dataclass(frozen=True)
class _Sent:
    generation: int
    value: int  # the epoch asked (OffsetForLeaderEpoch) or the fetch offset (Fetch)


def truncation_point(log_: Log, leader_epoch: int, leader_end_offset: int
                     ) -> tuple[int, bool, str]:
    """Where to cut our log given the leader's (epoch, end offset) answer: (offset, done, why).
    Kafka's AbstractFetcherThread.getOffsetTruncationState, KIP-279 included."""
    end = log_.log_end_offset
    if leader_end_offset == UNDEFINED:
        return (log_.high_watermark, True,
                "the leader has no end offset for our epoch: our high watermark (KIP-101 fallback)")
    ours_epoch, ours_end = log_.end_offset_for_epoch(leader_epoch)
    if ours_end == UNDEFINED:
        return (min(leader_end_offset, end), True,
                (f"we hold no epoch at or below the leader's {leader_epoch}: its end offset "
                 f"{leader_end_offset}"))
    if ours_epoch != leader_epoch:
        return (min(ours_end, end), False,
                (f"the leader's epoch {leader_epoch} (ending at {leader_end_offset}) is unknown "
                 f"here: dropping our epochs after {ours_epoch} (KIP-279)"))
    return (min(ours_end, leader_end_offset, end), True,
            f"epoch {leader_epoch} ends at {leader_end_offset} on the leader, at {ours_end} here")


class SourceFetcher:
    """The partitions this broker follows whose leader is one source broker."""

    def __init__(self, broker_id: int, source_id: int, clock: Clock, *,
                 fetch_max_bytes: int, partition_max_bytes: int, max_wait_ms: int,
                 backoff_ms: int, stats: FollowerStats | None = None) -> None:
        assert fetch_max_bytes > 0 and partition_max_bytes > 0 and max_wait_ms >= 0
        assert backoff_ms >= 0
        self.broker_id = broker_id
        self.source_id = source_id
        self.clock = clock
        self.fetch_max_bytes = fetch_max_bytes
        self.partition_max_bytes = partition_max_bytes
        self.max_wait_ms = max_wait_ms
        self.backoff_ms = backoff_ms
        self.stats = stats if stats is not None else FollowerStats()
        self._followed: dict[TopicPartition, _Followed] = {}
        self._in_flight: tuple[int, dict[TopicPartition, _Sent]] | None = None
        self._generations = 0
        self._rotation = 0  # where the next Fetch starts its partition list (fairness)
        self._last_failure = ""
        self._failing_since_ms: int | None = None  # since when fetches from the source fail
        self._warned_down = False
        self.session = FollowerSession()  # KIP-227: idle fetches name no partition
        self._incremental = False  # the Fetch in flight is incremental
        self.partitions_named_total = 0  # partitions our Fetch requests named

    def __repr__(self) -> str:
        return f"SourceFetcher(broker {self.broker_id} <- {self.source_id}, {len(self)} partitions)"

    # ------------------------------------------------------------------------------ membership
    def add(self, partition: Partition) -> None:
        """(Re)start following: TRUNCATING. Answers to requests sent before are dropped."""
        assert partition.role is Role.FOLLOWER and partition.leader_id == self.source_id, \
            f"{partition} is not a follower of broker {self.source_id}"
        self._generations += 1
        tp = (partition.topic, partition.index)
        self._followed[tp] = _Followed(partition, partition.leader_epoch, self._generations)
        plog = partition.log
        log.info("%s: following broker %d at leader epoch %d from log end %d (latest local "
                 "epoch %d): truncating", partition.name, self.source_id, partition.leader_epoch,
                 plog.log_end_offset, plog.epoch_cache.latest_epoch)

    def remove(self, topic: str, index: int) -> None:
        followed = self._followed.pop((topic, index), None)
        if followed is not None:
            log.info("%s: no longer fetching from broker %d (was %s)", followed.name,
                     self.source_id, followed.state.value)

    def __len__(self) -> int:
        return len(self._followed)

    def __contains__(self, tp: object) -> bool:
        return tp in self._followed

    def state_of(self, topic: str, index: int) -> FollowState | None:
        followed = self._followed.get((topic, index))
        return followed.state if followed else None

    @property
    def waiting_for_answer(self) -> bool:
        return self._in_flight is not None

    def next_wakeup_ms(self) -> int | None:
        """When a partition's backoff ends (the driver sleeps until then), or None."""
        now_ms = self.clock()
        times = [f.retry_at_ms for f in self._followed.values()
                 if f.state is not FollowState.FENCED and f.retry_at_ms > now_ms]
        return min(times) if times else None

    def max_lag(self) -> int:
        return max((f.lag for f in list(self._followed.values())), default=0)  # a metrics
        # scrape reads this from another thread: iterate over a copy

    # ---------------------------------------------------------------------------- requests
    def next_request(self) -> tuple[int, Message] | None:
        """The request to send now, or None (one outstanding already, or nothing ready)."""
        if self._in_flight is not None:
            return None
        now_ms = self.clock()
        ready = [f for f in self._followed.values()
                 if f.state is not FollowState.FENCED and f.retry_at_ms <= now_ms
                 and self._still_follows(f)]
        asking = []
        for f in ready:
            if f.state is FollowState.TRUNCATING:
                epoch = self._epoch_to_ask(f)
                if epoch is None:
                    self._start_fetching(f, "no epochs and an empty log: nothing to truncate")
                else:
                    asking.append((f, epoch))
        if asking:
            return OFFSET_FOR_LEADER_EPOCH, self._epochs_request(
                asking[:EPOCH_REQUEST_PARTITIONS_MAX])
        fetching = [f for f in ready if f.state is FollowState.FETCHING]
        if not fetching:
            return None
        return FETCH, self._fetch_request(fetching)

    def _epoch_to_ask(self, f: _Followed) -> int | None:
        plog = f.partition.log
        latest = plog.epoch_cache.latest_epoch
        if latest >= 0:
            return latest
        if plog.log_end_offset == plog.log_start_offset and not f.check_end:
            return None
        return f.leader_epoch  # its answer is the leader's log end

    def _epochs_request(self, asking: list[tuple[_Followed, int]]) -> Message:
        topics: dict[str, OffsetForLeaderTopic] = {}
        sent = {}
        for f, epoch in asking:
            p = f.partition
            topic = topics.get(p.topic)
            if topic is None:
                topic = topics[p.topic] = OffsetForLeaderTopic(topic=p.topic)
            topic.partitions.append(OffsetForLeaderPartition(
                partition=p.index, current_leader_epoch=f.leader_epoch, leader_epoch=epoch))
            sent[(p.topic, p.index)] = _Sent(f.generation, epoch)
        self._in_flight = (OFFSET_FOR_LEADER_EPOCH, sent)
        return OffsetForLeaderEpochRequest(replica_id=self.broker_id, topics=list(topics.values()))

    def _fetch_request(self, fetching: list[_Followed]) -> Message:
        start = self._rotation % len(fetching)
        self._rotation += 1
        wanted, sent = {}, {}
        for f in fetching[start:] + fetching[:start]:
            p, plog = f.partition, f.partition.log
            end = plog.log_end_offset
            tp = (p.topic, p.index)
            wanted[tp] = (f.leader_epoch, end, _last_batch_epoch(plog), plog.log_start_offset,
                          self.partition_max_bytes)
            sent[tp] = _Sent(f.generation, end)
        built = self.session.build(wanted)
        topics: dict[str, FetchTopic] = {}
        for (name, index), want in built.send:
            topic = topics.get(name)
            if topic is None:
                topic = topics[name] = FetchTopic(topic=name)
            topic.partitions.append(fetch_partition(index, want))
        forgotten: dict[str, ForgottenTopic] = {}
        for name, index in built.forget:
            gone = forgotten.get(name)
            if gone is None:
                gone = forgotten[name] = ForgottenTopic(topic=name)
            gone.partitions.append(index)
        self._in_flight = (FETCH, sent)
        self._incremental = not built.full
        self.partitions_named_total += len(built.send)
        return FetchRequest(replica_id=self.broker_id, max_wait_ms=self.max_wait_ms,
                            min_bytes=MIN_BYTES, max_bytes=self.fetch_max_bytes,
                            isolation_level=0, session_id=built.session_id,
                            session_epoch=built.session_epoch, topics=list(topics.values()),
                            forgotten_topics_data=list(forgotten.values()))

    # ----------------------------------------------------------------------------- answers
    def on_response(self, api_key: int, response: Any) -> list[TopicPartition]:
        """Apply an answer; the partitions whose log or high watermark changed."""
        if self._in_flight is None or self._in_flight[0] != api_key:
            log.warning("broker %d: an answer (api %d) from broker %d that no request of ours "
                        "waits for; ignored", self.broker_id, api_key, self.source_id)
            return []
        sent = self._in_flight[1]
        self._in_flight = None
        if self._failing_since_ms is not None:
            log.info("broker %d: fetching from broker %d works again", self.broker_id,
                     self.source_id)
        self._last_failure = ""
        self._failing_since_ms, self._warned_down = None, False
        changed: set[TopicPartition] = set()
        answered: set[TopicPartition] = set()
        if api_key == FETCH and not self.session.on_answer(response.error_code,
                                                           response.session_id):
            log.info("broker %d: broker %d refused our fetch session (%s): a full fetch next",
                     self.broker_id, self.source_id, name_of(response.error_code))
            return []
        if api_key == FETCH and response.error_code:
            for tp in sent:
                self._answered_error(tp, sent[tp], response.error_code)
            return []
        if api_key == FETCH:
            for topic in response.responses:
                for d in topic.partitions:
                    tp = (topic.topic, d.partition_index)
                    f = self._current(tp, sent, answered)
                    if f is not None:
                        self._guarded(f, self._on_fetched, f, sent[tp], d, changed)
        else:
            for topic in response.topics:
                for a in topic.partitions:
                    tp = (topic.topic, a.partition)
                    f = self._current(tp, sent, answered)
                    if f is not None:
                        self._guarded(f, self._on_epoch_end, f, a, changed)
        if api_key == FETCH and self._incremental:
            return sorted(changed)  # an incremental answer leaves out what has no news
        for tp in sent.keys() - answered:  # the leader left it out: try again later
            f = self._followed.get(tp)
            if f is not None and f.generation == sent[tp].generation:
                self._back_off(f, "left out of the leader's answer")
        return sorted(changed)

    def on_failure(self, reason: str) -> None:
        """The connection was lost, or the request timed out: every partition backs off."""
        if self._in_flight is not None and self._in_flight[0] == FETCH:
            self.session.on_failure()
        self._in_flight = None
        now_ms = self.clock()
        if self._failing_since_ms is None:
            self._failing_since_ms = now_ms
        # A source that stops or restarts (a rolling restart, a clean cluster stop) is routine:
        # INFO; one still unreachable after SOURCE_DOWN_WARN_MS needs a person: WARNING, once.
        lasting = now_ms - self._failing_since_ms >= SOURCE_DOWN_WARN_MS
        if reason != self._last_failure or (lasting and not self._warned_down):
            log.log(logging.WARNING if lasting else logging.INFO,
                    "broker %d: fetching from broker %d failed%s: %s; backing off",
                    self.broker_id, self.source_id,
                    f" for {now_ms - self._failing_since_ms} ms" if lasting else "", reason)
            self._last_failure = reason
            self._warned_down = self._warned_down or lasting
        self.stats.errors["NETWORK_EXCEPTION"] += 1
        for f in self._followed.values():
            if f.state is not FollowState.FENCED:
                self._delay(f)

    def _current(self, tp: TopicPartition, sent: dict[TopicPartition, _Sent],
                 answered: set[TopicPartition]) -> _Followed | None:
        """The partition an answer is about, if it is still the one the request was for."""
        s = sent.get(tp)
        if s is None:
            return None
        answered.add(tp)
        f = self._followed.get(tp)
        if f is None or f.generation != s.generation or not self._still_follows(f):
            return None
        return f

    def _still_follows(self, f: _Followed) -> bool:
        """The partition may have changed role before the driver removed it: never touch a log
        we no longer follow under this epoch."""
        p = f.partition
        return (p.role is Role.FOLLOWER and p.leader_epoch == f.leader_epoch
                and p.leader_id == self.source_id)

    def _guarded(self, f: _Followed, handle: Callable[..., None], *args: Any) -> None:
        """One partition's answer applied; a storage error while cutting its log (no
        descriptor left: descriptors.py) is that partition's alone: it asks for the epochs
        again after a back-off, and the other partitions and the broker go on."""
        try:
            handle(*args)
        except StorageError as exc:
            self.stats.errors[name_of(exc.error_code)] += 1
            self._set_state(f, FollowState.TRUNCATING, f"truncating failed: {exc}")
            self._back_off(f, f"truncating failed: {exc}")

    def _answered_error(self, tp: TopicPartition, s: _Sent, code: int) -> None:
        f = self._followed.get(tp)
        if f is not None and f.generation == s.generation:
            self._on_error(f, code, "Fetch")

    def _on_epoch_end(self, f: _Followed, a: Any, changed: set[TopicPartition]) -> None:
        if a.error_code:
            self._on_error(f, a.error_code, "OffsetForLeaderEpoch")
        elif f.state is FollowState.TRUNCATING:
            self._truncate_by_epoch(f, a.leader_epoch, a.end_offset, "OffsetForLeaderEpoch",
                                    changed)
            self._succeeded(f)

    def _on_fetched(self, f: _Followed, s: _Sent, d: Any, changed: set[TopicPartition]) -> None:
        plog = f.partition.log
        if d.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            self._out_of_range(f, d.log_start_offset, changed)
            return
        if d.error_code:
            self._on_error(f, d.error_code, "Fetch")
            return
        if f.state is not FollowState.FETCHING or s.value != plog.log_end_offset:
            return  # our log moved since the request: this answer is for another offset
        div = d.diverging_epoch
        if div.epoch != UNDEFINED or div.end_offset != UNDEFINED:
            if not self._truncate_by_epoch(f, div.epoch, div.end_offset, "diverging epoch",
                                           changed):
                self._set_state(f, FollowState.TRUNCATING, "the leader's diverging epoch "
                                f"{div.epoch} is unknown here: asking for epoch ends")
            return
        tp = (f.partition.topic, f.partition.index)
        if d.records:
            try:
                info = plog.append_as_follower(d.records)
            except StorageError as exc:
                self.stats.errors[name_of(exc.error_code)] += 1
                self._back_off(f, f"appending at offset {plog.log_end_offset}: {exc}")
                return
            self.stats.bytes_appended += info.size_bytes
            self.stats.records_appended += info.last_offset - info.first_offset + 1
            changed.add(tp)
        if (d.log_start_offset > plog.log_start_offset
                and plog.advance_log_start_offset(min(d.log_start_offset, plog.log_end_offset))):
            changed.add(tp)
        if f.partition.follow_high_watermark(d.high_watermark):
            changed.add(tp)
        f.lag = max(0, d.high_watermark - plog.log_end_offset)
        self._succeeded(f)

    def _out_of_range(self, f: _Followed, leader_start: int,
                      changed: set[TopicPartition]) -> None:
        plog = f.partition.log
        end = plog.log_end_offset
        self.stats.errors["OFFSET_OUT_OF_RANGE"] += 1
        if leader_start >= 0 and end < leader_start:
            log.info("%s: truncated fully from offset %d, starting again at %d: the leader's "
                     "log starts there (OFFSET_OUT_OF_RANGE)", f.name, end, leader_start)
            f.partition.truncate_fully_and_start_at(leader_start)
            self.stats.truncations += 1
            changed.add((f.partition.topic, f.partition.index))
            return
        f.check_end = True
        self._set_state(f, FollowState.TRUNCATING, f"fetch offset {end} is past the leader's "
                        "log end (OFFSET_OUT_OF_RANGE): checking epochs")
        self._delay(f)  # a repeat of this (without truncation) must not spin

    def _truncate_by_epoch(self, f: _Followed, epoch: int, end_offset: int, source: str,
                           changed: set[TopicPartition]) -> bool:
        """Truncate per the leader's (epoch, end offset); True when truncation is complete."""
        plog = f.partition.log
        asked_latest = plog.epoch_cache.latest_epoch
        target, done, why = truncation_point(plog, epoch, end_offset)
        old_end = plog.log_end_offset
        if target < old_end:
            f.partition.truncate_to(target)
            self.stats.truncations += 1
            changed.add((f.partition.topic, f.partition.index))
            log.info("%s: truncated from offset %d to %d (%s from broker %d: %s)", f.name,
                     old_end, plog.log_end_offset, source, self.source_id, why)
        # Epochs that start at or after the cut hold no batch now; dropping them makes the next
        # question name a lower epoch (KIP-279's rounds end) and keeps last_fetched_epoch true.
        plog.epoch_cache.truncate_from_end(max(target, plog.log_start_offset))
        if not done:
            assert plog.epoch_cache.latest_epoch < asked_latest or asked_latest < 0, \
                f"{f.name}: a KIP-279 round did not lower our latest epoch {asked_latest}"
            return False
        f.check_end = False
        self._start_fetching(f, f"truncation done ({why})")
        return True

    def _start_fetching(self, f: _Followed, why: str) -> None:
        self._set_state(f, FollowState.FETCHING,
                        f"fetching from offset {f.partition.log.log_end_offset}: {why}")

    def _set_state(self, f: _Followed, state: FollowState, why: str) -> None:
        if f.state is not state:
            log.info("%s: %s -> %s from broker %d at leader epoch %d, %s", f.name,
                     f.state.value, state.value, self.source_id, f.leader_epoch, why)
            f.state = state

    def _on_error(self, f: _Followed, code: int, api: str) -> None:
        name = name_of(code)
        self.stats.errors[name] += 1
        if code == ErrorCode.FENCED_LEADER_EPOCH:
            self._set_state(f, FollowState.FENCED, f"{api} answered {name}: the leader is at a "
                            "newer epoch; waiting for a newer LeaderAndIsr")
            return
        self._back_off(f, f"{api} answered {name}")

    def _back_off(self, f: _Followed, why: str) -> None:
        delay = self._delay(f)
        # The first errors after a leadership change are routine (the leader has not applied
        # its LeaderAndIsr yet): INFO; the same error persisting is a WARNING, once.
        persisting = f.failures >= FAILURES_BEFORE_WARNING
        if why != f.last_error or (persisting and not f.warned):
            log.log(logging.WARNING if persisting else logging.INFO,
                    "%s: %s; retrying in %d ms (broker %d, leader epoch %d)", f.name, why,
                    delay, self.source_id, f.leader_epoch)
            f.last_error = why
            f.warned = f.warned or persisting

    def _delay(self, f: _Followed) -> int:
        delay = min(self.backoff_ms, RETRY_FIRST_MS << f.failures)
        f.failures = min(f.failures + 1, FAILURES_COUNTED_MAX)
        f.retry_at_ms = self.clock() + delay
        return delay

    @staticmethod
    def _succeeded(f: _Followed) -> None:
        f.failures = 0
        f.last_error = ""
        f.warned = False


def _last_batch_epoch(plog: Log) -> int:
    """The epoch of our last batch (KIP-320's last fetched epoch); -1 for an empty log."""
    if plog.log_end_offset <= plog.log_start_offset:
        return UNDEFINED
    return plog.epoch_cache.epoch_for_offset(plog.log_end_offset - 1)
