"""The admin client's consumer-group calls: list, describe and delete groups, and list, alter
and delete their committed offsets. `Admin` exposes them under Kafka's names
(`list_consumer_groups`, `describe_consumer_groups`, `delete_consumer_groups`,
`list_consumer_group_offsets`, `alter_consumer_group_offsets`,
`delete_consumer_group_offsets`, as confluent-kafka's AdminClient and Java's Admin name them).

Theory of operation. ListGroups goes to every broker (each lists the groups it coordinates)
and the answers are merged. Everything else goes to the group's coordinator, found with
FindCoordinator; NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE and COORDINATOR_LOAD_IN_PROGRESS (the
coordinator moved or is loading) and a broken connection look it up again, at most
ATTEMPTS_MAX times with a growing backoff, then raise what the last attempt got. Offsets are
read and written with their leader epochs (KIP-320): a reset writes the epoch of the record
before the new position where the caller knows it, -1 otherwise (the consumer then validates
nothing for that offset, as with any commit without an epoch).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.delete_groups import DeleteGroupsRequest
from epochlog.protocol.apis.describe_groups import DescribeGroupsRequest
from epochlog.protocol.apis.list_groups import ListGroupsRequest
from epochlog.protocol.apis.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
)
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.schema import Message

from .cluster import ClusterClient
from .consumer_protocol import decode_assignment
from .errors import KafkaConnectionError, KafkaError, error_for
from .group_offsets import commit_errors, commit_request, committed_offsets, fetch_request
from .types import TopicPartition

E = ErrorCode
ATTEMPTS_MAX = 5
GROUP, TRANSACTION = 0, 1  # FindCoordinator key types
T = TypeVar("T")
_MOVED = frozenset({E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE,
                    E.COORDINATOR_LOAD_IN_PROGRESS})


@dataclass(frozen=True)
class GroupListing:
    group_id: str
    protocol_type: str
    state: str  # Kafka's names: "Stable", "Empty", "PreparingRebalance", ... ("" if not told)
    coordinator: int


@dataclass(frozen=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[TopicPartition]  # empty unless the group is Stable (Kafka tells only then)


@dataclass(frozen=True)
class GroupDescription:
    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: list[MemberDescription]
    coordinator: int


class _Moved(Exception):
    """The coordinator answered that the group is elsewhere, or is loading: look again."""

    def __init__(self, error: KafkaError) -> None:
        super().__init__(str(error))
        self.error = error


class GroupAdmin:
    def __init__(self, cluster: ClusterClient, backoff_s: float) -> None:
        self.cluster = cluster
        self.backoff_s = backoff_s

    # ------------------------------------------------------------------------------ groups
    async def list_groups(self) -> list[GroupListing]:
        await self.with_retries("list brokers", lambda: self.cluster.refresh([]))
        found: dict[str, GroupListing] = {}
        for node in sorted(self.cluster.brokers):
            answer = await self.with_retries(f"list groups at broker {node}",
                                              self._list_at(node))
            if answer.error_code and answer.error_code != E.COORDINATOR_LOAD_IN_PROGRESS:
                raise error_for(answer.error_code, f"list groups at broker {node}")
            for g in answer.groups:
                found[g.group_id] = GroupListing(g.group_id, g.protocol_type, g.group_state, node)
        return sorted(found.values(), key=lambda g: g.group_id)

    def _list_at(self, node: int) -> Callable[[], Awaitable[Any]]:
        async def ask() -> Any:
            return await self.at(node, ApiKey.LIST_GROUPS, ListGroupsRequest())
        return ask

    async def describe_groups(self, group_ids: Sequence[str]) -> dict[str, GroupDescription]:
        out: dict[str, GroupDescription] = {}
        for group_id in group_ids:
            out[group_id] = await self.on_coordinator(
                group_id, f"describe group {group_id}", self._describe_at(group_id))
        return out

    def _describe_at(self, group_id: str) -> Callable[[int], Awaitable[GroupDescription]]:
        async def describe(node: int) -> GroupDescription:
            answer = await self.at(node, ApiKey.DESCRIBE_GROUPS,
                                    DescribeGroupsRequest(groups=[group_id]))
            return self._described(answer.groups[0], node)
        return describe

    def _described(self, g: Any, node: int) -> GroupDescription:
        group_id = g.group_id
        check(g.error_code, f"describe group {group_id}")
        members = []
        for m in g.members:
            try:
                assigned = decode_assignment(bytes(m.member_assignment)).partitions \
                    if m.member_assignment and g.protocol_type == "consumer" else []
            except ValueError:
                assigned = []  # a member of another client's protocol: shown without it
            members.append(MemberDescription(m.member_id, m.group_instance_id, m.client_id,
                                             m.client_host, sorted(assigned)))
        return GroupDescription(group_id, g.group_state, g.protocol_type, g.protocol_data,
                                members, node)

    async def delete_groups(self, group_ids: Sequence[str]) -> dict[str, KafkaError | None]:
        out: dict[str, KafkaError | None] = {}
        for group_id in dict.fromkeys(group_ids):
            async def delete(node: int, g: str = group_id) -> KafkaError | None:
                answer = await self.at(node, ApiKey.DELETE_GROUPS,
                                        DeleteGroupsRequest(groups_names=[g]))
                code = answer.results[0].error_code
                check(code, f"delete group {g}", raise_other=False)
                return error_for(code, f"delete group {g}") if code else None
            out[group_id] = await self.on_coordinator(group_id, f"delete group {group_id}",
                                                       delete)
        return out

    # ----------------------------------------------------------------------------- offsets
    async def list_offsets(self, group_id: str, partitions: Iterable[TopicPartition] | None
                           ) -> dict[TopicPartition, tuple[int, int]]:
        """(offset, leader epoch) per partition with a committed offset (all of the group's
        when partitions is None)."""
        wanted = None if partitions is None else sorted(set(partitions))

        async def fetch(node: int) -> dict[TopicPartition, tuple[int, int]]:
            request = fetch_request(group_id, wanted or [])
            if wanted is None:
                request.topics = None
            answer = await self.at(node, ApiKey.OFFSET_FETCH, request)
            check(answer.error_code, f"list offsets of group {group_id}")
            for t in answer.topics:
                for p in t.partitions:
                    check(p.error_code, f"list offsets of group {group_id} for "
                                         f"{t.name}-{p.partition_index}")
            every = wanted if wanted is not None else [
                TopicPartition(t.name, p.partition_index) for t in answer.topics
                for p in t.partitions]
            return {tp: c for tp, c in committed_offsets(answer, every).items() if c is not None}

        return await self.on_coordinator(group_id, f"list offsets of group {group_id}", fetch)

    async def alter_offsets(self, group_id: str,
                            offsets: Mapping[TopicPartition, int | tuple[int, int]]) -> None:
        """Commit offsets for a group that has no live members (Kafka's alterConsumerGroupOffsets:
        a group with members answers UNKNOWN_MEMBER_ID; the caller says so)."""
        pairs = {tp: (o, -1) if isinstance(o, int) else o for tp, o in offsets.items()}
        for tp, (offset, _) in pairs.items():
            if offset < 0:
                raise ValueError(f"offset for {tp.topic}-{tp.partition} must be >= 0, not "
                                 f"{offset}")

        async def commit(node: int) -> None:
            answer = await self.at(node, ApiKey.OFFSET_COMMIT,
                                    commit_request(group_id, -1, "", None, pairs))
            for code in sorted(commit_errors(answer)):
                check(code, f"alter offsets of group {group_id}")

        await self.on_coordinator(group_id, f"alter offsets of group {group_id}", commit)

    async def delete_offsets(self, group_id: str, partitions: Iterable[TopicPartition]
                             ) -> dict[TopicPartition, KafkaError | None]:
        by_topic: dict[str, list[int]] = {}
        for tp in sorted(set(partitions)):
            by_topic.setdefault(tp.topic, []).append(tp.partition)
        request = OffsetDeleteRequest(group_id=group_id, topics=[
            OffsetDeleteRequestTopic(name=t, partitions=[
                OffsetDeleteRequestPartition(partition_index=p) for p in ps])
            for t, ps in by_topic.items()])

        async def delete(node: int) -> dict[TopicPartition, KafkaError | None]:
            answer = await self.at(node, ApiKey.OFFSET_DELETE, request)
            check(answer.error_code, f"delete offsets of group {group_id}")
            return {TopicPartition(t.name, p.partition_index):
                    error_for(p.error_code, f"delete the offset of group {group_id} for "
                                            f"{t.name}-{p.partition_index}")
                    if p.error_code else None
                    for t in answer.topics for p in t.partitions}

        return await self.on_coordinator(group_id, f"delete offsets of group {group_id}",
                                          delete)

    # ----------------------------------------------------------------------------- helpers
    async def at(self, node: int, key: int, request: Message) -> Any:
        return await self.cluster.request_broker(node, key, request)

    async def coordinator(self, key: str, key_type: int = GROUP) -> int:
        """The broker coordinating a group (key_type 0) or a transactional id (1)."""
        code, node = await self.cluster.find_coordinator(key, key_type)
        what = "group" if key_type == GROUP else "transactional id"
        check(code, f"find the coordinator of {what} {key}")
        return node

    async def on_coordinator(self, key: str, what: str, call: Callable[[int], Awaitable[T]],
                             key_type: int = GROUP) -> T:
        async def once() -> T:
            return await call(await self.coordinator(key, key_type))
        return await self.with_retries(what, once)

    async def with_retries(self, what: str, call: Callable[[], Awaitable[T]]) -> T:
        last: KafkaError | None = None
        for attempt in range(ATTEMPTS_MAX):
            try:
                return await call()
            except _Moved as moved:
                last = moved.error
            except (ConnectionError, OSError, TimeoutError) as exc:
                last = KafkaConnectionError(f"{what}: {exc}")
            if attempt < ATTEMPTS_MAX - 1:
                await asyncio.sleep(self.backoff_s * (attempt + 1))
        assert last is not None
        raise type(last)(f"{last} (gave up after {ATTEMPTS_MAX} attempts)")


def check(code: int, what: str, *, raise_other: bool = True) -> None:
    """Raise _Moved for a coordinator that moved or is loading, the error for any other code
    (unless raise_other is False: the caller reports it as a per-item result)."""
    if not code:
        return
    if code in _MOVED:
        raise _Moved(error_for(code, what))
    if raise_other:
        raise error_for(code, what)
