"""`ReplicaManager`: this broker's partitions, their logs, and the waits that depend on them.

It applies what the controller decided (LeaderAndIsr, StopReplica) to `Partition` state machines,
owns the storage `LogManager`, and pokes the produce and fetch purgatories whenever a partition
changes (append, high watermark, role), so waiting requests re-check at once.

Rules (docs/control-plane.md):
- A partition's log is opened (or created) when a LeaderAndIsr names it; `is_new` with data on disk
  means a topic of the same name was deleted while we were away: that data goes.
- The first LeaderAndIsr of a generation (per controller epoch) lists every partition the
  controller places here. A partition on disk that it does not list is no longer ours (its topic
  was deleted while we were away): stop serving it and delete it.
- StopReplica refuses a partition whose leader epoch is below ours (FENCED_LEADER_EPOCH; -1 and -2
  skip the check), else stops serving it and deletes it if asked.
- Every applied state and every removal is told to `partition_listeners` (the broker's replica
  fetchers, fetcher.py): a follower is fetched from its leader, anything else is not.
- Topic settings (topic_configs.py): before a LeaderAndIsr opens a partition of a topic we have
  no settings for (or one just created), `load_topic_settings` asks the controller for them; the
  log is then created, or an existing one reconfigured, with them, and the partition keeps the
  topic's min.insync.replicas.

Flushing: logs do not fsync on the append path (`auto_flush` off); `flush_due_logs` runs their
fsyncs on an executor thread (storage's FlushJob) so the event loop never waits on a disk.
Everything else runs on the event loop, which owns all of this state.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable

from protocol.error_codes import ErrorCode

from .partition import Partition, PartitionState, Role
from .purgatory import Purgatory
from .storage import LogManager
from .topic_configs import Fetch, TopicConfigs

log = logging.getLogger("epochlog.broker")

TopicPartition = tuple[str, int]
PartitionListener = Callable[[str, int, "Partition | None"], None]
NO_EPOCH_CHECK = (-1, -2)  # StopReplica leader epochs that skip the check


class ReplicaManager:
    def __init__(self, broker_id: int, logs: LogManager, clock: Callable[[], int], *,
                 produce_waiters_max: int, fetch_waiters_max: int) -> None:
        self.broker_id = broker_id
        self.logs = logs
        self.clock = clock
        self.topic_configs = TopicConfigs(logs.config)
        self.partitions: dict[TopicPartition, Partition] = {}
        self.produce_purgatory = Purgatory("produce", produce_waiters_max)
        self.fetch_purgatory = Purgatory("fetch", fetch_waiters_max)
        self.synced_at: tuple[int, int] | None = None  # (generation, controller epoch) of the
        # last full LeaderAndIsr applied
        # Given to every partition opened: wakes the ISR task when a follower may join the ISR.
        self.on_isr_candidate: Callable[[Partition], None] | None = None
        # Told of every partition whose state was applied (the partition) or that is gone
        # (None): the replica fetchers (fetcher.py, or a simulation's) follow or stop.
        self.partition_listeners: list[PartitionListener] = []
        for each in logs.logs.values():
            each.auto_flush = False

    # ------------------------------------------------------------------------------- reading
    def get(self, topic: str, index: int) -> Partition | None:
        return self.partitions.get((topic, index))

    def leader_count(self) -> int:
        return sum(p.is_leader for p in self.partitions.values())

    def poke(self, tp: TopicPartition) -> None:
        self.produce_purgatory.poke(tp)
        self.fetch_purgatory.poke(tp)

    # ------------------------------------------------------------------------ LeaderAndIsr
    async def load_topic_settings(self, named: Iterable[tuple[TopicPartition, bool]],
                                  fetch: Fetch) -> None:
        """Before applying a LeaderAndIsr ((topic, index), is_new per partition): fetch the
        settings of topics it makes us open that we do not know, or that were just created."""
        wanted = {topic for (topic, index), is_new in named
                  if is_new or ((topic, index) not in self.partitions
                                and not self.topic_configs.knows(topic))}
        if wanted:
            await self.topic_configs.ensure(wanted, fetch)

    def apply_partition_state(self, topic: str, index: int, state: PartitionState,
                              is_new: bool) -> int:
        """One partition of a LeaderAndIsr: 0, or STALE_CONTROLLER_EPOCH if not newer."""
        partition = self.partitions.get((topic, index))
        if partition is None:
            partition = self._open(topic, index, is_new)
        elif not state.newer_than(partition.state):
            log.warning("%s: kept leader epoch %d partition epoch %d; LeaderAndIsr named %d/%d "
                        "(STALE_CONTROLLER_EPOCH)", partition.name, partition.leader_epoch,
                        partition.state.partition_epoch if partition.state else -1,
                        state.leader_epoch, state.partition_epoch)
            return ErrorCode.STALE_CONTROLLER_EPOCH
        partition.apply(state)
        self.poke((topic, index))
        self._tell(topic, index, partition)
        return 0

    def _tell(self, topic: str, index: int, partition: Partition | None) -> None:
        for listener in self.partition_listeners:
            listener(topic, index, partition)

    def _open(self, topic: str, index: int, is_new: bool) -> Partition:
        existing = self.logs.get(topic, index)
        if is_new and existing is not None and existing.log_end_offset > 0:
            log.warning("%s-%d: created anew but %d offsets are on disk from an older topic of "
                        "that name; deleting them", topic, index, existing.log_end_offset)
            self.logs.delete_log(topic, index)
        settings = self.topic_configs.get(topic)
        opened = self.logs.get_or_create(topic, index, settings.log)
        self.logs.reconfigure(topic, index, settings.log)  # a log opened at start: defaults
        opened.auto_flush = False
        partition = Partition(topic, index, self.broker_id, opened, self.clock,
                              min_insync_replicas=settings.min_insync_replicas,
                              on_isr_candidate=self.on_isr_candidate)
        self.partitions[(topic, index)] = partition
        return partition

    def forget_unlisted(self, listed: Iterable[TopicPartition], generation: int,
                        controller_epoch: int) -> list[TopicPartition]:
        """After the first LeaderAndIsr of (generation, controller epoch): delete what it did
        not list. Later ones are deltas and delete nothing. Returns what was deleted."""
        if self.synced_at == (generation, controller_epoch):
            return []
        self.synced_at = (generation, controller_epoch)
        keep = set(listed)
        gone = sorted(tp for tp in set(self.logs.logs) | set(self.partitions) if tp not in keep)
        for topic, index in gone:
            log.warning("%s-%d: not in the first LeaderAndIsr of generation %d (controller epoch "
                        "%d): no longer ours, deleting it", topic, index, generation,
                        controller_epoch)
            self._remove(topic, index, delete=True)
        return gone

    # ------------------------------------------------------------------------- StopReplica
    def stop_replica(self, topic: str, index: int, leader_epoch: int, delete: bool) -> int:
        partition = self.partitions.get((topic, index))
        if (partition is not None and leader_epoch not in NO_EPOCH_CHECK
                and leader_epoch < partition.leader_epoch):
            log.warning("%s: StopReplica at leader epoch %d refused, ours is %d "
                        "(FENCED_LEADER_EPOCH)", partition.name, leader_epoch,
                        partition.leader_epoch)
            return ErrorCode.FENCED_LEADER_EPOCH
        self._remove(topic, index, delete)
        log.info("%s-%d: stopped (leader epoch %d)%s", topic, index, leader_epoch,
                 ", deleted" if delete else "")
        return 0

    def _remove(self, topic: str, index: int, delete: bool) -> None:
        partition = self.partitions.pop((topic, index), None)
        if partition is not None:
            partition.role = Role.OFFLINE
            self.poke((topic, index))
        self._tell(topic, index, None)  # before a delete: no fetcher may touch the log after
        if delete:
            self.logs.delete_log(topic, index)
            if not any(t == topic for t, _ in [*self.partitions, *self.logs.logs]):
                self.topic_configs.forget(topic)

    # ---------------------------------------------------------------------- generation end
    def resign_all(self, why: str) -> int:
        """Stop leading everything (our generation is over); the number resigned."""
        resigned = [tp for tp, p in self.partitions.items() if p.resign(why)]
        for tp in resigned:
            self.poke(tp)
        return len(resigned)

    # ------------------------------------------------------------------------------ storage
    async def flush_due_logs(self) -> None:
        """fsync every log whose flush is due, on an executor thread, one log at a time."""
        loop = asyncio.get_running_loop()
        for each in list(self.logs.logs.values()):
            if each.flush_due():
                job = each.begin_flush()
                await loop.run_in_executor(None, job.run)
                each.end_flush(job)

    def close(self) -> None:
        """Clean shutdown: flush, checkpoints, the clean-shutdown marker (LogManager.close)."""
        for partition in self.partitions.values():
            partition.role = Role.OFFLINE
        self.produce_purgatory.poke_all()
        self.fetch_purgatory.poke_all()
        self.logs.close()
