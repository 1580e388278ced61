"""Kafka's error codes as one table of data: number, name, retriability and a short message.

Every int16 `error_code` field on the wire is one of these numbers. Names are Kafka's own
(the constants of Kafka's `Errors` enum, as printed in the protocol guide's error table);
`retriable` follows Kafka's Java client, where an error is retriable when its exception
class derives from `RetriableException`. The messages are ours.

The table `_TABLE` holds one tuple per code; `ALL` turns it into `ErrorInfo` records, in code
order, for callers that iterate it (the client builds its exception classes from it). A number
not in the table still gets an `ErrorInfo` from `info()`, named `UNKNOWN_ERROR_<n>`, so a
newer broker's codes never make us raise while decoding or reporting.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType
from typing import Final

__all__ = ["ALL", "ErrorCode", "ErrorInfo", "info", "is_retriable", "name_of"]


class ErrorCode(IntEnum):
    """Kafka's error codes, one member per code: the member's name is Kafka's name."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    BROKER_NOT_AVAILABLE = 8
    REPLICA_NOT_AVAILABLE = 9
    MESSAGE_TOO_LARGE = 10
    STALE_CONTROLLER_EPOCH = 11
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    INVALID_TIMESTAMP = 32
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_REPLICA_ASSIGNMENT = 39
    INVALID_CONFIG = 40
    NOT_CONTROLLER = 41
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    POLICY_VIOLATION = 44
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    INVALID_TXN_STATE = 48
    INVALID_PRODUCER_ID_MAPPING = 49
    INVALID_TRANSACTION_TIMEOUT = 50
    CONCURRENT_TRANSACTIONS = 51
    TRANSACTION_COORDINATOR_FENCED = 52
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    SECURITY_DISABLED = 54
    OPERATION_NOT_ATTEMPTED = 55
    KAFKA_STORAGE_ERROR = 56
    LOG_DIR_NOT_FOUND = 57
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    REASSIGNMENT_IN_PROGRESS = 60
    DELEGATION_TOKEN_AUTH_DISABLED = 61
    DELEGATION_TOKEN_NOT_FOUND = 62
    DELEGATION_TOKEN_OWNER_MISMATCH = 63
    DELEGATION_TOKEN_REQUEST_NOT_ALLOWED = 64
    DELEGATION_TOKEN_AUTHORIZATION_FAILED = 65
    DELEGATION_TOKEN_EXPIRED = 66
    INVALID_PRINCIPAL_TYPE = 67
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FETCH_SESSION_ID_NOT_FOUND = 70
    INVALID_FETCH_SESSION_EPOCH = 71
    LISTENER_NOT_FOUND = 72
    TOPIC_DELETION_DISABLED = 73
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    STALE_BROKER_EPOCH = 77
    OFFSET_NOT_AVAILABLE = 78
    MEMBER_ID_REQUIRED = 79
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    ELIGIBLE_LEADERS_NOT_AVAILABLE = 83
    ELECTION_NOT_NEEDED = 84
    NO_REASSIGNMENT_IN_PROGRESS = 85
    GROUP_SUBSCRIBED_TO_TOPIC = 86
    INVALID_RECORD = 87
    UNSTABLE_OFFSET_COMMIT = 88
    THROTTLING_QUOTA_EXCEEDED = 89
    PRODUCER_FENCED = 90
    RESOURCE_NOT_FOUND = 91
    DUPLICATE_RESOURCE = 92
    UNACCEPTABLE_CREDENTIAL = 93
    INCONSISTENT_VOTER_SET = 94
    INVALID_UPDATE_VERSION = 95
    FEATURE_UPDATE_FAILED = 96
    PRINCIPAL_DESERIALIZATION_FAILURE = 97
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    UNKNOWN_TOPIC_ID = 100
    DUPLICATE_BROKER_REGISTRATION = 101
    BROKER_ID_NOT_REGISTERED = 102
    INCONSISTENT_TOPIC_ID = 103
    INCONSISTENT_CLUSTER_ID = 104
    TRANSACTIONAL_ID_NOT_FOUND = 105
    FETCH_SESSION_TOPIC_ID_ERROR = 106
    INELIGIBLE_REPLICA = 107
    NEW_LEADER_ELECTED = 108
    OFFSET_MOVED_TO_TIERED_STORAGE = 109
    FENCED_MEMBER_EPOCH = 110
    UNRELEASED_INSTANCE_ID = 111
    UNSUPPORTED_ASSIGNOR = 112
    STALE_MEMBER_EPOCH = 113
    MISMATCHED_ENDPOINT_TYPE = 114
    UNSUPPORTED_ENDPOINT_TYPE = 115
    UNKNOWN_CONTROLLER_ID = 116
    UNKNOWN_SUBSCRIPTION_ID = 117
    TELEMETRY_TOO_LARGE = 118
    INVALID_REGISTRATION = 119
    TRANSACTION_ABORTABLE = 120
    INVALID_RECORD_STATE = 121
    SHARE_SESSION_NOT_FOUND = 122
    INVALID_SHARE_SESSION_EPOCH = 123
    FENCED_STATE_EPOCH = 124
    INVALID_VOTER_KEY = 125
    DUPLICATE_VOTER = 126
    VOTER_NOT_FOUND = 127


@dataclass(frozen=True)
class ErrorInfo:
    """One error code: its number, Kafka's name for it, whether a retry may succeed, a message."""

    code: int
    name: str
    retriable: bool
    message: str


_E = ErrorCode

# One tuple per code: (code, retriable, message). The name is the ErrorCode member's name.
# `retriable` is Kafka's Java classification (the exception class extends RetriableException,
# directly or through InvalidMetadataException), as in the protocol guide's error table.
# fmt: off
_TABLE: Final[tuple[tuple[ErrorCode, bool, str], ...]] = (
    (_E.UNKNOWN_SERVER_ERROR, False, "The broker hit an unexpected error while handling the request."),
    (_E.NONE, False, "No error."),
    (_E.OFFSET_OUT_OF_RANGE, False, "The offset asked for lies outside the partition's log."),
    # Java's CorruptRecordException is a RetriableException: a batch damaged in transit may
    # arrive intact when sent again.
    (_E.CORRUPT_MESSAGE, True, "A record batch failed its checksum, its size check or another validity check."),
    (_E.UNKNOWN_TOPIC_OR_PARTITION, True, "This broker does not hold the topic or partition named."),
    (_E.INVALID_FETCH_SIZE, False, "The fetch size requested is not valid."),
    (_E.LEADER_NOT_AVAILABLE, True, "The partition has no leader at the moment; an election is under way."),
    (_E.NOT_LEADER_OR_FOLLOWER, True, "This broker is not the partition's leader (or not a replica of it)."),
    (_E.REQUEST_TIMED_OUT, True, "The request did not complete in time."),
    (_E.BROKER_NOT_AVAILABLE, False, "The broker is not available."),
    (_E.REPLICA_NOT_AVAILABLE, True, "The replica asked for is not available for this partition."),
    (_E.MESSAGE_TOO_LARGE, False, "A record is larger than the broker's largest accepted message."),
    (_E.STALE_CONTROLLER_EPOCH, False, "The request came from a controller that has been replaced."),
    (_E.OFFSET_METADATA_TOO_LARGE, False, "The metadata string committed with an offset is too long."),
    (_E.NETWORK_EXCEPTION, True, "The connection closed before a response arrived."),
    (_E.COORDINATOR_LOAD_IN_PROGRESS, True, "The coordinator is still loading its state and cannot serve yet."),
    (_E.COORDINATOR_NOT_AVAILABLE, True, "The coordinator is not available."),
    (_E.NOT_COORDINATOR, True, "This broker is not the coordinator for that group or transaction."),
    (_E.INVALID_TOPIC_EXCEPTION, False, "The topic named is not valid for this operation."),
    (_E.RECORD_LIST_TOO_LARGE, False, "A record batch is larger than the log segment size."),
    (_E.NOT_ENOUGH_REPLICAS, True, "Too few in-sync replicas to accept the write; nothing was appended."),
    (_E.NOT_ENOUGH_REPLICAS_AFTER_APPEND, True, "The write was appended but fewer replicas than required have it."),
    (_E.INVALID_REQUIRED_ACKS, False, "The produce request's acks value is not valid."),
    (_E.ILLEGAL_GENERATION, False, "The group generation given is not the current one."),
    (_E.INCONSISTENT_GROUP_PROTOCOL, False, "The member's protocols do not match those of the group."),
    (_E.INVALID_GROUP_ID, False, "The group id is not valid."),
    (_E.UNKNOWN_MEMBER_ID, False, "The coordinator does not know this member id."),
    (_E.INVALID_SESSION_TIMEOUT, False, "The session timeout is outside the range the broker allows."),
    (_E.REBALANCE_IN_PROGRESS, False, "The group is rebalancing; the member must rejoin."),
    (_E.INVALID_COMMIT_OFFSET_SIZE, False, "The offset commit's data size is not valid."),
    (_E.TOPIC_AUTHORIZATION_FAILED, False, "Not authorized to access the topic."),
    (_E.GROUP_AUTHORIZATION_FAILED, False, "Not authorized to access the group."),
    (_E.CLUSTER_AUTHORIZATION_FAILED, False, "Not authorized for this cluster operation."),
    (_E.INVALID_TIMESTAMP, False, "A record's timestamp is outside the accepted range."),
    (_E.UNSUPPORTED_SASL_MECHANISM, False, "The broker does not offer the SASL mechanism asked for."),
    (_E.ILLEGAL_SASL_STATE, False, "The request is not allowed at this point of the SASL exchange."),
    (_E.UNSUPPORTED_VERSION, False, "The broker does not support this version of the API."),
    (_E.TOPIC_ALREADY_EXISTS, False, "A topic with this name already exists."),
    (_E.INVALID_PARTITIONS, False, "The partition count is not valid."),
    (_E.INVALID_REPLICATION_FACTOR, False, "The replication factor is below one or above the number of brokers."),
    (_E.INVALID_REPLICA_ASSIGNMENT, False, "The replica assignment is not valid."),
    (_E.INVALID_CONFIG, False, "The configuration is not valid."),
    (_E.NOT_CONTROLLER, True, "This broker is not the active controller."),
    (_E.INVALID_REQUEST, False, "The request is malformed or not valid for this broker; see the broker log."),
    (_E.UNSUPPORTED_FOR_MESSAGE_FORMAT, False, "The topic's message format does not support this request."),
    (_E.POLICY_VIOLATION, False, "The request breaks a policy configured on the broker."),
    (_E.OUT_OF_ORDER_SEQUENCE_NUMBER, False, "The producer's sequence number is not the one the broker expected next."),
    (_E.DUPLICATE_SEQUENCE_NUMBER, False, "The producer's sequence number was already written."),
    (_E.INVALID_PRODUCER_EPOCH, False, "The producer epoch is older than the current one."),
    (_E.INVALID_TXN_STATE, False, "The transactional operation is not allowed in the transaction's state."),
    (_E.INVALID_PRODUCER_ID_MAPPING, False, "The producer id is not the one assigned to this transactional id."),
    (_E.INVALID_TRANSACTION_TIMEOUT, False, "The transaction timeout exceeds the broker's maximum."),
    (_E.CONCURRENT_TRANSACTIONS, True, "Another operation on the same transaction is still in progress."),
    (_E.TRANSACTION_COORDINATOR_FENCED, False, "The transaction coordinator sending markers has been replaced."),
    (_E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, False, "Not authorized to use the transactional id."),
    (_E.SECURITY_DISABLED, False, "Security features are turned off on this broker."),
    (_E.OPERATION_NOT_ATTEMPTED, False, "The broker skipped this operation because another in the batch failed."),
    (_E.KAFKA_STORAGE_ERROR, True, "The broker could not read or write the log on disk."),
    (_E.LOG_DIR_NOT_FOUND, False, "The log directory named is not in the broker's configuration."),
    (_E.SASL_AUTHENTICATION_FAILED, False, "SASL authentication failed."),
    (_E.UNKNOWN_PRODUCER_ID, False, "The broker holds no state for this producer id."),
    (_E.REASSIGNMENT_IN_PROGRESS, False, "A partition reassignment is already in progress."),
    (_E.DELEGATION_TOKEN_AUTH_DISABLED, False, "Delegation tokens are turned off on this broker."),
    (_E.DELEGATION_TOKEN_NOT_FOUND, False, "The broker has no such delegation token."),
    (_E.DELEGATION_TOKEN_OWNER_MISMATCH, False, "The principal is not the token's owner or a renewer of it."),
    (_E.DELEGATION_TOKEN_REQUEST_NOT_ALLOWED, False, "Delegation token requests are not allowed on this connection."),
    (_E.DELEGATION_TOKEN_AUTHORIZATION_FAILED, False, "Not authorized for this delegation token operation."),
    (_E.DELEGATION_TOKEN_EXPIRED, False, "The delegation token has expired."),
    (_E.INVALID_PRINCIPAL_TYPE, False, "The principal type is not supported."),
    (_E.NON_EMPTY_GROUP, False, "The group still has members."),
    (_E.GROUP_ID_NOT_FOUND, False, "No group has this id."),
    (_E.FETCH_SESSION_ID_NOT_FOUND, True, "The broker has no fetch session with this id."),
    (_E.INVALID_FETCH_SESSION_EPOCH, True, "The fetch session epoch is not the one the broker expected."),
    (_E.LISTENER_NOT_FOUND, True, "The partition leader has no listener matching the one this request came in on."),
    (_E.TOPIC_DELETION_DISABLED, False, "Deleting topics is turned off on this cluster."),
    (_E.FENCED_LEADER_EPOCH, True, "The request's leader epoch is older than the broker's."),
    (_E.UNKNOWN_LEADER_EPOCH, True, "The request's leader epoch is newer than the broker's."),
    (_E.UNSUPPORTED_COMPRESSION_TYPE, False, "The client does not support the partition's compression type."),
    (_E.STALE_BROKER_EPOCH, False, "The broker epoch in the request is no longer current."),
    (_E.OFFSET_NOT_AVAILABLE, True, "The new leader's high watermark has not caught up yet, so offsets are not final."),
    (_E.MEMBER_ID_REQUIRED, False, "The member must join again with the member id the coordinator gave it."),
    (_E.PREFERRED_LEADER_NOT_AVAILABLE, True, "The preferred leader is not available."),
    (_E.GROUP_MAX_SIZE_REACHED, False, "The group already has its maximum number of members."),
    (_E.FENCED_INSTANCE_ID, False, "Another member with this group instance id has taken its place."),
    (_E.ELIGIBLE_LEADERS_NOT_AVAILABLE, True, "No eligible leader is available for the partition."),
    (_E.ELECTION_NOT_NEEDED, True, "The partition needs no leader election."),
    (_E.NO_REASSIGNMENT_IN_PROGRESS, False, "No partition reassignment is in progress."),
    (_E.GROUP_SUBSCRIBED_TO_TOPIC, False, "Cannot delete a topic's offsets while the group is subscribed to it."),
    (_E.INVALID_RECORD, False, "The broker rejected a record that failed its validation."),
    (_E.UNSTABLE_OFFSET_COMMIT, True, "Pending transactional offsets must settle before this read."),
    (_E.THROTTLING_QUOTA_EXCEEDED, True, "The request would exceed a throttling quota."),
    (_E.PRODUCER_FENCED, False, "A newer producer with the same transactional id has fenced this one."),
    (_E.RESOURCE_NOT_FOUND, False, "The request names a resource that does not exist."),
    (_E.DUPLICATE_RESOURCE, False, "The request names the same resource more than once."),
    (_E.UNACCEPTABLE_CREDENTIAL, False, "The credential does not meet the broker's requirements."),
    (_E.INCONSISTENT_VOTER_SET, False, "The sender or receiver of a voter request is not one of the expected voters."),
    (_E.INVALID_UPDATE_VERSION, False, "The update version given is not valid."),
    (_E.FEATURE_UPDATE_FAILED, False, "The finalized features could not be updated."),
    (_E.PRINCIPAL_DESERIALIZATION_FAILURE, False, "A forwarded request's principal could not be deserialized."),
    (_E.SNAPSHOT_NOT_FOUND, False, "The snapshot asked for does not exist."),
    (_E.POSITION_OUT_OF_RANGE, False, "The position asked for lies outside the snapshot."),
    (_E.UNKNOWN_TOPIC_ID, True, "This broker does not hold a topic with this id."),
    (_E.DUPLICATE_BROKER_REGISTRATION, False, "Another broker has registered with this broker id."),
    (_E.BROKER_ID_NOT_REGISTERED, False, "No broker has registered with this broker id."),
    (_E.INCONSISTENT_TOPIC_ID, True, "The topic id in the request does not match the log's topic id."),
    (_E.INCONSISTENT_CLUSTER_ID, False, "The cluster id in the request does not match the server's."),
    (_E.TRANSACTIONAL_ID_NOT_FOUND, False, "No transaction has this transactional id."),
    (_E.FETCH_SESSION_TOPIC_ID_ERROR, True, "The fetch session used topic ids inconsistently."),
    (_E.INELIGIBLE_REPLICA, False, "The proposed in-sync replica set includes a replica that may not be in it."),
    (_E.NEW_LEADER_ELECTED, False, "The partition state was updated, but a new leader has since been elected."),
    (_E.OFFSET_MOVED_TO_TIERED_STORAGE, False, "The offset asked for is now held in tiered storage."),
    (_E.FENCED_MEMBER_EPOCH, False, "The member's epoch is fenced; it must give up its partitions and rejoin."),
    (_E.UNRELEASED_INSTANCE_ID, False, "Another member still holds this instance id and must leave first."),
    (_E.UNSUPPORTED_ASSIGNOR, False, "The group does not support the assignor or its version range."),
    (_E.STALE_MEMBER_EPOCH, False, "The member's epoch is out of date; it must take the current one from a heartbeat."),
    (_E.MISMATCHED_ENDPOINT_TYPE, False, "The request reached an endpoint of the wrong type."),
    (_E.UNSUPPORTED_ENDPOINT_TYPE, False, "This endpoint type is not supported."),
    (_E.UNKNOWN_CONTROLLER_ID, False, "No controller has this id."),
    (_E.UNKNOWN_SUBSCRIPTION_ID, False, "The telemetry subscription id is unknown or out of date."),
    (_E.TELEMETRY_TOO_LARGE, False, "The pushed telemetry is larger than the broker accepts."),
    (_E.INVALID_REGISTRATION, False, "The controller found the broker's registration not valid."),
    (_E.TRANSACTION_ABORTABLE, False, "The transaction hit an error; abort it to keep using the transactional id."),
    (_E.INVALID_RECORD_STATE, False, "The record's state does not allow the acknowledgement to complete."),
    (_E.SHARE_SESSION_NOT_FOUND, True, "The broker has no share session with this id."),
    (_E.INVALID_SHARE_SESSION_EPOCH, True, "The share session epoch is not the one the broker expected."),
    (_E.FENCED_STATE_EPOCH, False, "The share-group state epoch does not match the share coordinator's."),
    (_E.INVALID_VOTER_KEY, False, "The voter key does not match the receiving replica's key."),
    (_E.DUPLICATE_VOTER, False, "The voter is already in the voter set."),
    (_E.VOTER_NOT_FOUND, False, "The voter is not in the voter set."),
)
# fmt: on

ALL: Final[tuple[ErrorInfo, ...]] = tuple(
    ErrorInfo(code=int(member), name=member.name, retriable=retriable, message=message)
    for member, retriable, message in sorted(_TABLE, key=lambda row: row[0])
)

_BY_CODE: Final[Mapping[int, ErrorInfo]] = MappingProxyType({e.code: e for e in ALL})


def info(code: int) -> ErrorInfo:
    """The table's entry for `code`; for a number not in it, a non-retriable `UNKNOWN_ERROR_<n>`."""
    found = _BY_CODE.get(code)
    if found is not None:
        return found
    return ErrorInfo(
        code=int(code),
        name=f"UNKNOWN_ERROR_{int(code)}",
        retriable=False,
        message=f"Error code {int(code)} is not one this library knows.",
    )


def is_retriable(code: int) -> bool:
    """Whether Kafka's Java client would retry a request that failed with `code`."""
    return info(code).retriable


def name_of(code: int) -> str:
    """Kafka's name for `code` (`UNKNOWN_ERROR_<n>` for a number not in the table)."""
    return info(code).name
