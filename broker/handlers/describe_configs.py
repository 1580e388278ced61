"""DescribeConfigs (key 32), versions 1-4.

v1 synonyms; v3 config type and documentation; v4 is flexible. TOPIC resources are relayed to the
controller, which holds topic settings (each with its value in force, source and synonyms), and
so is the default BROKER resource (an empty name: the dynamic cluster-wide defaults). This
broker's own BROKER resource (its id) is answered here, as Kafka requires, from its own settings
(_broker_configs.py) with the dynamic defaults over them; another broker's id is
INVALID_REQUEST naming the broker to ask.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResponse,
    DescribeConfigsResult,
)
from epochlog.protocol.error_codes import ErrorCode

from . import register
from ._broker_configs import describe_broker
from ._forward import forward

if TYPE_CHECKING:
    from ._context import RequestContext

RESOURCE_BROKER = 4


def failed(request: DescribeConfigsRequest, error: int) -> DescribeConfigsResponse:
    return DescribeConfigsResponse(results=[
        DescribeConfigsResult(error_code=error, error_message="controller unavailable",
                              resource_type=r.resource_type, resource_name=r.resource_name)
        for r in request.resources])


async def handle(ctx: RequestContext, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    own = {"", str(ctx.app.broker_id)}
    # Topics, and the cluster's dynamic defaults (the default BROKER resource), are the
    # controller's; this broker's own resource is answered here with those defaults on top.
    wants_defaults = any(r.resource_type == RESOURCE_BROKER and r.resource_name in own
                         for r in request.resources)
    relayed = [r for r in request.resources if r.resource_type != RESOURCE_BROKER]
    if wants_defaults:
        relayed.append(DescribeConfigsResource(resource_type=RESOURCE_BROKER, resource_name="",
                                               configuration_keys=None))
    answers: dict[tuple[int, str], DescribeConfigsResult] = {}
    if relayed:
        asked = DescribeConfigsRequest(resources=relayed, include_synonyms=True,
                                       include_documentation=request.include_documentation)
        for answer in (await forward(ctx, ApiKey.DESCRIBE_CONFIGS, asked, failed)).results:
            answers[(answer.resource_type, answer.resource_name)] = answer
    dynamic = answers.get((RESOURCE_BROKER, ""))
    results = []
    for r in request.resources:
        if r.resource_type != RESOURCE_BROKER:
            results.append(_synonyms_as_asked(answers.get(
                (r.resource_type, r.resource_name)) or _unanswered(r), request.include_synonyms))
        elif r.resource_name not in own:
            results.append(DescribeConfigsResult(
                error_code=ErrorCode.INVALID_REQUEST, resource_type=r.resource_type,
                resource_name=r.resource_name,
                error_message=f"this is broker {ctx.app.broker_id}: ask broker "
                              f"{r.resource_name} for its settings"))
        elif dynamic is None or dynamic.error_code:
            results.append(dynamic or _unanswered(r))
        elif r.resource_name == "":
            results.append(_synonyms_as_asked(dynamic, request.include_synonyms))
        else:
            results.append(DescribeConfigsResult(
                resource_type=r.resource_type, resource_name=r.resource_name, error_message=None,
                configs=describe_broker(ctx.app.config, r.configuration_keys,
                                        request.include_synonyms, dynamic.configs)))
    return DescribeConfigsResponse(results=results)


def _unanswered(r: DescribeConfigsResource) -> DescribeConfigsResult:
    return DescribeConfigsResult(
        error_code=ErrorCode.UNKNOWN_SERVER_ERROR, resource_type=r.resource_type,
        resource_name=r.resource_name, error_message="the controller did not answer it")


def _synonyms_as_asked(result: DescribeConfigsResult, synonyms: bool) -> DescribeConfigsResult:
    if not synonyms:
        for c in result.configs:
            c.synonyms = []
    return result


register(ApiKey.DESCRIBE_CONFIGS, 1, 4, handle)
