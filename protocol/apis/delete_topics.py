"""DeleteTopics (key 20): versions 1-6, flexible from v4.

v4 is flexible; v5 a per-topic error message; v6 deletes by name or topic id.
"""

import uuid
from typing import Annotated

from ..api import Api
from ..api_keys import ApiKey
from ..schema import ZERO_UUID, Message, V, i16, i32


class DeleteTopicState(Message):
    name: Annotated[str | None, V("6+", nullable="6+")] = None
    topic_id: Annotated[uuid.UUID, V("6+")] = ZERO_UUID


class DeleteTopicsRequest(Message):
    topics: Annotated[list[DeleteTopicState], V("6+")] = []
    topic_names: Annotated[list[str], V("1-5")] = []
    timeout_ms: i32 = 0


class DeletableTopicResult(Message):
    name: Annotated[str | None, V(nullable="6+")] = ""
    topic_id: Annotated[uuid.UUID, V("6+")] = ZERO_UUID
    error_code: i16 = 0
    error_message: Annotated[str | None, V("5+", nullable="5+")] = None


class DeleteTopicsResponse(Message):
    throttle_time_ms: i32 = 0
    responses: list[DeletableTopicResult] = []


API = Api(key=ApiKey.DELETE_TOPICS, name="DeleteTopics",
          min_version=1, max_version=6, flexible_from=4,
          request=DeleteTopicsRequest, response=DeleteTopicsResponse)
