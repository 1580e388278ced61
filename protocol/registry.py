"""Every API epochlog speaks, by key. ApiVersions answers are built from this table."""

from __future__ import annotations

from .api import Api
from .apis import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_configs,
    alter_partition,
    api_versions,
    broker_heartbeat,
    broker_registration,
    controlled_shutdown,
    create_partitions,
    create_topics,
    delete_groups,
    delete_records,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_topic_partitions,
    describe_transactions,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leader_and_isr,
    leave_group,
    list_groups,
    list_offsets,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    stop_replica,
    sync_group,
    txn_offset_commit,
    update_metadata,
    write_txn_markers,
)
from .errors import UnsupportedVersion

_MODULES = (produce, fetch, list_offsets, metadata, leader_and_isr, stop_replica, update_metadata,
            controlled_shutdown, offset_commit, offset_fetch, find_coordinator, join_group,
            heartbeat, leave_group, sync_group, describe_groups, list_groups, api_versions,
            create_topics, delete_topics, init_producer_id, offset_for_leader_epoch,
            add_partitions_to_txn, add_offsets_to_txn, end_txn, write_txn_markers,
            txn_offset_commit, describe_configs, create_partitions, elect_leaders, alter_partition,
            describe_cluster, broker_registration, broker_heartbeat, describe_transactions,
            list_transactions, delete_groups, offset_delete,
            delete_records, describe_log_dirs, describe_producers, alter_configs,
            incremental_alter_configs, describe_topic_partitions)

APIS: dict[int, Api] = {m.API.key: m.API for m in _MODULES}  # by key: index with ApiKey
assert len(APIS) == len(_MODULES), "two API modules declare the same key"
BY_NAME: dict[str, Api] = {api.name: api for api in APIS.values()}


def api_for(key: int) -> Api:
    api = APIS.get(key)
    if api is None:
        raise UnsupportedVersion(key, -1, f"unknown API key {key}")
    return api
