"""Safety checkers: what must hold whatever the faults (RF 3, min ISR 2, acks=all, unclean off).

While the simulation runs (after every event of a broker):
- at most one leader per (partition, leader epoch), ever;
- a leader's high watermark never goes back while it leads in one epoch;
- an offset is never acknowledged twice with different payloads (the first write was lost).
At the end, after the faults are healed and a quiet period has passed (`final`):
- every acknowledged write is in the final leader's log at its offset, and in every ISR member's;
- every ISR member holds the leader's batches, offset for offset, epoch for epoch and CRC for
  CRC, up to the leader's high watermark;
- liveness (reported apart, `liveness`): every partition has a leader that knows it leads, and
  took an acknowledged write during the quiet period.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from epochlog.broker.storage import Log
from epochlog.protocol.batch import BatchHeader
from epochlog.protocol.records import Record, decode_batches

if TYPE_CHECKING:
    from .broker_node import BrokerNode
    from .controller_node import ControllerNode

TP = tuple[str, int]
VIOLATIONS_MAX = 50


class Checkers:
    def __init__(self) -> None:
        self.violations: list[str] = []
        self.liveness: list[str] = []
        self.leaders: dict[tuple[TP, int], int] = {}
        self.hw_seen: dict[tuple[int, TP], tuple[int, int]] = {}
        self.acked: dict[tuple[TP, int], bytes] = {}
        self.last_ack_ms: dict[TP, int] = {}
        self.clock = lambda: 0

    def fail(self, text: str) -> None:
        if len(self.violations) < VIOLATIONS_MAX:
            self.violations.append(f"t={self.clock()}ms: {text}")

    # ------------------------------------------------------------------------ continuous
    def observe_broker(self, broker: BrokerNode) -> None:
        assert broker.replicas is not None
        bid = broker.broker_id
        for tp, p in broker.replicas.partitions.items():
            key = (bid, tp)
            if not p.is_leader:
                self.hw_seen.pop(key, None)
                continue
            epoch = p.leader_epoch
            owner = self.leaders.setdefault((tp, epoch), bid)
            if owner != bid:
                self.fail(f"{tp}: two leaders in leader epoch {epoch}: broker {owner} and "
                          f"broker {bid}")
            hw = p.high_watermark
            seen = self.hw_seen.get(key)
            if seen is not None and seen[0] == epoch and hw < seen[1]:
                self.fail(f"{tp}: leader {bid}'s high watermark went back from {seen[1]} to "
                          f"{hw} in leader epoch {epoch}")
            self.hw_seen[key] = (epoch, hw)

    def on_crash(self, broker_id: int) -> None:
        for key in [k for k in self.hw_seen if k[0] == broker_id]:
            del self.hw_seen[key]

    def on_ack(self, tp: TP, base_offset: int, values: list[bytes], leader: int,
               epoch: int) -> None:
        self.last_ack_ms[tp] = self.clock()
        for i, value in enumerate(values):
            key = (tp, base_offset + i)
            old = self.acked.get(key)
            if old is not None and old != value:
                self.fail(f"{tp} offset {base_offset + i}: acknowledged {value!r} (leader "
                          f"{leader}, epoch {epoch}) but {old!r} was acknowledged there before: "
                          f"that write is lost")
            self.acked[key] = value

    # ------------------------------------------------------------------------------ final
    def final(self, controller: ControllerNode, brokers: dict[int, BrokerNode],
              quiet_from_ms: int) -> None:
        state = controller.state
        assert state is not None
        for name, topic in sorted(state.topics.items()):
            for index, cp in sorted(topic.partitions.items()):
                self._final_partition((name, index), cp.leader, cp.leader_epoch, cp.isr,
                                      brokers, quiet_from_ms)

    def _final_partition(self, tp: TP, leader: int, epoch: int, isr: tuple[int, ...],
                         brokers: dict[int, BrokerNode], quiet_from_ms: int) -> None:
        if leader < 0:
            self.liveness.append(f"{tp}: offline at the end (isr {list(isr)})")
            return
        lrm = brokers[leader].replicas
        lp = lrm.get(*tp) if lrm is not None else None
        if lp is None or not lp.is_leader or lp.leader_epoch != epoch:
            self.liveness.append(f"{tp}: the controller says broker {leader} leads at epoch "
                                 f"{epoch}; that broker has {lp!r}")
        if self.last_ack_ms.get(tp, -1) < quiet_from_ms:
            self.liveness.append(f"{tp}: no acknowledged write after {quiet_from_ms}ms "
                                 f"(last at {self.last_ack_ms.get(tp)})")
        if lp is None:
            self.fail(f"{tp}: leader {leader} holds no replica")
            return
        batches = read_log(lp.log)
        by_offset = {r.offset: r.value for _, records in batches for r in records}
        for (atp, offset), value in sorted(self.acked.items()):
            if atp != tp:
                continue
            found = by_offset.get(offset)
            if found != value:
                self.fail(f"{tp} offset {offset}: acknowledged {value!r}, final leader "
                          f"{leader} (epoch {epoch}) has {found!r}: acknowledged write lost")
        hw = lp.high_watermark
        committed = [_summary(h) for h, _ in batches if h.base_offset < hw]
        for member in isr:
            if member == leader:
                continue
            mrm = brokers[member].replicas
            mp = mrm.get(*tp) if mrm is not None else None
            if mp is None:
                self.fail(f"{tp}: ISR member {member} holds no replica")
                continue
            mine = [_summary(h) for h, _ in read_log(mp.log) if h.base_offset < hw]
            if mine != committed:
                pairs = enumerate(zip(mine, committed, strict=False))
                first = next((i for i, (a, b) in pairs if a != b),
                             min(len(mine), len(committed)))
                self.fail(f"{tp}: ISR member {member} differs from leader {leader} below the "
                          f"high watermark {hw} at batch #{first}: member "
                          f"{mine[first:first + 2]} leader {committed[first:first + 2]}")


def _summary(h: BatchHeader) -> tuple[int, int, int, int]:
    return h.base_offset, h.last_offset, h.partition_leader_epoch, h.crc


def read_log(log: Log) -> list[tuple[BatchHeader, list[Record]]]:
    """Every batch of a log, start to end."""
    out: list[tuple[BatchHeader, list[Record]]] = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 30)
        if not data:
            break
        for header, records in decode_batches(data):
            out.append((header, records))
            offset = header.next_offset
    return out
