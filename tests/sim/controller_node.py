"""The controller process, simulated: the real `ControllerState` and handlers, driven the way
controller/service.py and controller/sender.py drive them, on the simulated clock and network.

What is real: `ControllerState` (every decision), `controller.handlers` (BrokerRegistration,
BrokerHeartbeat, AlterPartition answers), `outbound` (the control requests). What is mirrored
here, because the real ones are asyncio code: the service's commit (PERSIST BEFORE YOU SEND: a
decision's records go to `durable` before any of its sends is queued or its answer written), the
timer (session expiry at the earliest session deadline, woken at once by a connection loss, and the
automatic leader rebalance), the server's bookkeeping of which connection each generation
heartbeats on (service.py `session_connection` / `connection_closed`: when that connection closes,
`ControllerState.connection_lost` cuts the session short to `connection_loss_grace_ms`), and the
senders:

- one sender per broker generation; one request in flight at a time, in decision order;
- no answer (refused, lost, timed out): the same request again after a backoff doubling from
  BACKOFF_MS_MIN up to `send_backoff_ms_max`, while the generation lives;
- any answer, whatever its error (STALE_BROKER_EPOCH included), is never resent;
- a generation that ends retires its sender: nothing more is sent, the one in flight may land;
- a full queue is replaced by the whole state (`full_state_sends`).

A crash loses everything but `durable` (the metadata log, fsynced before anything was sent);
a restart replays it and starts a new controller epoch, as ControllerService.start does.
"""

from __future__ import annotations

import random
from collections import Counter, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from epochlog.controller import handlers as controller_handlers
from epochlog.controller.config import ControllerConfig
from epochlog.controller.model import Send
from epochlog.controller.records import Record
from epochlog.controller.sender import BACKOFF_MS_MIN
from epochlog.controller.service import EXPIRY_CHECK_MS_MAX, EXPIRY_CHECK_MS_MIN
from epochlog.controller.state import ControllerState

from .scheduler import Node, Scheduler

if TYPE_CHECKING:
    from .harness import Settings
    from .network import Conn, Network

CONTROLLER_ID = 3000
REGISTRATION_KEY, HEARTBEAT_KEY = 62, 63


class SimSender:
    def __init__(self, node: ControllerNode, broker_id: int, broker_epoch: int) -> None:
        self.node = node
        self.broker_id = broker_id
        self.broker_epoch = broker_epoch
        self.queue: deque[Send] = deque()
        self.in_flight = False
        self.retired = False
        self.backoff_ms = BACKOFF_MS_MIN

    def offer(self, send: Send) -> bool:
        assert (send.broker_id, send.broker_epoch) == (self.broker_id, self.broker_epoch)
        if len(self.queue) >= self.node.settings.controller_queue_max:
            return False
        self.queue.append(send)
        self.pump()
        return True

    def replace(self, sends: list[Send]) -> None:
        self.queue.clear()
        for send in sends:
            self.offer(send)

    def retire(self) -> None:
        self.retired = True

    def pump(self) -> None:
        if self.retired or self.in_flight or not self.queue:
            return
        send = self.queue[0]
        self.in_flight = True
        node = self.node
        node.net.call(node, self.broker_id, send.api_key, send.version, send.message,
                      node.settings.request_timeout_ms,
                      lambda answer: self._answered(send, answer), self._no_answer)

    def _answered(self, send: Send, answer: Any) -> None:
        self.in_flight = False
        self.backoff_ms = BACKOFF_MS_MIN
        if self.queue and self.queue[0] is send:
            self.queue.popleft()
        self.node.answers[getattr(answer, "error_code", 0)] = \
            self.node.answers.get(getattr(answer, "error_code", 0), 0) + 1
        self.pump()

    def _no_answer(self, reason: str) -> None:
        self.in_flight = False
        if self.retired:
            return
        delay, self.backoff_ms = self.backoff_ms, min(self.backoff_ms * 2,
                                                      self.node.settings.send_backoff_ms_max)
        self.node.timer(delay, self.pump)


class ControllerNode(Node):
    def __init__(self, sim: Scheduler, net: Network, settings: Settings) -> None:
        super().__init__(sim, CONTROLLER_ID, "controller")
        self.net = net
        self.settings = settings
        rebalance_s, rest = divmod(settings.rebalance_check_ms, 1000)
        assert not rest, "ControllerConfig counts the leader imbalance check in seconds"
        self.config = ControllerConfig(  # the rest are ControllerConfig's defaults
            data_dir="(simulated: the metadata log is `durable`)", controller_id=CONTROLLER_ID,
            broker_session_timeout_ms=settings.session_timeout_ms,
            broker_connection_loss_grace_ms=settings.connection_loss_grace_ms,
            leader_imbalance_check_interval_seconds=rebalance_s)
        self.durable: list[Record] = []  # the metadata log: survives crashes
        self.state: ControllerState | None = None
        self.senders: dict[int, SimSender] = {}
        self.answers: dict[int, int] = {}
        self.on_commit: Callable[[], None] | None = None
        # service.py's: broker id -> the connection its generation last registered or
        # heartbeated on; connection id -> {broker id: broker epoch}
        self._session_conn: dict[int, Conn] = {}
        self._conn_sessions: dict[int, dict[int, int]] = {}
        self._expire_token = 0
        self.connection_losses = 0  # figures
        self._counted: Counter[str] = Counter()  # the counters of controllers that crashed

    # ---------------------------------------------------------------------------- lifecycle
    def on_start(self) -> None:
        self.state = ControllerState(self.config, random.Random(self.sim.rng.getrandbits(64)))
        self.state.replay(self.durable)
        self.state.start(self.sim.now_ms)
        self.senders = {}
        self._session_conn = {}
        self._conn_sessions = {}
        self.commit()
        self._tick_ms = min(max(self.settings.session_timeout_ms // 10, EXPIRY_CHECK_MS_MIN),
                            EXPIRY_CHECK_MS_MAX)
        self._expire_wait()

    def counters(self) -> Counter[str]:
        """ControllerState's counters summed over every controller process of the run."""
        return self._counted + (self.state.counters if self.state is not None else Counter())

    def on_crash(self) -> None:
        self.net.crashed(self)  # every connection closes at once: brokers reconnect
        if self.state is not None:
            self._counted += self.state.counters
        self.state = None
        self.senders = {}

    def _expire_wait(self) -> None:
        """service._expire_loop's wait: until the earliest session deadline, at most a tick."""
        assert self.state is not None
        due_ms = self.state.next_session_deadline_ms()
        wait_ms = self._tick_ms if due_ms is None else \
            min(max(due_ms - self.sim.now_ms, EXPIRY_CHECK_MS_MIN), self._tick_ms)
        self._expire_token += 1
        self.timer(wait_ms, self._expire, self._expire_token)

    def _expire(self, token: int) -> None:
        assert self.state is not None
        if token != self._expire_token:
            return  # woken earlier (connection_closed): this wait was replaced
        expired = self.state.expire_sessions(self.sim.now_ms)
        if expired:
            self.sim.log(f"controller: sessions expired {expired}")
        moved = self.state.rebalance_leaders(self.sim.now_ms)  # decides its own interval
        if moved:
            self.sim.log(f"controller: preferred leaders back for {moved}")
        self.commit()
        self._expire_wait()

    # --------------------------------------------------------------------- connections
    def _note_session(self, key: int, request: Any, answer: Any, conn: Conn | None) -> None:
        """server._note_session + service.session_connection: an accepted registration or
        heartbeat makes conn that generation's heartbeat connection."""
        if conn is None or key not in (REGISTRATION_KEY, HEARTBEAT_KEY) or answer.error_code:
            return
        epoch = answer.broker_epoch if key == REGISTRATION_KEY else request.broker_epoch
        broker_id = request.broker_id
        old = self._session_conn.get(broker_id)
        if old is not None and old is not conn:
            self._conn_sessions.get(old.conn_id, {}).pop(broker_id, None)
        self._session_conn[broker_id] = conn
        self._conn_sessions.setdefault(conn.conn_id, {})[broker_id] = epoch

    def connection_closed(self, conn: Conn) -> None:
        """service.connection_closed: each generation whose heartbeat connection it was gets
        the grace, and the expiry timer is woken at once."""
        assert self.state is not None
        for broker_id, broker_epoch in self._conn_sessions.pop(conn.conn_id, {}).items():
            if self._session_conn.get(broker_id) is conn:
                del self._session_conn[broker_id]
                if self.state.connection_lost(broker_id, broker_epoch, self.sim.now_ms):
                    self.connection_losses += 1
                    self.sim.log(f"controller: broker {broker_id} generation {broker_epoch}: "
                                 f"heartbeat connection closed, grace "
                                 f"{self.settings.connection_loss_grace_ms}ms")
                    self._expire_token += 1
                    self.timer(0, self._expire, self._expire_token)

    # ------------------------------------------------------------------------------ commits
    def commit(self) -> None:
        """ControllerService._commit: persist, retire ended generations, queue the sends."""
        assert self.state is not None
        ready = self.state.take_ready()
        if not ready:
            return
        self.durable.extend(ready.records)  # "fsynced": from here on the decision is durable
        for broker_id, sender in list(self.senders.items()):
            broker = self.state.brokers.get(broker_id)
            if broker is None or not broker.live or broker.broker_epoch != sender.broker_epoch:
                sender.retire()
                del self.senders[broker_id]
        for send in ready.sends:
            self._queue(send)
        if self.on_commit is not None:
            self.on_commit()

    def _queue(self, send: Send) -> None:
        assert self.state is not None
        broker = self.state.brokers.get(send.broker_id)
        if broker is None or not broker.live or broker.broker_epoch != send.broker_epoch:
            return
        sender = self.senders.get(send.broker_id)
        if sender is None or sender.broker_epoch != send.broker_epoch:
            sender = self.senders[send.broker_id] = SimSender(self, send.broker_id,
                                                              send.broker_epoch)
        if not sender.offer(send):
            sender.replace(self.state.full_state_sends(send.broker_id))

    # ------------------------------------------------------------------------------ serving
    def serve(self, key: int, version: int, request: Any, reply: Callable[[Any], None],
              source: int, conn: Conn | None = None) -> None:
        assert self.state is not None
        served = controller_handlers.HANDLERS[key]
        assert served.handle is not None
        try:
            answer = served.handle(self.state, request, version, self.sim.now_ms)
        finally:
            self.commit()  # whatever was decided is durable before the answer goes out
        self._note_session(key, request, answer, conn)
        reply(answer)

    # ------------------------------------------------------------------------------- admin
    def admin(self, fn: Callable[[ControllerState], Any]) -> Any:
        """An admin request that arrived (CreateTopics...): run it and commit."""
        assert self.state is not None and self.up and not self.paused
        try:
            return fn(self.state)
        finally:
            self.commit()
