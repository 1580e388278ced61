"""Error answers as data: for each API the broker serves, how to build a valid answer that carries
one error code in every entry the request named (for request hooks, request_hooks.py).

Theory of operation
-------------------
An answer's lists mirror the request's: Produce answers one entry per topic the request named,
each with one entry per partition it named; Metadata one per topic; LeaderAndIsr one flat list of
(topic, partition) entries for all the partitions of all its topics. `Entries` says this for one
list of an answer: which request lists to walk to reach the items it mirrors (more than one:
flattened), which fields to copy from them (looked up on the item, then on the items it is
nested in; "" copies the item itself, for lists of plain names or numbers), fixed values for
fields whose default would read as data (an offset of 0), and the nested list of each entry. An
API's shape is a tuple of them (two when one answer list mirrors either of two request lists,
by version). The builder sets `error_code` (and `error_message` where there is one) on every
entry it makes and, as Kafka's own error answers do (AbstractRequest.getErrorResponse), on the
answer itself where it has a top-level error code; fields absent at the request's version are
simply not written. A Produce with acks=0 gets no answer, as from its handler.

Adding a handler means adding its shape here; tests/broker/test_error_answers.py fails for a
served API without one.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from epochlog.protocol.api import Api
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis import (
    add_partitions_to_txn,
    alter_configs,
    create_partitions,
    create_topics,
    delete_groups,
    delete_records,
    delete_topics,
    describe_configs,
    describe_groups,
    describe_producers,
    describe_topic_partitions,
    describe_transactions,
    elect_leaders,
    fetch,
    find_coordinator,
    leader_and_isr,
    leave_group,
    list_offsets,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    stop_replica,
    txn_offset_commit,
    write_txn_markers,
)
from epochlog.protocol.schema import Message, layout

INJECTED_MESSAGE = "injected by a request hook (test only)"


@dataclass(frozen=True)
class Entries:
    answer: str  # the answer's list field
    entry: type[Message]  # the class of its entries
    path: tuple[str, ...]  # the request's list fields walked, outermost first
    keys: tuple[tuple[str, str], ...] = ()  # (entry field, request item field or "")
    fixed: Mapping[str, Any] = field(default_factory=dict)
    inner: Entries | None = None  # the nested list of each entry, walked from its item


@dataclass(frozen=True)
class Shape:
    lists: tuple[Entries, ...] = ()
    top: Mapping[str, Any] = field(default_factory=dict)  # fixed top-level values


def _topics_partitions(answer: str, topic_entry: type[Message], request: str, name: str,
                       partitions_answer: str, partition_entry: type[Message],
                       partitions_request: str, partition_key: tuple[str, str],
                       request_name: str | None = None,
                       fixed: Mapping[str, Any] | None = None) -> Entries:
    """The common shape: topics, each with its partitions."""
    return Entries(answer, topic_entry, (request,), ((name, request_name or name),),
                   inner=Entries(partitions_answer, partition_entry, (partitions_request,),
                                 (partition_key,), fixed or {}))


SHAPES: dict[ApiKey, Shape] = {
    ApiKey.PRODUCE: Shape((_topics_partitions(
        "responses", produce.TopicProduceResponse, "topic_data", "name",
        "partition_responses", produce.PartitionProduceResponse, "partition_data",
        ("index", "index"), fixed={"base_offset": -1}),)),
    ApiKey.FETCH: Shape((_topics_partitions(
        "responses", fetch.FetchableTopicResponse, "topics", "topic",
        "partitions", fetch.PartitionData, "partitions", ("partition_index", "partition"),
        fixed={"high_watermark": -1}),)),
    ApiKey.LIST_OFFSETS: Shape((_topics_partitions(
        "topics", list_offsets.ListOffsetsTopicResponse, "topics", "name",
        "partitions", list_offsets.ListOffsetsPartitionResponse, "partitions",
        ("partition_index", "partition_index")),)),
    ApiKey.METADATA: Shape((Entries("topics", metadata.MetadataResponseTopic, ("topics",),
                                    (("name", "name"), ("topic_id", "topic_id"))),)),
    ApiKey.LEADER_AND_ISR: Shape((Entries(
        "partition_errors", leader_and_isr.LeaderAndIsrPartitionError,
        ("topic_states", "partition_states"),
        (("topic_name", "topic_name"), ("partition_index", "partition_index"))),)),
    ApiKey.STOP_REPLICA: Shape((
        Entries("partition_errors", stop_replica.StopReplicaPartitionError,
                ("topics", "partition_indexes"), (("topic_name", "name"), ("partition_index", ""))),
        Entries("partition_errors", stop_replica.StopReplicaPartitionError,
                ("topic_states", "partition_states"),
                (("topic_name", "topic_name"), ("partition_index", "partition_index"))))),
    ApiKey.UPDATE_METADATA: Shape(),
    ApiKey.OFFSET_COMMIT: Shape((_topics_partitions(
        "topics", offset_commit.OffsetCommitResponseTopic, "topics", "name",
        "partitions", offset_commit.OffsetCommitResponsePartition, "partitions",
        ("partition_index", "partition_index")),)),
    ApiKey.OFFSET_FETCH: Shape((_topics_partitions(
        "topics", offset_fetch.OffsetFetchResponseTopic, "topics", "name",
        "partitions", offset_fetch.OffsetFetchResponsePartition, "partition_indexes",
        ("partition_index", ""), fixed={"committed_offset": -1}),)),
    ApiKey.FIND_COORDINATOR: Shape((Entries(
        "coordinators", find_coordinator.Coordinator, ("coordinator_keys",), (("key", ""),),
        {"node_id": -1, "port": -1}),), top={"node_id": -1, "port": -1}),
    ApiKey.JOIN_GROUP: Shape(),
    ApiKey.HEARTBEAT: Shape(),
    ApiKey.LEAVE_GROUP: Shape((Entries(
        "members", leave_group.MemberResponse, ("members",),
        (("member_id", "member_id"), ("group_instance_id", "group_instance_id"))),)),
    ApiKey.SYNC_GROUP: Shape(),
    ApiKey.DESCRIBE_GROUPS: Shape((Entries("groups", describe_groups.DescribedGroup, ("groups",),
                                           (("group_id", ""),)),)),
    ApiKey.LIST_GROUPS: Shape(),
    ApiKey.API_VERSIONS: Shape(),
    ApiKey.CREATE_TOPICS: Shape((Entries("topics", create_topics.CreatableTopicResult,
                                         ("topics",), (("name", "name"),)),)),
    ApiKey.DELETE_TOPICS: Shape((
        Entries("responses", delete_topics.DeletableTopicResult, ("topic_names",),
                (("name", ""),)),
        Entries("responses", delete_topics.DeletableTopicResult, ("topics",),
                (("name", "name"), ("topic_id", "topic_id"))))),
    ApiKey.INIT_PRODUCER_ID: Shape(top={"producer_id": -1, "producer_epoch": -1}),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Shape((_topics_partitions(
        "topics", offset_for_leader_epoch.OffsetForLeaderTopicResult, "topics", "topic",
        "partitions", offset_for_leader_epoch.EpochEndOffset, "partitions",
        ("partition", "partition")),)),
    ApiKey.DESCRIBE_CONFIGS: Shape((Entries(
        "results", describe_configs.DescribeConfigsResult, ("resources",),
        (("resource_type", "resource_type"), ("resource_name", "resource_name"))),)),
    ApiKey.CREATE_PARTITIONS: Shape((Entries(
        "results", create_partitions.CreatePartitionsTopicResult, ("topics",),
        (("name", "name"),)),)),
    ApiKey.ELECT_LEADERS: Shape((Entries(
        "replica_election_results", elect_leaders.ReplicaElectionResult, ("topic_partitions",),
        (("topic", "topic"),),
        inner=Entries("partition_result", elect_leaders.PartitionResult, ("partitions",),
                      (("partition_id", ""),))),)),
    ApiKey.DESCRIBE_CLUSTER: Shape(),
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: Shape((Entries(
        "topics", describe_topic_partitions.DescribeTopicPartitionsResponseTopic, ("topics",),
        (("name", "name"),)),)),
    ApiKey.DELETE_GROUPS: Shape((Entries("results", delete_groups.DeletableGroupResult,
                                         ("groups_names",), (("group_id", ""),)),)),
    ApiKey.OFFSET_DELETE: Shape((_topics_partitions(
        "topics", offset_delete.OffsetDeleteResponseTopic, "topics", "name",
        "partitions", offset_delete.OffsetDeleteResponsePartition, "partitions",
        ("partition_index", "partition_index")),)),
    ApiKey.DELETE_RECORDS: Shape((_topics_partitions(
        "topics", delete_records.DeleteRecordsTopicResult, "topics", "name",
        "partitions", delete_records.DeleteRecordsPartitionResult, "partitions",
        ("partition_index", "partition_index"), fixed={"low_watermark": -1}),)),
    # No log dir listed; the error is the answer's own (v3+; before, an empty answer).
    ApiKey.DESCRIBE_LOG_DIRS: Shape(),
    ApiKey.DESCRIBE_PRODUCERS: Shape((_topics_partitions(
        "topics", describe_producers.TopicResponse, "topics", "name",
        "partitions", describe_producers.PartitionResponse, "partition_indexes",
        ("partition_index", "")),)),
    ApiKey.ALTER_CONFIGS: Shape((Entries(
        "responses", alter_configs.AlterConfigsResourceResponse, ("resources",),
        (("resource_type", "resource_type"), ("resource_name", "resource_name"))),)),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: Shape((Entries(
        "responses", alter_configs.AlterConfigsResourceResponse, ("resources",),
        (("resource_type", "resource_type"), ("resource_name", "resource_name"))),)),
    # Transactions.
    ApiKey.ADD_PARTITIONS_TO_TXN: Shape((Entries(
        "results_by_topic_v3_and_below", add_partitions_to_txn.AddPartitionsToTxnTopicResult,
        ("v3_and_below_topics",), (("name", "name"),),
        inner=Entries("results_by_partition",
                      add_partitions_to_txn.AddPartitionsToTxnPartitionResult, ("partitions",),
                      (("partition_index", ""),))),)),
    ApiKey.ADD_OFFSETS_TO_TXN: Shape(),
    ApiKey.END_TXN: Shape(),
    ApiKey.WRITE_TXN_MARKERS: Shape((Entries(
        "markers", write_txn_markers.WritableTxnMarkerResult, ("markers",),
        (("producer_id", "producer_id"),),
        inner=Entries("topics", write_txn_markers.WritableTxnMarkerTopicResult, ("topics",),
                      (("name", "name"),),
                      inner=Entries("partitions",
                                    write_txn_markers.WritableTxnMarkerPartitionResult,
                                    ("partition_indexes",), (("partition_index", ""),)))),)),
    ApiKey.TXN_OFFSET_COMMIT: Shape((_topics_partitions(
        "topics", txn_offset_commit.TxnOffsetCommitResponseTopic, "topics", "name",
        "partitions", txn_offset_commit.TxnOffsetCommitResponsePartition, "partitions",
        ("partition_index", "partition_index")),)),
    ApiKey.DESCRIBE_TRANSACTIONS: Shape((Entries(
        "transaction_states", describe_transactions.TransactionState, ("transactional_ids",),
        (("transactional_id", ""),),
        {"producer_id": -1, "producer_epoch": -1, "transaction_start_time_ms": -1}),)),
    ApiKey.LIST_TRANSACTIONS: Shape(),
}


def error_answer(api: Api, version: int, request: Any, code: int) -> Message | None:
    """The answer to request (at version) that carries code everywhere it can; None when no
    answer is due (Produce with acks=0). KeyError for an API without a shape."""
    shape = SHAPES[api.key]
    if api.key == ApiKey.PRODUCE and request.acks == 0:
        return None
    answer = api.response(**shape.top)
    _stamp(answer, code)
    for entries in shape.lists:
        getattr(answer, entries.answer).extend(_build(entries, (request,), version, code))
    return answer


def _build(entries: Entries, chain: tuple[Any, ...], version: int, code: int
           ) -> Iterator[Message]:
    """Answer entries for the items reached from chain[-1] along entries.path."""
    nullable = {f.name for f in layout(entries.entry) if f.is_nullable(version)}
    for items in _walk(chain, entries.path):
        fields = {ours: value for ours, theirs in entries.keys
                  if (value := _lookup(items, theirs)) is not None or ours in nullable}
        entry = entries.entry(**fields, **entries.fixed)  # a null the version refuses: default
        _stamp(entry, code)
        if entries.inner is not None:
            getattr(entry, entries.inner.answer).extend(
                _build(entries.inner, items, version, code))
        yield entry


def _walk(chain: tuple[Any, ...], path: tuple[str, ...]) -> Iterator[tuple[Any, ...]]:
    """Each chain of items reached by walking path's list fields (a null list is empty)."""
    if not path:
        yield chain
        return
    for item in getattr(chain[-1], path[0]) or ():
        yield from _walk((*chain, item), path[1:])


def _lookup(chain: tuple[Any, ...], name: str) -> Any:
    """The innermost item's field name, else the one of the item it is in, and so on."""
    if not name:
        return chain[-1]
    for item in reversed(chain):
        if name in getattr(type(item), "__struct_fields__", ()):
            return getattr(item, name)
    raise KeyError(f"no item on the way has a field {name!r}")


def _stamp(message: Message, code: int) -> None:
    fields = type(message).__struct_fields__
    if "partition_error_code" in fields:  # AddPartitionsToTxn's name for it
        message.partition_error_code = code  # type: ignore[attr-defined]
    if "error_code" in fields:
        message.error_code = code  # type: ignore[attr-defined]
        if "error_message" in fields:
            message.error_message = INJECTED_MESSAGE  # type: ignore[attr-defined]
