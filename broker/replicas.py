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
- Topic settings (topic_configs.py) come in the control requests (`take_topic_settings`): a
  LeaderAndIsr's before its partition states, so a log is created, or an existing one
  reconfigured, with its topic's settings, and the partition keeps the topic's
  min.insync.replicas; an UpdateMetadata's for the topics we hold. A change is put into force on
  the open partitions at once.

Corrupt data found on read (Kafka's log-dir failure handling, per partition): `storage_failed`
cuts our log before the damage (everything after it is fetched again from the leader) and takes
the replica offline: it neither leads nor follows, LeaderAndIsr answers KAFKA_STORAGE_ERROR for
it, and every heartbeat lists it (`offline_dir_ids`, BrokerHeartbeat's offline_log_dirs) until
the controller has acted: elected another leader from the ISR, or taken us out of the ISR, or
left the partition without a leader (we were its last in-sync replica). The first such newer
state brings the replica back (a follower, or waiting for the election the controller then holds,
since it is still the last ISR member). A follower outside the ISR needs no controller: it is
cut and follows again at once. Cutting committed records is recorded (truncations.py): a loss
only when no other replica holds them. A log whose recovery at start cut committed records
(`LogManager.cut_at_open`) starts offline the same way: its first heartbeat lists it.

Flushing: logs do not fsync on the append path (`auto_flush` off); `flush_due_logs` runs their
fsyncs on an executor thread (storage's FlushJob) so the event loop never waits on a disk. A
topic may be deleted while a job runs (librdkafka's test 0081 deletes topics fast): a log deleted
by then is skipped, and one deleted under its own job (its folder renamed away) is no failed
fsync; neither is counted against the data dir.
Everything else runs on the event loop, which owns all of this state.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping

from epochlog.protocol.apis.broker_heartbeat import replica_dir_id
from epochlog.protocol.error_codes import ErrorCode

from .partition import NO_LEADER, InvalidPartitionState, Partition, PartitionState, Role
from .purgatory import Purgatory
from .storage import CorruptLog, DescriptorsExhausted, DiskWriteFailed, LogManager
from .storage.descriptors import is_exhaustion
from .topic_configs import TopicConfigs

log = logging.getLogger("epochlog.broker")


class FsyncFailed(Exception):
    """An fsync of log data failed: the broker stops (storage/disk_health.py says why)."""

TopicPartition = tuple[str, int]
PartitionListener = Callable[[str, int, "Partition | None"], None]
NO_EPOCH_CHECK = (-1, -2)  # StopReplica leader epochs that skip the check
# Cutting a damaged log may meet more damage before the cut (the producer state is rebuilt from
# the batch headers that remain): this many cuts at most, then the replica stays offline.
REPAIR_CUTS_MAX = 8
RETRY_OPEN_MAX = 200  # partitions whose open is retried per storage tick (retry_unopened)


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
        # Replicas offline after a storage error -> whether their log was repaired (cut before
        # the damage); see the module notes. on_offline_change: the list changed (the
        # controller link heartbeats at once).
        self.offline: dict[TopicPartition, bool] = dict.fromkeys(sorted(logs.cut_at_open), True)
        # partitions whose log could not be opened for want of descriptors: the state to apply
        # once one is free (retry_unopened), rather than at the next control request naming them
        self.unopened: dict[TopicPartition, tuple[PartitionState, bool]] = {}
        self.on_offline_change: Callable[[], None] | None = None
        for topic, index in self.offline:
            log.warning("%s-%d: recovery at start cut committed records: offline until the "
                        "controller has taken this replica out of the ISR", topic, index)
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

    # ---------------------------------------------------------------------- topic settings
    def take_topic_settings(self, carried: Mapping[str, Mapping[str, str]], *,
                            held_only: bool = False) -> int:
        """The settings a control request carried, by topic (the controller's decided values):
        kept (topic_configs.py) and put into force on our open partitions of the topics whose
        settings changed. held_only: only the topics whose settings we keep already, which are
        those we hold (the LeaderAndIsr that placed them here carried them): UpdateMetadata tells
        every broker of every change, while a LeaderAndIsr's topics are about to be opened here.
        How many open partitions changed."""
        changed = {topic for topic, settings in carried.items()
                   if (not held_only or self.topic_configs.knows(topic))
                   and self.topic_configs.take(topic, settings)}
        return self._put_in_force(changed) if changed else 0

    def _put_in_force(self, topics: set[str]) -> int:
        """The settings these topics have now, on their open partitions: each log's LogConfig,
        each partition's min.insync.replicas. How many partitions changed."""
        changed = 0
        for (topic, index), partition in list(self.partitions.items()):
            if topic not in topics:
                continue
            settings = self.topic_configs.get(topic)
            moved = self.logs.reconfigure(topic, index, settings.log)
            if partition.min_insync_replicas != settings.min_insync_replicas:
                partition.set_min_insync_replicas(settings.min_insync_replicas)
                self.poke((topic, index))  # acks=all waiters: the rule they wait on changed
                moved = True
            changed += moved
        return changed

    # ------------------------------------------------------------------------ LeaderAndIsr
    def apply_partition_state(self, topic: str, index: int, state: PartitionState,
                              is_new: bool) -> int:
        """One partition of a LeaderAndIsr: 0 (also for the state already in force),
        STALE_CONTROLLER_EPOCH if older,
        INVALID_REQUEST for a state that breaks the partition's invariants (logged), or
        KAFKA_STORAGE_ERROR for a log the disk refuses to create."""
        partition = self.partitions.get((topic, index))
        self.unopened.pop((topic, index), None)  # this state supersedes one kept to retry
        if partition is None:
            try:
                partition = self._open(topic, index, is_new)
            except OSError as exc:  # its folder or files cannot be made (a full disk)
                self.logs.disk.failed(f"a log for {topic}-{index}", exc)
                if is_exhaustion(exc):  # not the disk's fault: tried again once one is free
                    if not self.unopened:  # one line as the first starts to wait
                        log.warning("%s-%d: its log found no file descriptor; it and any more "
                                    "that find none wait for one", topic, index)
                    self.unopened[(topic, index)] = (state, is_new)
                return ErrorCode.KAFKA_STORAGE_ERROR
        elif partition.state is not None and (state.leader_epoch, state.partition_epoch) == (
                partition.state.leader_epoch, partition.state.partition_epoch):
            # The state in force already: the answer to an AlterPartition of ours brought it
            # first (the ISR manager adopts the controller's newer state). Nothing to do.
            log.debug("%s: LeaderAndIsr at leader epoch %d partition epoch %d already in force",
                      partition.name, state.leader_epoch, state.partition_epoch)
            return 0
        elif not state.newer_than(partition.state):
            log.warning("%s: kept leader epoch %d partition epoch %d; LeaderAndIsr named %d/%d "
                        "(STALE_CONTROLLER_EPOCH)", partition.name, partition.leader_epoch,
                        partition.state.partition_epoch if partition.state else -1,
                        state.leader_epoch, state.partition_epoch)
            return ErrorCode.STALE_CONTROLLER_EPOCH
        if (topic, index) in self.offline and not self._back_online(partition, state):
            return ErrorCode.KAFKA_STORAGE_ERROR
        try:
            partition.apply(state)
        except InvalidPartitionState as exc:
            log.error("refused a LeaderAndIsr partition state: %s", exc)
            return ErrorCode.INVALID_REQUEST
        self.poke((topic, index))
        self._tell(topic, index, partition)
        return 0

    # ------------------------------------------------------------------ storage failures
    def offline_dir_ids(self) -> list[uuid.UUID]:
        """What a heartbeat's offline_log_dirs lists: our offline replicas' directory ids."""
        return [replica_dir_id(topic, index) for topic, index in sorted(self.offline)]

    def storage_failed(self, partition: Partition, exc: CorruptLog) -> None:
        """A read found corrupt data in partition's log: cut the log before it and take the
        replica offline until the controller has acted (module notes). One ERROR line."""
        tp = (partition.topic, partition.index)
        if tp in self.offline or self.partitions.get(tp) is not partition:
            return
        in_isr = self.broker_id in partition.isr and partition.leader_id != NO_LEADER
        needs_controller = partition.is_leader or in_isr
        log.error("%s: corrupt data on disk, not served: %s; cutting the log there, %s",
                  partition.name, exc,
                  "offline until the controller moves leadership and the ISR off this replica"
                  if needs_controller else "then following the leader again")
        was = partition.take_offline("a storage error")
        repaired = self._cut_damage(partition, exc)
        if not repaired:
            log.error("%s: the damage could not be cut off; the replica stays offline",
                      partition.name)
        if repaired and not needs_controller and was is Role.FOLLOWER:
            partition.follow_again()
        else:
            self.offline[tp] = repaired
            if self.on_offline_change is not None:
                self.on_offline_change()
        self.poke(tp)
        self._tell(partition.topic, partition.index, partition)

    def _cut_damage(self, partition: Partition, exc: CorruptLog) -> bool:
        """Truncate the log to where it is intact (fetched again from a leader later). False
        when no place to cut is known or the cuts keep meeting damage."""
        cut = exc.cut_offset
        for _ in range(REPAIR_CUTS_MAX):
            if cut is None:
                return False
            try:
                partition.truncate_to(cut, why="damaged data cut off (fetched again from "
                                      "another replica; lost if none holds it)")
                return True
            except CorruptLog as more:
                cut = more.cut_offset if more.cut_offset is not None and more.cut_offset < cut \
                    else None
        return False

    def _back_online(self, partition: Partition, state: PartitionState) -> bool:
        """An offline replica and a newer state: True (and no longer offline) once that state
        shows the controller acted (leadership and ISR off us, or no leader at all)."""
        tp = (partition.topic, partition.index)
        acted = state.leader == NO_LEADER or (
            state.leader != self.broker_id and self.broker_id not in state.isr)
        if not acted or not self.offline[tp]:
            return False
        del self.offline[tp]
        log.info("%s: replica online again at leader epoch %d (leader %d, isr %s)",
                 partition.name, state.leader_epoch, state.leader, list(state.isr))
        if self.on_offline_change is not None:
            self.on_offline_change()
        return True

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
                              on_isr_candidate=self.on_isr_candidate,
                              on_corrupt=self.storage_failed)
        partition.set_min_insync_replicas(settings.min_insync_replicas)
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
    def stop_replica(self, topic: str, index: int, leader_epoch: int, delete: bool, *,
                     forget_topic: bool = True) -> int:
        """Stop serving (and with delete, delete) one replica; an error code. forget_topic
        False: the caller forgets the topics left without replicas once its request is done
        (`forget_unused_topics`), as looking at every replica per partition costs O(n^2) for
        a request naming thousands."""
        partition = self.partitions.get((topic, index))
        if (partition is not None and leader_epoch not in NO_EPOCH_CHECK
                and leader_epoch < partition.leader_epoch):
            log.warning("%s: StopReplica at leader epoch %d refused, ours is %d "
                        "(FENCED_LEADER_EPOCH)", partition.name, leader_epoch,
                        partition.leader_epoch)
            return ErrorCode.FENCED_LEADER_EPOCH
        self.unopened.pop((topic, index), None)
        self._remove(topic, index, delete, forget_topic=forget_topic)
        log.info("%s-%d: stopped (leader epoch %d)%s", topic, index, leader_epoch,
                 ", deleted" if delete else "")
        return 0

    def retry_unopened(self, count_max: int = RETRY_OPEN_MAX) -> int:
        """Apply again, up to count_max, the states whose logs found no descriptor; stops at
        the first that still finds none. How many are served now."""
        opened = 0
        for (topic, index), (state, is_new) in list(self.unopened.items())[:count_max]:
            if self.apply_partition_state(topic, index, state, is_new) != 0:
                break  # still none free (kept again by apply_partition_state), or refused
            opened += 1
        if opened:
            log.info("opened %d partition log(s) that had found no file descriptor; %d still "
                     "wait for one", opened, len(self.unopened))
        return opened

    def forget_unused_topics(self, topics: set[str]) -> None:
        """Forget the settings of each of topics that no replica or log here holds any more."""
        held = {t for t, _ in self.partitions} | {t for t, _ in self.logs.logs}
        for topic in topics - held:
            self.topic_configs.forget(topic)

    def _remove(self, topic: str, index: int, delete: bool, *, forget_topic: bool = True
                ) -> None:
        if self.offline.pop((topic, index), None) is not None and self.on_offline_change:
            self.on_offline_change()
        partition = self.partitions.pop((topic, index), None)
        if partition is not None:
            partition.go_offline("stopped here")
            self.poke((topic, index))
        self._tell(topic, index, None)  # before a delete: no fetcher may touch the log after
        if delete:
            self.logs.delete_log(topic, index)
            if forget_topic:
                self.forget_unused_topics({topic})

    # ---------------------------------------------------------------------- generation end
    def resign_all(self, why: str) -> int:
        """Stop leading everything (our generation is over); the number resigned. States kept
        to retry an open are dropped: they were the old generation's (the next generation's
        first LeaderAndIsr names what is ours)."""
        self.unopened.clear()
        resigned = [tp for tp, p in self.partitions.items() if p.resign(why)]
        for tp in resigned:
            self.poke(tp)
        return len(resigned)

    # ------------------------------------------------------------------------------ storage
    async def flush_due_logs(self) -> None:
        """fsync every log whose flush is due, on an executor thread, one log at a time."""
        loop = asyncio.get_running_loop()
        for each in self.logs.unflushed():  # only logs with something to flush: not all
            if each.deleted:  # its topic went while an earlier job ran: nothing to flush
                continue
            if each.flush_due():
                try:
                    job = each.begin_flush()
                except (DiskWriteFailed, DescriptorsExhausted):  # index entries not written
                    continue  # out, or no descriptor: counted or said, tried again
                try:
                    await loop.run_in_executor(None, job.run)
                except OSError as exc:
                    if is_exhaustion(exc):  # opening a folder to fsync it: no fsync failed
                        each.flush_not_done(job, exc)
                        continue
                    if each.deleted:  # deleted under its job (its folder renamed away): what
                        log.info("%s: deleted while it was flushed (%s)", each.directory, exc)
                        continue      # was written is gone on purpose, no fsync failed
                    raise FsyncFailed(f"fsync in {each.directory} failed ({exc}): what was "
                                      "written may not be on disk, so the broker stops; the "
                                      "next start recovers the log from its last flush") from exc
                each.end_flush(job)

    def close(self, broker_epoch: int = -1) -> None:
        """Clean shutdown: flush, checkpoints, the clean-shutdown marker naming our generation
        (LogManager.close)."""
        for partition in self.partitions.values():
            partition.go_offline("the broker is closing")
        self.produce_purgatory.poke_all()
        self.fetch_purgatory.poke_all()
        self.logs.close(broker_epoch)
