"""The admin client's transaction calls, as Java's Admin names them: `list_transactions` and
`describe_transactions` (KIP-664).

ListTransactions goes to every broker (each lists the transactional ids it coordinates) and the
answers are merged; DescribeTransactions goes to each id's coordinator (FindCoordinator, key type
1), looked up again when it moved or is loading, as the group calls do (admin_groups.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.describe_transactions import DescribeTransactionsRequest
from epochlog.protocol.apis.list_transactions import ListTransactionsRequest
from epochlog.protocol.error_codes import ErrorCode

from .admin_groups import TRANSACTION, GroupAdmin, check
from .errors import error_for
from .types import TopicPartition


@dataclass(frozen=True)
class TransactionListing:
    transactional_id: str
    producer_id: int
    state: str  # Kafka's names: "Empty", "Ongoing", "PrepareCommit", "CompleteAbort", ...
    coordinator: int


@dataclass(frozen=True)
class TransactionDescription:
    transactional_id: str
    coordinator: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int  # -1: no transaction open
    partitions: tuple[TopicPartition, ...]


class TxnAdmin:
    def __init__(self, calls: GroupAdmin) -> None:
        self.calls = calls  # coordinator lookups, retries and requests, shared with groups

    async def list_transactions(self, states: Iterable[str] = (),
                                producer_ids: Iterable[int] = (),
                                open_longer_than_ms: int = -1) -> list[TransactionListing]:
        cluster = self.calls.cluster
        await self.calls.with_retries("list brokers", lambda: cluster.refresh([]))
        request = ListTransactionsRequest(state_filters=list(states),
                                          producer_id_filters=list(producer_ids),
                                          duration_filter=open_longer_than_ms)
        found: dict[str, TransactionListing] = {}
        for node in sorted(cluster.brokers):
            async def ask(node: int = node) -> Any:
                return await self.calls.at(node, ApiKey.LIST_TRANSACTIONS, request)
            answer = await self.calls.with_retries(f"list transactions at broker {node}", ask)
            code = answer.error_code
            if code and code != ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
                raise error_for(code, f"list transactions at broker {node}")
            if answer.unknown_state_filters:
                raise ValueError(f"unknown transaction states {answer.unknown_state_filters}: "
                                 "Kafka's names are Empty, Ongoing, PrepareCommit, "
                                 "PrepareAbort, CompleteCommit, CompleteAbort")
            for t in answer.transaction_states:
                found[t.transactional_id] = TransactionListing(
                    t.transactional_id, t.producer_id, t.transaction_state, node)
        return sorted(found.values(), key=lambda t: t.transactional_id)

    async def describe_transactions(self, transactional_ids: Sequence[str]
                                    ) -> dict[str, TransactionDescription]:
        out: dict[str, TransactionDescription] = {}
        for transactional_id in transactional_ids:
            async def describe(node: int, tid: str = transactional_id
                               ) -> TransactionDescription:
                answer = await self.calls.at(node, ApiKey.DESCRIBE_TRANSACTIONS,
                                             DescribeTransactionsRequest(transactional_ids=[tid]))
                t = answer.transaction_states[0]
                check(t.error_code, f"describe transactional id {tid}")
                return TransactionDescription(
                    tid, node, t.transaction_state, t.producer_id, t.producer_epoch,
                    t.transaction_timeout_ms, t.transaction_start_time_ms,
                    tuple(TopicPartition(d.topic, p) for d in t.topics for p in d.partitions))
            out[transactional_id] = await self.calls.on_coordinator(
                transactional_id, f"describe transactional id {transactional_id}", describe,
                TRANSACTION)
        return out
