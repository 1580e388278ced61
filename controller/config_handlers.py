"""AlterConfigs (33) and IncrementalAlterConfigs (44) at the controller: topic settings.

AlterConfigs replaces a topic's own settings with the ones given; IncrementalAlterConfigs
changes only those named: SET, DELETE (back to the default), APPEND and SUBTRACT (list settings
only, e.g. cleanup.policy). Both validate everything before changing anything, honour
validate_only, and refuse min.insync.replicas above the replication factor. The change is one
TopicConfigsChanged record in the metadata log; the answer goes once it is durable (the
service's commit), and the topic's new settings go to the brokers in UpdateMetadata at the same
commit (outbox.py).

The default BROKER resource (an empty name) takes dynamic cluster-wide defaults of topic
settings under Kafka's broker names (log.retention.ms, log.segment.bytes, compression.type,
message.max.bytes, min.insync.replicas, ...): a TopicCreated-like ClusterDefaultsChanged record;
every topic without its own value follows (DYNAMIC_DEFAULT_BROKER_CONFIG). A single broker's
resource ("1") is refused with INVALID_REQUEST: topic settings are decided per topic for all its
replicas, so epochlog takes these defaults cluster-wide only; other broker settings are fixed
when the broker starts (INVALID_CONFIG naming the setting).
"""

from __future__ import annotations

from typing import Any

from epochlog.protocol.apis.alter_configs import (
    AlterConfigsRequest,
    AlterConfigsResourceResponse,
    AlterConfigsResponse,
)
from epochlog.protocol.apis.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from epochlog.protocol.error_codes import ErrorCode

from . import topic_settings
from .state import ControllerState

E = ErrorCode
RESOURCE_TOPIC, RESOURCE_BROKER = 2, 4
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3
STATIC_BROKERS = ("other broker settings are fixed when the broker starts (--set or its "
                  "settings file)")


def alter_configs(state: ControllerState, req: AlterConfigsRequest, version: int,
                  now_ms: int) -> AlterConfigsResponse:
    responses = []
    for res in req.resources:
        given = {c.name: c.value for c in res.configs}
        error, message = _refused_resource(state, res.resource_type, res.resource_name)
        if not error and res.resource_type == RESOURCE_BROKER:
            defaults, message = _as_topic_names(given)
            error, message = (E.INVALID_CONFIG, message) if message is not None else \
                state.alter_cluster_defaults(defaults, req.validate_only)
        elif not error:
            error, message = state.alter_topic_configs(res.resource_name, given,
                                                       req.validate_only)
        responses.append(AlterConfigsResourceResponse(
            error_code=error, error_message=message, resource_type=res.resource_type,
            resource_name=res.resource_name))
    return AlterConfigsResponse(responses=responses)


def incremental_alter_configs(state: ControllerState, req: IncrementalAlterConfigsRequest,
                              version: int, now_ms: int) -> IncrementalAlterConfigsResponse:
    responses = []
    for res in req.resources:
        error, message = _refused_resource(state, res.resource_type, res.resource_name)
        if not error:
            broker = res.resource_type == RESOURCE_BROKER
            current = state.dynamic_defaults if broker else \
                state.topics[res.resource_name].configs
            changes = res.configs
            if broker:
                renamed, why = _renamed(res.configs)
                changes = renamed if why is None else []
                message = why
            if message is not None:
                error = E.INVALID_CONFIG
            else:
                configs, why = _applied(dict(current), changes, state.topic_defaults)
                if why is not None:
                    error, message = E.INVALID_CONFIG, why
                elif broker:
                    error, message = state.alter_cluster_defaults(configs, req.validate_only)
                else:
                    error, message = state.alter_topic_configs(res.resource_name, configs,
                                                               req.validate_only)
        responses.append(AlterConfigsResourceResponse(
            error_code=error, error_message=message, resource_type=res.resource_type,
            resource_name=res.resource_name))
    return IncrementalAlterConfigsResponse(responses=responses)


def _as_topic_names(given: dict[str, str | None]) -> tuple[dict[str, str | None], str | None]:
    """Broker setting names -> the topic settings they default; or why one cannot be."""
    out: dict[str, str | None] = {}
    for name, value in given.items():
        topic_name = topic_settings.BROKER_SYNONYMS.get(name)
        if topic_name is None:
            return {}, _not_dynamic(name)
        out[topic_name] = value
    return out, None


def _renamed(changes: list[Any]) -> tuple[list[Any], str | None]:
    out = []
    for c in changes:
        topic_name = topic_settings.BROKER_SYNONYMS.get(c.name)
        if topic_name is None:
            return [], _not_dynamic(c.name)
        out.append(type(c)(name=topic_name, config_operation=c.config_operation, value=c.value))
    return out, None


def _not_dynamic(name: str) -> str:
    return (f"{name} is not a dynamic broker setting in epochlog: only the defaults of topic "
            f"settings are ({', '.join(sorted(topic_settings.BROKER_SYNONYMS))}); "
            f"{STATIC_BROKERS}")


def _refused_resource(state: ControllerState, resource_type: int, name: str
                      ) -> tuple[int, str | None]:
    if resource_type == RESOURCE_BROKER:
        if name != "":
            return E.INVALID_REQUEST, (f"broker {name}: epochlog takes dynamic defaults "
                                       "cluster-wide only: alter the default broker resource "
                                       "(an empty name)")
        return 0, None
    if resource_type != RESOURCE_TOPIC:
        return E.INVALID_REQUEST, f"resource type {resource_type}: topics (2) and brokers (4) " \
                                  "have settings here"
    if name not in state.topics:
        return E.UNKNOWN_TOPIC_OR_PARTITION, f"no topic {name!r}"
    return 0, None


def _applied(current: dict[str, str], changes: list[Any], defaults: dict[str, str]
             ) -> tuple[dict[str, str | None], str | None]:
    """The topic's own settings after the operations, or the reason one cannot apply."""
    out: dict[str, str | None] = dict(current)
    seen: set[str] = set()
    for c in changes:
        spec = topic_settings.SPECS.get(c.name)
        if spec is None:
            return {}, f"unknown topic setting {c.name!r}"
        if c.name in seen:
            return {}, f"{c.name} is named twice"
        seen.add(c.name)
        if c.config_operation == OP_SET:
            if c.value is None:
                return {}, f"SET {c.name} needs a value"
            out[c.name] = c.value
        elif c.config_operation == OP_DELETE:
            out.pop(c.name, None)
        elif c.config_operation in (OP_APPEND, OP_SUBTRACT):
            if spec.config_type != topic_settings.TYPE_LIST:
                return {}, f"{c.name} is not a list: APPEND and SUBTRACT apply to lists only"
            listed = out.get(c.name) or defaults.get(c.name, spec.default)
            items = [w for w in (listed or "").split(",") if w]
            given = [w.strip() for w in (c.value or "").split(",") if w.strip()]
            if c.config_operation == OP_APPEND:
                items += [w for w in given if w not in items]
            else:
                items = [w for w in items if w not in given]
            out[c.name] = ",".join(items)
        else:
            return {}, f"unknown operation {c.config_operation} for {c.name} (0 SET, 1 DELETE, " \
                       "2 APPEND, 3 SUBTRACT)"
    return out, None
