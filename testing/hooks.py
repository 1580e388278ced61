"""Install test-only request hooks on a broker: drop, delay or answer with an error the next n
requests of one API (broker/request_hooks.py serves them).

A broker has hooks only when started with `request_hooks_listen=HOST:PORT` (for example
`epochlog broker ... --set request_hooks_listen=127.0.0.1:19999`); that address is the one these
functions take. Without the setting nothing listens there, and they raise HookError saying so.

    install_hook("127.0.0.1:19999", "PRODUCE", "error", error="NOT_LEADER_OR_FOLLOWER", times=2)
    install_hook(address, ApiKey.FETCH, "drop")
    install_hook(address, "Metadata", "delay", delay_ms=1500, client_id="my-app")
    list_hooks(address); clear_hooks(address)

The lead's harness (`cluster.inject(...)`) calls install_hook with the broker's control address
and records the returned hook's `describe()` as a fault in the History. Plain HTTP/1.1 and JSON,
with the standard library only, so a test (or curl) can drive a broker without this package.
"""

from __future__ import annotations

import http.client
import json
from enum import IntEnum
from typing import Any

import msgspec

from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.request_hooks import Action as Action
from epochlog.protocol.request_hooks import Hook as Hook

REQUEST_HOOKS_SETTING = "request_hooks_listen"  # the broker setting that switches hooks on
CONTROL_TIMEOUT_S = 10.0
ANSWER_BYTES_MAX = 1 << 20

class HookError(RuntimeError):
    """The broker refused the hook (the message says why) or has no hooks at that address."""


def install_hook(address: str, api: ApiKey | int | str, action: Action, *, times: int = 1,
                 delay_ms: int = 0, error: ErrorCode | int | str | None = None,
                 client_id: str | None = None, timeout_s: float = CONTROL_TIMEOUT_S) -> Hook:
    """Install one hook on the broker whose request_hooks_listen is address ("HOST:PORT"):
    for the next `times` requests of `api` (from client_id only, if given), `action`: "drop"
    (no answer), "delay" (by delay_ms) or "error" (answer `error` everywhere it fits)."""
    spec: dict[str, Any] = {"api": _name(api), "action": action, "times": times}
    if delay_ms:
        spec["delay_ms"] = delay_ms
    if error is not None:
        spec["error"] = _name(error)
    if client_id is not None:
        spec["client_id"] = client_id
    return msgspec.convert(_request(address, "POST", json.dumps(spec).encode(), timeout_s), Hook)


def list_hooks(address: str, timeout_s: float = CONTROL_TIMEOUT_S) -> list[Hook]:
    """Every hook installed on the broker, in order, with how often each has fired."""
    return msgspec.convert(_request(address, "GET", b"", timeout_s), list[Hook])


def clear_hooks(address: str, timeout_s: float = CONTROL_TIMEOUT_S) -> int:
    """Remove every hook; how many there were."""
    return int(_request(address, "DELETE", b"", timeout_s)["removed"])


def _name(value: IntEnum | int | str) -> int | str:
    return value.name if isinstance(value, IntEnum) else value


def _request(address: str, method: str, body: bytes, timeout_s: float) -> Any:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError(f"address must be HOST:PORT, not {address!r}")
    conn = http.client.HTTPConnection(host.strip("[]"), int(port), timeout=timeout_s)
    try:
        conn.request(method, "/hooks", body=body or None,
                     headers={"Content-Type": "application/json"} if body else {})
        answer = conn.getresponse()
        data = answer.read(ANSWER_BYTES_MAX + 1)
    except ConnectionRefusedError:
        raise HookError(f"no request hooks at {address}: is the broker started with "
                        f"{REQUEST_HOOKS_SETTING}={address}?") from None
    except (OSError, http.client.HTTPException) as exc:
        raise HookError(f"request hooks at {address} did not answer: {exc!r} (is it a broker's "
                        f"{REQUEST_HOOKS_SETTING} address?)") from None
    finally:
        conn.close()
    if len(data) > ANSWER_BYTES_MAX:
        raise HookError(f"{address} answered more than {ANSWER_BYTES_MAX} bytes")
    try:
        payload = json.loads(data)
    except ValueError:
        raise HookError(f"{address} answered {answer.status} with no JSON: {data[:200]!r}") \
            from None
    if answer.status != 200:
        raise HookError(f"{address} refused the hook: {payload.get('error', payload)}")
    return payload
