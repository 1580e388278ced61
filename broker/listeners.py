"""A broker's listeners in Kafka's form: parsed once, from either settings form, into one plan.

Kafka sets listeners as `listeners=CLIENT://0.0.0.0:9092,INTERNAL://:9091`, with
`advertised.listeners` (same form; each name defaults to its `listeners` entry),
`listener.security.protocol.map` (`CLIENT:SSL,INTERNAL:PLAINTEXT`; by default PLAINTEXT, SSL,
SASL_PLAINTEXT and SASL_SSL map to themselves) and `inter.broker.listener.name`. KIP-291's
`control.plane.listener.name` names the listener the controller sends its control requests to
(default: the inter-broker one).

epochlog's older settings, `listen`/`advertised` and `internal_listen`/`internal_advertised`
(docs/control-plane.md "Listeners"), are the same thing written another way: listeners named
EXTERNAL and INTERNAL, both PLAINTEXT unless the map says otherwise, INTERNAL the inter-broker
listener when there is one. `plan_listeners` turns either form into one `ListenerPlan`; nothing
else in the broker reads the raw settings.

Rules (each refused at start, naming the setting):
- names are unique (upper-cased, as Kafka normalises them); bind ports are unique unless 0;
- every listener has a protocol in the map; only PLAINTEXT and SSL are built (SASL is not yet);
- an advertised entry names a listener and gives a real port;
- the inter-broker and control-plane listeners exist; the control plane is PLAINTEXT (the
  controller's link has no TLS yet).
The plan lists the control-plane listener first: that is the order brokers register in, and the
controller dials a broker's first registered listener (controller/model.py `Broker.endpoint`).

Sans-IO: no sockets, no ssl; config.py calls it, and app.py binds what it says.
"""

from __future__ import annotations

import enum
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass

WILDCARD_HOSTS = ("0.0.0.0", "::", "")
EXTERNAL_LISTENER = "EXTERNAL"  # the older settings' client listener (`listen`)
INTERNAL_LISTENER = "INTERNAL"  # ... and their cluster listener (`internal_listen`)
LISTENERS_MAX = 16  # more than any deployment needs; a typo's runaway list is refused

_NAME = re.compile(r"[A-Za-z0-9_]+")


class SecurityProtocol(enum.IntEnum):
    """Kafka's security protocols, with the ids BrokerRegistration carries."""
    PLAINTEXT = 0
    SSL = 1
    SASL_PLAINTEXT = 2
    SASL_SSL = 3


BUILT_PROTOCOLS = frozenset({SecurityProtocol.PLAINTEXT, SecurityProtocol.SSL})
DEFAULT_PROTOCOL_MAP = {p.name: p for p in SecurityProtocol}  # Kafka's default map


@dataclass(frozen=True)
class Listener:
    name: str
    protocol: SecurityProtocol
    host: str  # where to bind; "" or a wildcard: every interface
    port: int  # 0: any free port
    advertised: tuple[str, int] | None  # None: the bind host with the port actually bound

    @property
    def tls(self) -> bool:
        return self.protocol in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    def advertised_address(self, bound_port: int) -> tuple[str, int]:
        """Where others reach this listener: its advertised entry, else its bind host with the
        port bound (a wildcard is no address to give out: 127.0.0.1 then)."""
        if self.advertised is not None:
            return self.advertised
        host = "127.0.0.1" if self.host in WILDCARD_HOSTS else self.host
        return host, bound_port


@dataclass(frozen=True)
class ListenerPlan:
    listeners: tuple[Listener, ...]  # the control-plane listener first (registration order)
    inter_broker: str  # inter.broker.listener.name: followers and transaction markers
    control_plane: str  # control.plane.listener.name: where the controller dials us
    client: str  # the listener named first in the settings: the start line shows it

    def named(self, name: str) -> Listener:
        return next(lst for lst in self.listeners if lst.name == name)

    @property
    def tls(self) -> bool:
        """Some listener speaks TLS (so the ssl.* settings must be complete)."""
        return any(lst.tls for lst in self.listeners)


def parse_host_port(text: str, name: str) -> tuple[str, int]:
    """'HOST:PORT' -> (host, port); raises ValueError starting with the setting's name."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{name}: expected HOST:PORT with a port 0-65535, got {text!r}")
    return host.strip("[]"), int(port)


def parse_listener_list(text: str, setting: str) -> dict[str, tuple[str, int]]:
    """'NAME://HOST:PORT,...' (HOST may be empty: every interface) -> {NAME: (host, port)},
    in the order given."""
    out: dict[str, tuple[str, int]] = {}
    for item in (i.strip() for i in text.split(",")):
        name, sep, address = item.partition("://")
        if not sep or not _NAME.fullmatch(name):
            raise ValueError(f"{setting}: expected NAME://HOST:PORT entries separated by commas, "
                             f"got {item!r}")
        name = name.upper()
        if name in out:
            raise ValueError(f"{setting}: listener {name} is named twice")
        host, colon, port = address.rpartition(":")
        if not colon or not port.isdigit() or not 0 <= int(port) <= 65535:
            raise ValueError(f"{setting}: {item!r}: expected NAME://HOST:PORT with a port "
                             f"0-65535")
        out[name] = (host.strip("[]"), int(port))
    if len(out) > LISTENERS_MAX:
        raise ValueError(f"{setting}: at most {LISTENERS_MAX} listeners")
    return out


def parse_protocol_map(text: str, setting: str) -> dict[str, SecurityProtocol]:
    """'NAME:PROTOCOL,...' -> {NAME: protocol}; empty: Kafka's default map."""
    if not text.strip():
        return dict(DEFAULT_PROTOCOL_MAP)
    out: dict[str, SecurityProtocol] = {}
    for item in (i.strip() for i in text.split(",")):
        name, sep, protocol = item.partition(":")
        known = protocol.upper() in SecurityProtocol.__members__
        if not sep or not _NAME.fullmatch(name) or not known:
            raise ValueError(f"{setting}: expected NAME:PROTOCOL entries (PROTOCOL one of "
                             f"{', '.join(SecurityProtocol.__members__)}), got {item!r}")
        out[name.upper()] = SecurityProtocol[protocol.upper()]
    return out


@dataclass(frozen=True)
class ListenerSettings:
    """The raw settings, as BrokerConfig holds them (see the module's notes)."""
    listeners: str = ""
    advertised_listeners: str = ""
    listener_security_protocol_map: str = ""
    inter_broker_listener_name: str = ""
    control_plane_listener_name: str = ""
    listen: str = ""
    advertised: str = ""
    internal_listen: str = ""
    internal_advertised: str = ""


@functools.lru_cache(maxsize=16)  # settings never change in a process: parsed once
def plan_listeners(s: ListenerSettings) -> ListenerPlan:
    """One plan from either form; ValueError naming the setting otherwise."""
    if s.listeners:
        binds = parse_listener_list(s.listeners, "listeners")
        advertised = parse_listener_list(s.advertised_listeners, "advertised_listeners") \
            if s.advertised_listeners else {}
        _check_advertised(advertised.values(), "advertised_listeners")
        inter_default = ""
    else:
        binds, advertised = _older_form(s)
        inter_default = INTERNAL_LISTENER if INTERNAL_LISTENER in binds else EXTERNAL_LISTENER
    protocols = parse_protocol_map(s.listener_security_protocol_map,
                                   "listener_security_protocol_map")
    if not s.listeners and not s.listener_security_protocol_map:
        protocols.update({EXTERNAL_LISTENER: SecurityProtocol.PLAINTEXT,
                          INTERNAL_LISTENER: SecurityProtocol.PLAINTEXT})
    listeners = [_listener(name, host, port, protocols, advertised)
                 for name, (host, port) in binds.items()]
    _check_ports(binds)
    for name in advertised:
        if name not in binds:
            raise ValueError(f"advertised_listeners: {name} is not in listeners")
    inter = _chosen(s.inter_broker_listener_name, "inter_broker_listener_name", binds,
                    inter_default or (None if s.inter_broker_listener_name
                                      else _kafka_default(binds)))
    control = _chosen(s.control_plane_listener_name, "control_plane_listener_name", binds, inter)
    if protocols_of(listeners)[control] is not SecurityProtocol.PLAINTEXT:
        raise ValueError(f"control_plane_listener_name: {control} is "
                         f"{protocols_of(listeners)[control].name}, but the controller's link "
                         f"has no TLS yet: name a PLAINTEXT listener for the controller")
    first = next(lst for lst in listeners if lst.name == control)
    ordered = (first, *(lst for lst in listeners if lst.name != control))
    return ListenerPlan(ordered, inter, control, listeners[0].name)


def protocols_of(listeners: list[Listener]) -> dict[str, SecurityProtocol]:
    return {lst.name: lst.protocol for lst in listeners}


def _older_form(s: ListenerSettings) -> tuple[dict[str, tuple[str, int]],
                                              dict[str, tuple[str, int]]]:
    """listen/advertised (+ internal_*) as listeners EXTERNAL (+ INTERNAL)."""
    if s.advertised_listeners:
        raise ValueError("advertised_listeners: needs listeners (Kafka's form); with listen, "
                         "set advertised")
    binds = {EXTERNAL_LISTENER: parse_host_port(s.listen or "127.0.0.1:9092", "listen")}
    advertised: dict[str, tuple[str, int]] = {}
    if s.advertised:
        advertised[EXTERNAL_LISTENER] = parse_host_port(s.advertised, "advertised")
        _check_advertised(advertised.values(), "advertised")
    if not s.internal_listen:
        if s.internal_advertised:
            raise ValueError("internal_advertised: needs internal_listen")
        return binds, advertised
    host, port = parse_host_port(s.internal_listen, "internal_listen")
    if port != 0 and (host, port) == binds[EXTERNAL_LISTENER]:
        raise ValueError("internal_listen: must differ from listen (one port, one listener)")
    binds[INTERNAL_LISTENER] = (host, port)
    if s.internal_advertised:
        advertised[INTERNAL_LISTENER] = parse_host_port(s.internal_advertised,
                                                        "internal_advertised")
        _check_advertised([advertised[INTERNAL_LISTENER]], "internal_advertised")
    return binds, advertised


def _listener(name: str, host: str, port: int, protocols: dict[str, SecurityProtocol],
              advertised: dict[str, tuple[str, int]]) -> Listener:
    protocol = protocols.get(name)
    if protocol is None:
        raise ValueError(f"listener_security_protocol_map: no security protocol for listener "
                         f"{name} (add {name}:PLAINTEXT or {name}:SSL)")
    if protocol not in BUILT_PROTOCOLS:
        raise ValueError(f"listener_security_protocol_map: listener {name} is {protocol.name}, "
                         f"but SASL is not built yet: use PLAINTEXT or SSL")
    return Listener(name, protocol, host, port, advertised.get(name))


def _check_advertised(addresses: Iterable[tuple[str, int]], setting: str) -> None:
    if any(port == 0 for _, port in addresses):
        raise ValueError(f"{setting}: needs a real port, not 0")


def _check_ports(binds: dict[str, tuple[str, int]]) -> None:
    seen: dict[int, str] = {}
    for name, (_, port) in binds.items():
        if port and port in seen:
            raise ValueError(f"listeners: {seen[port]} and {name} both bind port {port} "
                             f"(one port, one listener)")
        seen[port] = name


def _kafka_default(binds: dict[str, tuple[str, int]]) -> str:
    """Kafka's inter-broker default is the listener named PLAINTEXT; with a single listener we
    take that one (Kafka would refuse), so a one-listener broker needs no more settings."""
    if "PLAINTEXT" in binds:
        return "PLAINTEXT"
    if len(binds) == 1:
        return next(iter(binds))
    raise ValueError("inter_broker_listener_name: not set, and there is no listener named "
                     "PLAINTEXT (Kafka's default): name the listener brokers use between them")


def _chosen(value: str, setting: str, binds: dict[str, tuple[str, int]],
            default: str | None) -> str:
    name = value.upper() if value else default
    assert name is not None, "a default where no value is set"
    if name not in binds:
        raise ValueError(f"{setting}: {name} is not a listener (listeners: "
                         f"{', '.join(binds)})")
    return name
