"""Produce (key 0), versions 3-10.

v3 is the first with RecordBatch v2, the only format accepted (magic 0/1 batches get
UNSUPPORTED_FOR_MESSAGE_FORMAT); v5 answers log_start_offset; v8 error messages and, for a batch
refused for some of its records (a record without a key in a compacted topic: INVALID_RECORD; a
timestamp out of bounds: INVALID_TIMESTAMP), record_errors naming each by its index in the batch
(KIP-467), as Kafka does, so a client fails those records and the rest apart; v9 is flexible
and carries epochlog's KIP-359 field: each partition's `current_leader_epoch` (tagged field 359,
protocol/apis/produce.py), fenced as Fetch is: older than the leader's epoch -> FENCED_LEADER_EPOCH,
newer -> UNKNOWN_LEADER_EPOCH, -1 or absent -> no check; v10 (KIP-951) names the current leader
and its endpoint beside NOT_LEADER_OR_FOLLOWER and FENCED_LEADER_EPOCH (`hint_leaders`).

Each partition's records are exactly one batch (Kafka's rule since v3: more is INVALID_RECORD),
whose structure is checked here (whole, magic 2, size against message_max_bytes, not a control
batch, transactional only in a request naming a transactional id) before the leader
appends it through storage, which checks its CRC (once; a
mismatch is CORRUPT_MESSAGE), assigns offsets from the log end and stamps our leader epoch.
Idempotent producers: storage's producer state checks sequences; a retried batch (Kafka's
DUPLICATE_SEQUENCE_NUMBER case) is answered as a success with its original offsets, as Kafka does;
OUT_OF_ORDER_SEQUENCE_NUMBER and INVALID_PRODUCER_EPOCH come from storage. Kafka (2.5+, KIP-360) no
longer answers UNKNOWN_PRODUCER_ID to a produce, and neither do we: an unknown producer may start at
any sequence.

A partition refused answers base_offset -1, as Kafka does (INVALID_OFFSET), never an offset.

acks: 0 -> no answer; 1 -> answered once the leader has appended; -1 (all) -> answered when the
high watermark passes the last batch (the produce purgatory, woken when it moves) or after
timeout_ms with REQUEST_TIMED_OUT; a partition that lost its leadership meanwhile answers
NOT_LEADER_OR_FOLLOWER. Anything else is INVALID_REQUIRED_ACKS.

Transactions (KIP-98): a transactional batch opens the producer's transaction in the partition
(storage's producer state), which the coordinator's marker closes (handlers/write_txn_markers.py);
meanwhile the producer may not write outside it (INVALID_TXN_STATE). As Kafka before KIP-890, the
leader does not ask the coordinator whether the partition was added to the transaction.

min.insync.replicas (the topic's, Kafka's exact rules; acks 0 and 1 are unaffected):
- before appending, acks=all with an ISR (the one we hold, not counting a proposal in flight)
  smaller than min.insync.replicas -> NOT_ENOUGH_REPLICAS, nothing appended;
- once the high watermark passes the batch, a maximal ISR (isr.py: held plus proposed members)
  smaller than min.insync.replicas -> NOT_ENOUGH_REPLICAS_AFTER_APPEND: the ISR shrank while the
  request waited, the records are in the log but fewer replicas than asked for hold them.

The decisions are plain functions a simulation calls without an event loop: `append_all` (every
partition through `append`; the answer and what to wait for) and replication_wait.py's
`ReplicationWait` (still waiting, or each partition's answer); the handler adds only the wait.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.produce import (
    BatchIndexAndErrorMessage,
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceResponse,
)
from epochlog.protocol.batch import CorruptBatch, read_header
from epochlog.protocol.error_codes import ErrorCode

from ..partition import Partition
from ..replication_wait import wait_for_replication
from ..storage import StorageError
from . import register
from ._context import replicas_of
from ._partitions import leader

if TYPE_CHECKING:
    from ._context import BrokerApp, RequestContext

log = logging.getLogger("epochlog.broker")
E = ErrorCode
ACKS = (-1, 0, 1)


class _Refused(Exception):
    def __init__(self, code: int, message: str) -> None:
        self.code = code
        super().__init__(message)


def _check_batches(records: bytes | None, bytes_max: int, transactional_id: str | None) -> None:
    """What the request may carry: whole v2 batches, none too large, no control batch, and
    transactional ones only in a request naming its transactional id. CRCs are checked once, by
    storage as it appends (CORRUPT_MESSAGE), not here as well."""
    if not records:
        raise _Refused(E.CORRUPT_MESSAGE, "no record batches")
    pos = 0
    while pos < len(records):
        if pos:  # Kafka's rule since Produce v3: exactly one batch for each partition
            raise _Refused(E.INVALID_RECORD, "more than one record batch for the partition: "
                                             "a Produce request (v3+) carries exactly one")
        try:
            header = read_header(records, pos)
            if len(records) - pos < header.size:
                raise CorruptBatch(f"batch of {header.size} bytes cut short at "
                                   f"{len(records) - pos}", "RecordBatch.batch_length")
        except CorruptBatch as exc:
            code = E.UNSUPPORTED_FOR_MESSAGE_FORMAT if exc.field == "RecordBatch.magic" \
                else E.CORRUPT_MESSAGE
            raise _Refused(code, str(exc)) from None
        if header.size > bytes_max:
            raise _Refused(E.MESSAGE_TOO_LARGE, f"batch of {header.size} bytes is over "
                                                f"max.message.bytes {bytes_max}")
        if header.is_control:
            raise _Refused(E.INVALID_RECORD, "a control batch: only the transaction "
                                             "coordinator writes those (WriteTxnMarkers)")
        if header.producer_id >= 0 and header.base_sequence < 0:
            raise _Refused(E.INVALID_RECORD, f"a batch of producer {header.producer_id} without "
                                             "a sequence (idempotent batches carry one)")
        if header.is_transactional and not transactional_id:
            raise _Refused(E.INVALID_RECORD, "a transactional batch in a request that names "
                                             "no transactional id")
        pos += header.size


def append(app: BrokerApp, topic: str, data: PartitionProduceData, acks: int,
           transactional_id: str | None = None
           ) -> tuple[PartitionProduceResponse, Partition | None, int]:
    """The answer for one partition, and (partition, last offset) to wait for under acks=all
    (partition None: nothing to wait for)."""
    answer = PartitionProduceResponse(index=data.index, base_offset=-1)  # -1 unless appended
    partition, answer.error_code = leader(app, topic, data.index, data.current_leader_epoch)
    if partition is None:
        if answer.error_code == E.UNKNOWN_TOPIC_OR_PARTITION:
            app.auto_create_soon(topic)
        return answer, None, -1
    if acks == -1 and partition.under_min_isr():
        answer.error_code = E.NOT_ENOUGH_REPLICAS
        answer.error_message = (f"{partition.name}: ISR {list(partition.isr)} has fewer than "
                                f"min.insync.replicas={partition.min_insync_replicas} members")
        return answer, None, -1
    try:
        _check_batches(data.records, partition.log.config.max_message_bytes, transactional_id)
        assert data.records is not None
        info = partition.append_as_leader(data.records)
    except _Refused as exc:
        answer.error_code, answer.error_message = exc.code, str(exc)
        return answer, None, -1
    except StorageError as exc:
        answer.error_code, answer.error_message = exc.error_code, str(exc)
        answer.record_errors = [BatchIndexAndErrorMessage(batch_index=e.batch_index,
                                                          batch_index_error_message=e.message)
                                for e in exc.record_errors]
        return answer, None, -1
    replicas_of(app).poke((topic, data.index))
    answer.base_offset = info.first_offset
    answer.log_start_offset = partition.log_start_offset
    if partition.log.config.log_append_time:  # the time the leader stamped (Produce v2+)
        answer.log_append_time_ms = info.max_timestamp_ms
    return answer, partition, info.last_offset


async def handle(ctx: RequestContext, request: ProduceRequest) -> ProduceResponse | None:
    response, waits = append_all(ctx.app, request)
    if request.acks == 0:
        return None
    if request.acks == -1 and waits:
        await wait_for_replication(replicas_of(ctx.app), waits, request.timeout_ms)
    if ctx.version >= 10:  # older versions carry no leader hint: no work on their answers
        hint_leaders(ctx.app, response, ctx.listener)
    return response


def hint_leaders(app: BrokerApp, response: ProduceResponse, listener: str) -> None:
    """KIP-951 (v10): each partition refused as not led here (NOT_LEADER_OR_FOLLOWER,
    FENCED_LEADER_EPOCH) names the leader our metadata knows, and the answer carries that
    leader's endpoint on the listener the request came in on. Older versions drop both."""
    md = app.metadata
    endpoints: dict[int, NodeEndpoint] = {}
    for topic in response.responses:
        for answer in topic.partition_responses:
            if answer.error_code not in (E.NOT_LEADER_OR_FOLLOWER, E.FENCED_LEADER_EPOCH):
                continue
            info = md.partition(topic.name, answer.index)
            if info is None or info.leader < 0 or info.leader not in md.brokers:
                continue
            answer.current_leader = LeaderIdAndEpoch(leader_id=info.leader,
                                                     leader_epoch=info.leader_epoch)
            if info.leader not in endpoints:
                broker = md.brokers[info.leader]
                host, port = broker.endpoint(listener)
                endpoints[info.leader] = NodeEndpoint(node_id=info.leader, host=host, port=port,
                                                      rack=broker.rack)
    response.node_endpoints = [endpoints[n] for n in sorted(endpoints)]


def append_all(app: BrokerApp, request: ProduceRequest
               ) -> tuple[ProduceResponse, list[tuple[PartitionProduceResponse, Partition, int,
                                                      int]]]:
    """Every partition appended (or refused): the answer, and what acks=all waits for (answer,
    partition, leader epoch, last offset; replication_wait.py)."""
    refuse = 0
    if request.acks not in ACKS:
        refuse = E.INVALID_REQUIRED_ACKS
    waits: list[tuple[PartitionProduceResponse, Partition, int, int]] = []
    topics = []
    for topic in request.topic_data:
        answers = []
        for data in topic.partition_data:
            if refuse:
                answers.append(PartitionProduceResponse(index=data.index, error_code=refuse,
                                                        base_offset=-1))
                continue
            answer, partition, last_offset = append(app, topic.name, data, request.acks,
                                                    request.transactional_id)
            answers.append(answer)
            if partition is not None:
                waits.append((answer, partition, partition.leader_epoch, last_offset))
        topics.append(TopicProduceResponse(name=topic.name, partition_responses=answers))
    return ProduceResponse(responses=topics), waits


register(ApiKey.PRODUCE, 3, 10, handle)
