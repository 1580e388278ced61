"""A broker whose heartbeat connection closes gets only a short grace (failover in well under a
session), on the pure state machine and on a real controller process.

Why: a SIGKILLed broker's TCP connections close at once, so waiting out a whole session (9 s by
default) to elect new leaders is what made failover slow (issue 5's goal: a median of at most 1 s).
The rule (controller/state.py `connection_lost`): the generation's session deadline is brought
forward to `connection_loss_grace_ms` from the close, never pushed back; a heartbeat (on a new
connection) restores a full session; otherwise it is failed as a connection loss.
"""

from __future__ import annotations

from epochlog.controller.model import DEAD
from epochlog.controller.state import ControllerState
from tests.controller.helpers import ControllerProcess, FakeBroker
from tests.controller.test_state import SESSION_MS, cluster, create, part, register

GRACE_MS = 500


def state_with_grace(n: int = 3) -> tuple[ControllerState, dict[int, int]]:
    s, epochs = cluster(n)
    s.connection_loss_grace_ms = GRACE_MS
    return s, epochs


def test_a_lost_connection_fails_the_generation_after_the_grace_not_the_session() -> None:
    s, epochs = state_with_grace()
    create(s, "t", [[1, 2, 3]])
    s.take_ready()
    assert s.connection_lost(1, epochs[1], now_ms=1000)
    assert s.expire_sessions(now_ms=1000 + GRACE_MS - 1) == []  # still within the grace
    assert s.brokers[1].live
    assert s.expire_sessions(now_ms=1000 + GRACE_MS) == [1]
    assert s.brokers[1].state == DEAD
    assert part(s).leader == 2 and 1 not in part(s).isr  # leadership moved, as on expiry
    assert s.counters["connection_loss_failures"] == 1 and s.counters["sessions_expired"] == 0


def test_a_heartbeat_within_the_grace_keeps_the_generation_with_a_full_session() -> None:
    s, epochs = state_with_grace()
    s.connection_lost(2, epochs[2], now_ms=1000)
    assert s.heartbeat(2, epochs[2], now_ms=1000 + GRACE_MS - 1).error == 0  # reconnected
    assert s.expire_sessions(now_ms=1000 + GRACE_MS) == []
    assert s.brokers[2].session_deadline_ms == 1000 + GRACE_MS - 1 + SESSION_MS
    # A later plain expiry is logged and counted as a session expiry, not a connection loss.
    assert s.expire_sessions(now_ms=1000 + GRACE_MS - 1 + SESSION_MS) == [1, 2, 3]
    assert s.counters["connection_loss_failures"] == 0 and s.counters["sessions_expired"] == 3


def test_the_grace_only_ever_shortens_a_session_and_only_of_the_named_live_generation() -> None:
    s, epochs = state_with_grace()
    deadline = s.brokers[1].session_deadline_ms
    # Closer to its deadline than the grace: nothing changes.
    assert not s.connection_lost(1, epochs[1], now_ms=deadline - GRACE_MS + 1)
    assert s.brokers[1].session_deadline_ms == deadline
    # An older generation's connection closing does not touch the current one.
    new_epoch = register(s, 1, "a")
    assert not s.connection_lost(1, epochs[1], now_ms=10)
    assert s.brokers[1].broker_epoch == new_epoch and s.expire_sessions(now_ms=10 + GRACE_MS) == []
    # Unknown broker, dead generation: nothing.
    assert not s.connection_lost(9, 1, now_ms=0)
    s.expire_sessions(now_ms=SESSION_MS)  # 2 and 3 never heartbeated
    assert not s.connection_lost(2, epochs[2], now_ms=SESSION_MS)


def test_the_timer_knows_the_earliest_deadline() -> None:
    s, epochs = state_with_grace(2)
    assert s.next_session_deadline_ms() == SESSION_MS
    s.connection_lost(2, epochs[2], now_ms=100)
    assert s.next_session_deadline_ms() == 100 + GRACE_MS
    s.expire_sessions(now_ms=100 + GRACE_MS)
    assert s.next_session_deadline_ms() == SESSION_MS  # broker 1's
    s.expire_sessions(now_ms=SESSION_MS)
    assert s.next_session_deadline_ms() is None


async def test_closing_the_heartbeat_connection_fails_the_generation_unless_it_comes_back(
        tmp_path) -> None:
    """On a real controller with a long session: closing the connection a fake broker
    registered on fails that generation (logged as a connection loss), while one that reconnects
    and heartbeats within the grace stays."""
    ctl = await ControllerProcess(str(tmp_path), None, "--broker-session-timeout-ms", "60000",
                                  "--set", "broker_connection_loss_grace_ms=1000").start()
    gone, back = FakeBroker(1, "a"), FakeBroker(2, "b")
    await gone.start()
    await back.start()
    conn_gone, conn_back = await ctl.connect(), await ctl.connect()
    try:
        await gone.register(conn_gone)
        await back.register(conn_back)
        await conn_back.close()
        conn_back = await ctl.connect()
        assert (await back.heartbeat(conn_back)).error_code == 0  # within the grace
        await conn_gone.close()
        line = await ctl.wait_log(f"broker 1 generation {gone.broker_epoch}: connection lost")
        assert "no heartbeat on a new connection within 1000 ms" in line
        await ctl.wait_log(f"broker 1 generation {gone.broker_epoch} is dead: connection lost")
        await ctl.wait_log(f"broker 2 generation {back.broker_epoch} heartbeats again")
        assert (await back.heartbeat(conn_back)).error_code == 0
        assert not ctl.log_has(f"broker 2 generation {back.broker_epoch} is dead")
    finally:
        await conn_back.close()
        await gone.close()
        await back.close()
        assert await ctl.stop() == 0

