"""The application under chaos in the compose tests: an idempotent acks=all confluent-kafka
producer on the host, writing numbered records through the published ports in a thread
(epochlog.testing.traffic.produce_paced), and the check of what it was told against what the
cluster holds afterwards.

    with Workload(cluster.bootstrap, "t", partitions=3) as work:
        work.wait_acked(100)            # it is producing
        ...break something...
    work.check(read_all(cluster.bootstrap, "t", 3))

Leaving the block stops the producer and flushes (bounded); `check` then asserts: no delivery
failed (nothing surfaced to the application), every acknowledged record is read back at the
offset it was acknowledged at, no record twice, per partition in the order sent, and every record
offered was acknowledged.
"""

from __future__ import annotations

import threading
import time
from types import TracebackType
from typing import Any

from epochlog.testing.traffic import produce_paced

RATE_PER_S = 400  # records offered per second: modest, the containers share two cores
JOIN_S_MAX = 150.0  # the producer's final flush is bounded at 90 s
ACKED_WAIT_S_MAX = 90.0


class Workload:
    def __init__(self, bootstrap: str, topic: str, partitions: int,
                 rate_per_s: int = RATE_PER_S) -> None:
        self.bootstrap, self.topic, self.partitions = bootstrap, topic, partitions
        self.rate_per_s = rate_per_s
        self.lock = threading.Lock()
        self.acked: dict[int, list[tuple[int, int]]] = {i: [] for i in range(partitions)}
        self.failed: list[str] = []
        self.sent: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"workload {topic}", daemon=True)

    def _run(self) -> None:
        self.sent = produce_paced(self.bootstrap, self.topic, self.rate_per_s, self._stop,
                                  on_delivery=self.on_delivery,
                                  placement=lambda n: {"key": str(n % 97).encode()})

    def on_delivery(self, err: Any, msg: Any) -> None:
        with self.lock:
            if err is not None:
                self.failed.append(str(err))
            else:
                self.acked[msg.partition()].append((msg.offset(), int(msg.value())))

    @property
    def acked_count(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.acked.values())

    def wait_acked(self, more: int) -> None:
        """Until `more` records beyond those acknowledged now are acknowledged (bounded)."""
        target = self.acked_count + more
        deadline = time.monotonic() + ACKED_WAIT_S_MAX
        while self.acked_count < target:
            assert self._thread.is_alive(), "the producer stopped (see its traceback)"
            assert time.monotonic() < deadline, (
                f"{self.acked_count} acknowledged, waited for {target}; failures "
                f"{self.failed[:3]}")
            time.sleep(0.1)

    def __enter__(self) -> Workload:
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join(JOIN_S_MAX)
        if kind is None:
            assert not self._thread.is_alive(), "the producer did not finish its flush"
            assert self.sent is not None, "the producer failed (see its traceback above)"

    def check(self, got: dict[int, list[tuple[int, bytes]]]) -> None:
        total = sum(len(v) for v in self.acked.values())
        assert total > 0, f"nothing was acknowledged; failures: {self.failed[:5]}"
        assert not self.failed, f"{len(self.failed)} deliveries failed: {self.failed[:5]}"
        for index in range(self.partitions):
            numbers = [int(value) for _, value in got[index]]
            assert len(numbers) == len(set(numbers)), f"partition {index}: duplicates"
            assert numbers == sorted(numbers), f"partition {index}: order broken"
            at = dict(got[index])
            lost = [(o, n) for o, n in self.acked[index] if at.get(o) != str(n).encode()]
            assert not lost, (f"partition {index}: {len(lost)} acknowledged records missing "
                              f"or moved, first {lost[:5]}")
        assert total == self.sent, f"{self.sent} sent, {total} acknowledged"
