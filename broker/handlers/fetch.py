"""Fetch (key 1), versions 4-12.

v4 isolation level and last_stable_offset; v5 log_start_offset; v7 fetch sessions (KIP-227,
broker/fetch_sessions.py); v9 current_leader_epoch (KIP-320 fencing, _partitions.serving); v11
rack_id, preferred_read_replica and OFFSET_NOT_AVAILABLE (KIP-392); v12 is flexible with
last_fetched_epoch: a fetcher whose last fetched epoch ends before its fetch offset in our epoch
cache gets `diverging_epoch` (KIP-320/KIP-595) and no records.

Who is served (per partition)
-----------------------------
    fetcher                      leader                       follower
    ---------------------------  ---------------------------  ----------------------------------
    replica (replica_id >= 0)    to the log end; its fetch    NOT_LEADER_OR_FOLLOWER
                                 offset is its log end
                                 (Partition.update_follower)
    consumer, v11+               up to the high watermark,    up to our high watermark
                                 or PreferredReadReplica      (KIP-392 follower read)
    consumer, v4-v10             up to the high watermark     NOT_LEADER_OR_FOLLOWER
Before that, fencing: an older CurrentLeaderEpoch is FENCED_LEADER_EPOCH, a newer one
UNKNOWN_LEADER_EPOCH, on leader and follower alike; a partition we neither lead nor follow is
NOT_LEADER_OR_FOLLOWER (or UNKNOWN_TOPIC_OR_PARTITION).

KIP-392 on the leader: a consumer's v11+ fetch asks the replica selector (`replica_selector_class`,
broker/replica_selector.py); when it names another replica, the answer carries
preferred_read_replica and no records (as Kafka's), with the high watermark and log start.

Consumer offsets (KIP-392's out-of-range cases; OFFSET_NOT_AVAILABLE only from v11, which is
what the seed bumped the version for; older versions get an empty answer for case 1):
    fetch offset                                        answer
    --------------------------------------------------  ---------------------------------------
    below the log start                     (case 3)    OFFSET_OUT_OF_RANGE
    up to the high watermark                            records below the high watermark
    above the high watermark, up to log end (case 1)    OFFSET_NOT_AVAILABLE (not known committed)
    above the log end, up to the leader's high          OFFSET_NOT_AVAILABLE (committed, not yet
      watermark as this follower knows it  (case 2)       held here)
    beyond that                             (case 4)    OFFSET_OUT_OF_RANGE
Every OFFSET_OUT_OF_RANGE carries our log start offset and high watermark. Replicas are out of
range outside [log start, log end].

Isolation (KIP-98): a read_committed consumer reads up to the last stable offset instead of the
high watermark (below it every transaction is settled: storage's producer state), and gets the
aborted transactions holding offsets of the records answered, whose records it drops; every
answer carries the last stable offset. read_uncommitted answers no aborted transactions (null).

Sizes: partition_max_bytes per partition and max_bytes per request, except that the first batch
of the first partition with data is always returned whole (KIP-74).

Long poll (fetch_wait.ParkedFetch decides): with fewer than min_bytes to return, nothing to answer
at once and max_wait_ms left (capped by fetch_wait_ms_max), the request waits in the fetch
purgatory, woken whenever a watched partition changes (an append, a high watermark move, a role
change), and reads again. Answered at once: an error, a divergence, a preferred read replica,
and (KIP-392 "high watermark propagation") a replica fetch from a follower that has not been told
the current high watermark of a partition (FollowerProgress.high_watermark_sent), which includes
the first fetch after we became leader; a high watermark move also wakes waiting replica
fetches. The protocol carries no follower high watermark, so the leader remembers what it told
each follower, as the seed says the fetch session lets it.

Structure: the decisions are sync functions of (app, request) that the deterministic simulation
calls with a small app (broker_id, replicas, metadata, config): `begin` (session, follower
positions), `read` (one pass over the partitions, no waiting, no mutation), `finish` (the answer
as sent: incremental filtering, session and follower bookkeeping, counters); `answer` chains the
three without waiting; `read_or_park` is one pass of the long poll. `handle` is the asyncio
driver that adds the waiting.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.fetch import (
    AbortedTransaction,
    EpochEndOffset,
    FetchableTopicResponse,
    FetchPartition,
    FetchRequest,
    FetchResponse,
    LeaderIdAndEpoch,
    PartitionData,
)
from epochlog.protocol.batch import iter_headers
from epochlog.protocol.error_codes import ErrorCode

from ..fetch_sessions import FetchSession, FetchSessionCache, Kind, must_answer, remember
from ..fetch_wait import ParkedFetch
from ..partition import Partition, Role
from ..read_path import ReadPath
from ..replica_selector import NO_PREFERENCE, ClientView, preferred_read_replica, selector_for
from ..storage import CorruptLog, StorageError
from . import register
from ._context import replicas_of
from ._partitions import serving

if TYPE_CHECKING:
    from ._context import BrokerApp, RequestContext

log = logging.getLogger("epochlog.broker")

E = ErrorCode
READ_COMMITTED = 1
NO_DIVERGENCE = EpochEndOffset()
FOLLOWER_READS_VERSION_MIN = 11  # KIP-392: RackId, PreferredReadReplica, OFFSET_NOT_AVAILABLE
Want = tuple[str, FetchPartition]
CORRUPTION_REPORTS_MAX = 64  # distinct corrupt places logged per partition


def read_path(app: BrokerApp) -> ReadPath:
    """The app's ReadPath, made on first use from its config (a simulation may set its own
    beforehand, e.g. with a seeded random generator for session ids)."""
    state = app.read_path
    if state is None:
        state = ReadPath(FetchSessionCache(app.config.fetch_sessions_max),
                         selector_for(app.config.replica_selector_class))
        app.read_path = state
    return state


@dataclass
class Plan:
    """One Fetch request, its session resolved: what every pass reads."""

    request: FetchRequest
    version: int
    kind: Kind
    session: FetchSession | None
    wants: list[Want]

    @property
    def from_replica(self) -> bool:
        return self.request.replica_id >= 0

    @property
    def follower_reads(self) -> bool:
        return not self.from_replica and self.version >= FOLLOWER_READS_VERSION_MIN

    @property
    def read_committed(self) -> bool:
        return not self.from_replica and self.request.isolation_level == READ_COMMITTED


@dataclass
class Read:
    """One pass over a plan's partitions."""

    parts: list[tuple[str, PartitionData]]
    bytes: int = 0
    answer_now: bool = False
    as_follower: list[int] = field(default_factory=list)  # bytes per partition read as follower


# ------------------------------------------------------------------------------------ driver
async def handle(ctx: RequestContext, request: FetchRequest) -> FetchResponse:
    app = ctx.app
    plan = begin(app, request, ctx.version)
    if isinstance(plan, FetchResponse):
        return plan
    replicas = replicas_of(app)
    clock = replicas.clock
    parked = ParkedFetch(clock(), min(request.max_wait_ms, app.config.fetch_wait_ms_max),
                         request.min_bytes)
    while True:
        now_ms = clock()
        done = read_or_park(app, plan, parked, now_ms)
        if isinstance(done, FetchResponse):
            return done
        if not await replicas.fetch_purgatory.wait_until(
                [(topic, p.partition) for topic, p in plan.wants],
                lambda: parked.moved(positions(app, plan)), parked.deadline_ms - now_ms,
                checked=True):  # read_or_park just parked on the positions of now
            return finish(app, plan, done)


def read_or_park(app: BrokerApp, plan: Plan, parked: ParkedFetch,
                 now_ms: int) -> FetchResponse | Read:
    """One pass of the long poll (fetch_wait.py decides): the answer if it is due now; else
    the read (the answer if the max wait passes with nothing moved), parked on the positions
    it watches."""
    done = read(app, plan)
    if parked.read(now_ms, done.bytes, done.answer_now):
        return finish(app, plan, done)
    parked.park(positions(app, plan))
    return done


def answer(app: BrokerApp, request: FetchRequest, version: int) -> FetchResponse:
    """The whole request without waiting (for the simulation and unit tests)."""
    plan = begin(app, request, version)
    if isinstance(plan, FetchResponse):
        return plan
    return finish(app, plan, read(app, plan))


# ------------------------------------------------------------------------------------- begin
def begin(app: BrokerApp, request: FetchRequest, version: int) -> Plan | FetchResponse:
    """Resolve the session and note a replica's fetch offsets; a FetchResponse when the session
    fields are refused (no partitions, session_id 0, as Kafka answers)."""
    begun = read_path(app).sessions.begin(request)
    if begun.kind is Kind.ERROR:
        return FetchResponse(error_code=begun.error_code, session_id=0)
    if begun.kind is Kind.INCREMENTAL:
        assert begun.session is not None
        wants = begun.session.wants()
    else:
        wants = [(t.topic, p) for t in request.topics for p in t.partitions]
    if request.replica_id >= 0:
        _note_follower_positions(app, request.replica_id, wants)
    return Plan(request, version, begun.kind, begun.session, wants)


def _note_follower_positions(app: BrokerApp, replica_id: int, wants: list[Want]) -> None:
    for topic, p in wants:
        partition = replicas_of(app).get(topic, p.partition)
        if (partition is not None and partition.is_leader
                and partition.fence(p.current_leader_epoch) == 0
                and partition.update_follower(replica_id, p.fetch_offset,
                                              p.last_fetched_epoch, p.log_start_offset)):
            replicas_of(app).poke((topic, p.partition))


def positions(app: BrokerApp, plan: Plan) -> list[tuple[int, int, Role, int]]:
    """What a waiting fetch watches: per partition, the readable end, leader epoch, role and,
    for replicas, the high watermark (a follower must learn a new one at once)."""
    out = []
    for topic, p in plan.wants:
        partition = replicas_of(app).get(topic, p.partition)
        if partition is None:
            out.append((-1, -1, Role.OFFLINE, -1))
        else:
            out.append((partition.readable_end(plan.from_replica, plan.read_committed),
                        partition.leader_epoch,
                        partition.role, partition.high_watermark if plan.from_replica else -1))
    return out


# -------------------------------------------------------------------------------------- read
def read(app: BrokerApp, plan: Plan) -> Read:
    request = plan.request
    budget = request.max_bytes
    done = Read(parts=[])
    client = ClientView(request.rack_id, "")
    for topic, p in plan.wants:
        data, as_follower, answer_now = _read_one(app, plan, client, topic, p, budget,
                                                  min_one=done.bytes == 0)
        size = len(data.records or b"")
        done.bytes += size
        budget -= size
        done.answer_now = done.answer_now or answer_now
        if as_follower:
            done.as_follower.append(size)
        done.parts.append((topic, data))
    return done


def _read_one(app: BrokerApp, plan: Plan, client: ClientView, topic: str, p: FetchPartition,
              budget: int, min_one: bool) -> tuple[PartitionData, bool, bool]:
    """(the partition's answer, read by us as a follower, answer the request at once)."""
    data = PartitionData(partition_index=p.partition, aborted_transactions=None, records=b"")
    partition, data.error_code = serving(app, topic, p.partition, p.current_leader_epoch,
                                         follower_ok=plan.follower_reads)
    if partition is None:
        _hint_leader(app, topic, p.partition, data)
        return data, False, True
    data.high_watermark = partition.high_watermark
    data.last_stable_offset = partition.last_stable_offset
    data.log_start_offset = partition.log_start_offset
    if plan.from_replica:
        return data, False, _read_for_replica(app, plan, partition, p, data, budget, min_one)
    if partition.is_leader and plan.follower_reads:
        data.preferred_read_replica = _preferred(app, partition, client, p.fetch_offset)
        if data.preferred_read_replica != NO_PREFERENCE:
            return data, False, True
    as_follower = not partition.is_leader
    if p.last_fetched_epoch >= 0 and _diverging(partition, p, data):
        return data, as_follower, True
    data.error_code = _consumer_offset_error(partition, p.fetch_offset, plan.follower_reads)
    if data.error_code:
        return data, as_follower, True
    if plan.read_committed:
        _read_records(partition, p, data, data.last_stable_offset, budget, min_one)
        try:
            data.aborted_transactions = _aborted(partition, p.fetch_offset, data)
        except StorageError as exc:  # never records without the list of what to drop
            data.error_code, data.records = exc.error_code, None
    else:
        _read_records(partition, p, data, partition.high_watermark, budget, min_one)
    return data, as_follower, data.error_code != 0  # a storage error is answered at once


def _aborted(partition: Partition, fetch_offset: int, data: PartitionData
             ) -> list[AbortedTransaction]:
    """The aborted transactions holding offsets of the records answered (read_committed: the
    client drops those producers' records from each one's first offset to its marker)."""
    if not data.records:
        return []
    end = fetch_offset
    for _, header in iter_headers(data.records):
        end = header.next_offset
    return [AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
            for a in partition.log.aborted_in(fetch_offset, end)]


def _read_for_replica(app: BrokerApp, plan: Plan, partition: Partition, p: FetchPartition,
                      data: PartitionData, budget: int, min_one: bool) -> bool:
    """A follower's fetch (we lead); True to answer at once."""
    if p.last_fetched_epoch >= 0 and _diverging(partition, p, data):
        return True
    if not partition.log_start_offset <= p.fetch_offset <= partition.log_end_offset:
        data.error_code = E.OFFSET_OUT_OF_RANGE
        return True
    _read_records(partition, p, data, partition.log_end_offset, budget, min_one)
    if data.error_code:
        return True
    progress = partition.followers.get(plan.request.replica_id)
    return progress is not None and progress.high_watermark_sent != partition.high_watermark


def _consumer_offset_error(partition: Partition, offset: int, follower_reads: bool) -> int:
    """KIP-392's cases 1-4 for a consumer's fetch offset (the table above); 0 to read."""
    if offset < partition.log_start_offset:
        return E.OFFSET_OUT_OF_RANGE  # case 3
    if offset <= partition.high_watermark:
        return 0
    if offset <= partition.log_end_offset:  # case 1: held, not known committed
        return E.OFFSET_NOT_AVAILABLE if follower_reads else 0
    if not partition.is_leader and offset <= partition.leader_high_watermark:
        return E.OFFSET_NOT_AVAILABLE  # case 2: committed, not yet held here
    return E.OFFSET_OUT_OF_RANGE  # case 4


def _read_records(partition: Partition, p: FetchPartition, data: PartitionData, end: int,
                  budget: int, min_one: bool) -> None:
    bytes_max = min(p.partition_max_bytes, budget)
    if p.fetch_offset >= end or (bytes_max <= 0 and not min_one):
        return
    try:
        records = partition.log.read(p.fetch_offset, max(bytes_max, 0), offset_max=end)
    except CorruptLog as exc:  # retriable for the client
        data.error_code = exc.error_code
        if partition.on_corrupt is not None:  # the replica goes offline and is repaired
            partition.on_corrupt(partition, exc)
            return
        reported = partition.corruption_reported  # else said once per partition and place
        if str(exc) not in reported and len(reported) < CORRUPTION_REPORTS_MAX:
            reported.add(str(exc))
            log.error("%s: corrupt data on disk, not served: %s", partition.name, exc)
        return
    except StorageError as exc:
        data.error_code = exc.error_code
        return
    if len(records) > bytes_max and not min_one:
        return  # a batch bigger than what is left: the next fetch starts with it
    data.records = records


def _preferred(app: BrokerApp, partition: Partition, client: ClientView, fetch_offset: int) -> int:
    racks = {b.broker_id: b.rack for b in app.metadata.brokers.values()}
    return preferred_read_replica(read_path(app).selector, partition, app.config.rack or None,
                                  racks, client, fetch_offset, partition.clock())


def _diverging(partition: Partition, p: FetchPartition, data: PartitionData) -> bool:
    """KIP-320: the fetcher's last fetched epoch ends, in our log, before its fetch offset."""
    epoch, end_offset = partition.log.end_offset_for_epoch(p.last_fetched_epoch)
    if epoch == -1 or epoch < p.last_fetched_epoch or end_offset < p.fetch_offset:
        data.diverging_epoch = EpochEndOffset(epoch=epoch, end_offset=end_offset)
        return True
    return False


def _hint_leader(app: BrokerApp, topic: str, index: int, data: PartitionData) -> None:
    """v12: name the leader we know of, so the client need not wait for a metadata refresh."""
    if data.error_code in (E.NOT_LEADER_OR_FOLLOWER, E.FENCED_LEADER_EPOCH):
        info = app.metadata.partition(topic, index)
        if info is not None:
            data.current_leader = LeaderIdAndEpoch(leader_id=info.leader,
                                                   leader_epoch=info.leader_epoch)


# ------------------------------------------------------------------------------------ finish
def finish(app: BrokerApp, plan: Plan, done: Read) -> FetchResponse:
    """The answer as sent: an incremental session's answer lists only what changed; the session
    and the followers' last-told high watermarks are updated; counters counted."""
    state = read_path(app)
    sent = done.parts
    if plan.kind is Kind.INCREMENTAL and plan.session is not None:
        sent = [(topic, d) for topic, d in done.parts if _must_answer(plan.session, topic, d)]
    if plan.session is not None and state.sessions.get(plan.session.session_id) is plan.session:
        remember(plan.session, [((topic, d.partition_index), d.high_watermark, d.log_start_offset,
                                 d.error_code) for topic, d in sent])
    if plan.from_replica:
        _note_high_watermarks_sent(app, plan.request.replica_id, sent, state)
        state.replica_fetches_total += 1
        state.replica_fetch_partitions_named_total += sum(
            len(t.partitions) for t in plan.request.topics)
        state.replica_fetch_partitions_answered_total += len(sent)
    else:
        _count_consumer_reads(state, sent, done)
    topics: dict[str, FetchableTopicResponse] = {}
    for topic, data in sent:
        entry = topics.get(topic)
        if entry is None:
            entry = topics[topic] = FetchableTopicResponse(topic=topic)
        entry.partitions.append(data)
    session_id = plan.session.session_id if plan.session is not None else 0
    return FetchResponse(responses=list(topics.values()), session_id=session_id)


def _must_answer(session: FetchSession, topic: str, data: PartitionData) -> bool:
    part = session.partitions.get((topic, data.partition_index))
    if part is None:
        return True
    flagged = (data.preferred_read_replica != NO_PREFERENCE
               or data.diverging_epoch != NO_DIVERGENCE)
    return must_answer(part, data.high_watermark, data.log_start_offset, bool(data.records),
                       data.error_code, flagged)


def _note_high_watermarks_sent(app: BrokerApp, replica_id: int,
                               sent: list[tuple[str, PartitionData]], state: ReadPath) -> None:
    stale = False
    for topic, data in sent:
        partition = replicas_of(app).get(topic, data.partition_index)
        progress = partition.followers.get(replica_id) if partition is not None else None
        if progress is not None and data.error_code == 0:
            stale = stale or progress.high_watermark_sent != data.high_watermark
            progress.high_watermark_sent = data.high_watermark
    state.stale_follower_answers_total += stale


def _count_consumer_reads(state: ReadPath, sent: list[tuple[str, PartitionData]],
                          done: Read) -> None:
    state.preferred_replica_answers_total += sum(
        d.preferred_read_replica != NO_PREFERENCE for _, d in sent)
    if done.as_follower:
        state.follower_fetches_total += 1
        state.follower_fetch_bytes_total += sum(done.as_follower)


register(ApiKey.FETCH, 4, 12, handle)
