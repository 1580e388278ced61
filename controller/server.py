"""The controller's TCP server: Kafka framing and headers, one request at a time per connection.

Rules:
- Frames larger than `frame_bytes_max` are refused as soon as their size is read (FrameBuffer),
  and the connection is closed with a logged reason. So is any frame that does not decode, an API
  the controller does not serve, or a version outside its range (ApiVersions excepted: it answers
  UNSUPPORTED_VERSION with the controller's ranges in a v0 body, KIP-511).
- Requests on one connection are answered in order: each is handled to completion (decided,
  persisted, answered) before the next frame is read from the buffer.
- Bad input closes only its own connection; the server keeps serving everyone else.
- Broker sessions: an accepted BrokerRegistration or BrokerHeartbeat tells the service which
  connection that broker generation heartbeats on; when a connection closes (other than by our
  own close()), the service is told, and generations heartbeating on it get only the
  connection-loss grace (docs/control-plane.md "BrokerHeartbeat").
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

from epochlog.protocol.api import Api
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.errors import ProtocolError
from epochlog.protocol.frames import FrameBuffer, frame
from epochlog.protocol.headers import (
    decode_request_header,
    encode_response_header,
    peek_request_header,
)
from epochlog.protocol.registry import APIS

from .handlers import HANDLERS, api_versions_response
from .service import ControllerService, FatalError

log = logging.getLogger("epochlog.controller")

READ_BYTES_MAX = 64 * 1024
API_VERSIONS_KEY = 18
BROKER_REGISTRATION_KEY, BROKER_HEARTBEAT_KEY = 62, 63


class BadRequest(Exception):
    """A request the controller will not answer; its connection is closed."""


class ControlServer:
    def __init__(self, service: ControllerService, frame_bytes_max: int) -> None:
        self.service = service
        self.frame_bytes_max = frame_bytes_max
        self.server: asyncio.Server | None = None
        self.connections_closed_for_bad_input = 0
        self.requests: Counter[str] = Counter()  # served, by API name (metrics)
        self._writers: set[asyncio.StreamWriter] = set()
        self._closing = False  # close() called: connections closing now are ours, not losses

    async def listen(self, host: str, port: int) -> tuple[str, int]:
        self.server = await asyncio.start_server(self._serve, host, port, reuse_address=True)
        bound = self.server.sockets[0].getsockname()
        return bound[0], bound[1]

    async def close(self) -> None:
        self._closing = True
        if self.server is not None:
            self.server.close()
            for writer in list(self._writers):
                writer.close()
            await self.server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        frames = FrameBuffer(self.frame_bytes_max)
        self._writers.add(writer)
        try:
            while True:
                data = await reader.read(READ_BYTES_MAX)
                if not data:
                    break
                for request in frames.feed(data):
                    writer.write(self._answer(request, writer))
                await writer.drain()
        except (ProtocolError, BadRequest) as exc:
            self.connections_closed_for_bad_input += 1
            log.warning("closing connection from %s: %s", peer, exc)
        except FatalError as exc:
            log.critical("%s", exc)
        except (ConnectionError, OSError):
            pass  # the peer went away
        except Exception:  # a handler bug: drop this connection, keep the controller serving
            log.exception("closing connection from %s after an unexpected error", peer)
        finally:
            self._writers.discard(writer)
            writer.close()
            if not self._closing:
                self.service.connection_closed(writer)

    def _answer(self, request: bytes, conn: object) -> bytes:
        key, version, correlation_id = peek_request_header(request)
        served = HANDLERS.get(key)
        if served is None:
            raise BadRequest(f"API key {key} is not served by the controller")
        api = APIS[key]
        if not served.min_version <= version <= served.max_version:
            if key == API_VERSIONS_KEY:
                return self._encode(api, 0, correlation_id,
                                    api_versions_response(ErrorCode.UNSUPPORTED_VERSION))
            raise BadRequest(f"{api.name} v{version} is not served (versions "
                             f"{served.min_version}-{served.max_version})")
        _, pos = decode_request_header(request, api.request_header_version(version))
        message = api.decode_request(request, version, pos, strict=False)  # as Kafka
        self.requests[api.name] += 1
        if served.handle is None:
            answer = api_versions_response()
        else:
            answer = self.service.handle(served.handle, message, version)
            self._note_session(key, message, answer, conn)
        return self._encode(api, version, correlation_id, answer)

    def _note_session(self, key: int, message: Any, answer: Any, conn: object) -> None:
        """An accepted registration or heartbeat: conn is that generation's connection now."""
        if key == BROKER_REGISTRATION_KEY and answer.error_code == 0:
            self.service.session_connection(conn, message.broker_id, answer.broker_epoch)
        elif key == BROKER_HEARTBEAT_KEY and answer.error_code == 0:
            self.service.session_connection(conn, message.broker_id, message.broker_epoch)

    @staticmethod
    def _encode(api: Api, version: int, correlation_id: int, answer: object) -> bytes:
        header = encode_response_header(correlation_id, api.response_header_version(version))
        return frame(header + api.encode_response(answer, version))  # type: ignore[arg-type]
