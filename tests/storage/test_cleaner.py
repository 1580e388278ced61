"""Key-based compaction on real logs in tmp dirs (broker/storage/cleaner.py): the latest value per
key survives at its own offset, tombstones live delete_retention_ms past their first cleaning
(injected clock), a tiny offset map cleans in several passes, compressed batches keep their codec,
idempotent producer state and the leader epoch cache answer the same before and after (and after
reopening), a follower copies a compacted leader, and an interrupted swap is completed or
discarded on open."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from epochlog.broker.storage import InvalidRecord, LogConfig, LogManager
from epochlog.broker.storage.cleaner import OFFSET_MAP_ENTRY_BYTES, CleanerSettings, LogCleaner
from epochlog.broker.storage.segment_swap import CLEANED_SUFFIX, SWAP_SUFFIX, segment_paths
from epochlog.protocol.batch import read_header
from epochlog.protocol.compression import Compression
from epochlog.protocol.records import build_batch, decode_batches

from .helpers import FakeClock

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
NEVER = 2**63 - 1
COMPACT = LogConfig(segment_bytes=1024, index_interval_bytes=128, segment_index_bytes=4096,
                    flush_ms=NEVER, cleanup_policy="compact", delete_retention_ms=10_000)


class Compacted:
    """A data dir with one compacted log t-0 and its cleaner."""

    def __init__(self, tmp_path, config: LogConfig = COMPACT, clock: FakeClock | None = None,
                 settings: CleanerSettings | None = None) -> None:
        self.dir = str(tmp_path / "data")
        self.config = config
        self.clock = clock or FakeClock()
        self.settings = settings or CleanerSettings()
        self.open(clean=True)

    def open(self, clean: bool) -> None:
        self.manager = LogManager.open(self.dir, self.config, self.clock, broker_id=1,
                                       cluster_id="c", configs={"t": self.config})
        if not clean:
            assert not self.manager.had_clean_shutdown
        self.log = self.manager.get_or_create("t", 0, self.config)
        self.cleaner = LogCleaner(self.manager, self.settings, self.clock)

    def crash_and_reopen(self) -> None:
        """Drop everything without a clean shutdown (what stays is in the page cache)."""
        for each in self.manager.logs.values():
            each.close()
        self.open(clean=False)

    def put(self, pairs, epoch: int = 0, compression: int = Compression.NONE, **producer) -> None:
        ts = self.clock()
        batch = build_batch([(k, v, None, ts) for k, v in pairs], compression=compression,
                            **producer)
        self.log.append_as_leader(batch, epoch)
        self.log.update_high_watermark(self.log.log_end_offset)

    def clean_all(self) -> int:
        passes = 0
        while self.cleaner.clean_once():
            passes += 1
            assert passes < 100, "the cleaner does not stop"
        return passes


def records_of(log) -> list[tuple[int, bytes | None, bytes | None]]:
    """(offset, key, value) of every record from the log start, read through Log.read."""
    out = []
    offset = log.log_start_offset
    while offset < log.log_end_offset:
        data = log.read(offset, 1 << 20)
        if not data:
            break
        for header, records in decode_batches(data):
            out.extend((r.offset, r.key, r.value) for r in records if r.offset >= offset)
            offset = header.next_offset
    return out


def headers_of(log) -> list:
    out, offset = [], log.log_start_offset
    while offset < log.log_end_offset:
        for header, _ in decode_batches(log.read(offset, 1 << 20)):
            out.append(header)
            offset = header.next_offset
    return out


def latest(records) -> dict[bytes, bytes | None]:
    out = {}
    for _, key, value in records:
        out[key] = value
    return out


def updates(c: Compacted, rounds: int, keys: int = 5, **kwargs) -> None:
    for r in range(rounds):
        c.put([(b"k%d" % (r % keys), b"v%d" % r + b"." * 40)], **kwargs)


def test_only_the_latest_record_per_key_is_kept_at_its_offset(tmp_path):
    c = Compacted(tmp_path)
    updates(c, 200)
    before = records_of(c.log)
    ends = (c.log.log_start_offset, c.log.log_end_offset, c.log.size_bytes)
    assert c.clean_all() >= 1
    after = records_of(c.log)
    assert latest(after) == latest(before)
    assert set(after) <= set(before), "a record changed its offset or value"
    active_base = c.log.active_segment.base_offset
    closed = [r for r in after if r[0] < active_base]
    assert len({k for _, k, _ in closed}) == len(closed), "an older value survived"
    assert (c.log.log_start_offset, c.log.log_end_offset) == ends[:2]
    assert c.log.size_bytes < ends[2] / 3
    c.manager.close()
    c.open(clean=True)
    assert records_of(c.log) == after
    c.crash_and_reopen()
    assert records_of(c.log) == after
    c.put([(b"k0", b"new")])
    assert latest(records_of(c.log))[b"k0"] == b"new"


def test_the_active_segment_and_segments_above_the_high_watermark_stay(tmp_path):
    c = Compacted(tmp_path)
    updates(c, 100)
    c.log.update_high_watermark(c.log.segments[2].base_offset)
    c.clean_all()
    for segment in c.log.segments[2:]:
        offsets = [r[0] for r in records_of(c.log) if r[0] >= segment.base_offset]
        assert offsets[0] == segment.base_offset, "a segment above the high watermark changed"


def test_an_aborted_transaction_never_hides_a_committed_value(tmp_path):
    """Records of an aborted transaction neither win the offset map nor stay (Kafka's rule):
    compacted, the key keeps its committed value; and an open transaction holds the cleaning
    below its first offset, since it may yet abort."""
    from epochlog.protocol.control_records import marker_batch

    c = Compacted(tmp_path)
    c.put([(b"k", b"committed" + b"." * 40)])
    pid = 77
    c.put([(b"k", b"aborted" + b"." * 40)], producer_id=pid, producer_epoch=0,
          base_sequence=0, is_transactional=True)
    c.log.append_as_leader(marker_batch(False, pid, 0, 0, c.clock()), 0)
    updates(c, 60, keys=3)  # other keys, so that segments roll past the transaction
    c.log.update_high_watermark(c.log.log_end_offset)
    c.clean_all()
    values = {v for _, k, v in records_of(c.log) if k == b"k"}
    assert values == {b"committed" + b"." * 40}, values
    # an open transaction: nothing from its first offset on is cleaned
    c.put([(b"o", b"open" + b"." * 40)], producer_id=pid + 1, producer_epoch=0,
          base_sequence=0, is_transactional=True)
    open_at = c.log.log_end_offset - 1
    updates(c, 60, keys=3)
    c.log.update_high_watermark(c.log.log_end_offset)
    assert c.log.last_stable_offset == open_at
    c.clean_all()
    above = [r for r in records_of(c.log) if r[0] >= open_at]
    assert len(above) == c.log.log_end_offset - open_at, "a segment above the LSO was cleaned"


def test_min_compaction_lag_keeps_new_segments_dirty(tmp_path):
    clock = FakeClock()
    c = Compacted(tmp_path, LogConfig(**{**_fields(COMPACT), "min_compaction_lag_ms": 5000}),
                  clock)
    updates(c, 100)
    assert c.clean_all() == 0
    clock.advance(6000)
    assert c.clean_all() >= 1


def _fields(config: LogConfig) -> dict:
    return {name: getattr(config, name) for name in config.__struct_fields__}


def test_tombstones_live_delete_retention_ms_after_their_first_cleaning(tmp_path):
    clock = FakeClock()
    c = Compacted(tmp_path, clock=clock)
    c.put([(b"gone", b"value")])
    c.put([(b"gone", None)])
    updates(c, 100)
    c.clean_all()
    assert (b"gone", None) in latest(records_of(c.log)).items()
    assert b"value" not in [v for _, _, v in records_of(c.log)]
    clock.advance(9_000)
    updates(c, 100)  # more dirty data: a pass, but the horizon is not reached
    c.clean_all()
    assert b"gone" in latest(records_of(c.log))
    clock.advance(2_000)  # past the horizon: the tombstone alone makes the log due
    assert c.clean_all() == 1
    assert b"gone" not in latest(records_of(c.log))
    c.crash_and_reopen()
    assert b"gone" not in latest(records_of(c.log))


def test_a_tiny_offset_map_cleans_in_several_passes(tmp_path):
    settings = CleanerSettings(offset_map_bytes_max=OFFSET_MAP_ENTRY_BYTES * 4)
    eager = LogConfig(**{**_fields(COMPACT), "min_cleanable_dirty_ratio": 0.0})
    c = Compacted(tmp_path, eager, settings=settings)
    updates(c, 120, keys=20)
    before = records_of(c.log)
    passes = c.clean_all()
    assert passes > 2, passes
    after = records_of(c.log)
    assert latest(after) == latest(before)
    closed = [r for r in after if r[0] < c.log.active_segment.base_offset]
    assert len({k for _, k, _ in closed}) == len(closed)


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4,
                                   Compression.ZSTD])
def test_compressed_batches_are_rewritten_with_their_codec(tmp_path, codec):
    c = Compacted(tmp_path)
    for r in range(40):
        c.put([(b"k%d" % ((r + i) % 6), b"v%d-%d" % (r, i) + b"." * 30) for i in range(4)],
              compression=codec)
    before = records_of(c.log)
    c.clean_all()
    after = records_of(c.log)
    assert latest(after) == latest(before) and set(after) <= set(before)
    assert {h.compression for h in headers_of(c.log) if h.record_count} == {codec}
    assert len(after) < len(before)


def test_idempotent_producer_state_survives_compaction_and_recovery(tmp_path):
    c = Compacted(tmp_path)
    sequence = 0
    for r in range(30):
        c.put([(b"p%d" % (r % 3), b"x" * 60)], producer_id=7, producer_epoch=0,
              base_sequence=sequence)
        sequence += 1
    last_producer_batch = c.log.log_end_offset - 1
    updates(c, 100, keys=3, )  # keys k0..k2 only: the producer's keys p0..p2 stay
    c.put([(b"p2", b"overwritten by a plain producer")])
    updates(c, 60, keys=3)
    state_before = dict(c.log.producer_state.producers)
    c.clean_all()
    assert c.log.producer_state.producers == state_before
    # the producer's last batch lost its record but stays, empty, with its sequence
    mine = [h for h in headers_of(c.log) if h.producer_id == 7]
    assert mine[-1].last_offset == last_producer_batch and mine[-1].record_count == 0
    c.crash_and_reopen()
    assert c.log.producer_state.last_sequence(7) == sequence - 1
    retry = build_batch([(b"p2", b"x" * 60, None, 1)], producer_id=7, producer_epoch=0,
                        base_sequence=sequence - 1)
    assert c.log.append_as_leader(retry, 0).duplicate
    nxt = build_batch([(b"p2", b"next", None, 1)], producer_id=7, producer_epoch=0,
                      base_sequence=sequence)
    assert not c.log.append_as_leader(nxt, 0).duplicate


def test_the_epoch_cache_answers_the_same_after_compaction(tmp_path):
    c = Compacted(tmp_path)
    for epoch in range(5):
        c.log.begin_leader_epoch(epoch)
        updates(c, 30, keys=4, epoch=epoch)  # later epochs overwrite every key of epoch 1
    answers = {e: c.log.end_offset_for_epoch(e) for e in range(-1, 7)}
    entries = c.log.epoch_cache.entries
    c.clean_all()
    assert {r[0] for r in records_of(c.log)} < set(range(30, 60)) | set(range(90, 150))
    assert c.log.epoch_cache.entries == entries
    assert {e: c.log.end_offset_for_epoch(e) for e in range(-1, 7)} == answers
    c.crash_and_reopen()
    assert c.log.epoch_cache.entries == entries
    assert {e: c.log.end_offset_for_epoch(e) for e in range(-1, 7)} == answers


def test_a_compacted_topic_refuses_records_without_a_key(tmp_path):
    c = Compacted(tmp_path)
    with pytest.raises(InvalidRecord, match="without a key"):
        c.log.append_as_leader(build_batch([(b"k", b"v", None, 1), (None, b"v", None, 1)]), 0)
    assert c.log.log_end_offset == 0
    plain = LogManager.open(str(tmp_path / "plain"), LogConfig(), FakeClock(), broker_id=1,
                            cluster_id="c").get_or_create("t", 0)
    plain.append_as_leader(build_batch([(None, b"v", None, 1)]), 0)


def test_a_follower_copies_a_compacted_leader_with_its_gaps(tmp_path):
    leader = Compacted(tmp_path / "leader")
    for epoch in range(3):
        leader.log.begin_leader_epoch(epoch)
        updates(leader, 80, keys=4, epoch=epoch)
    leader.clean_all()
    follower = Compacted(tmp_path / "follower")
    offset = 0
    while offset < leader.log.log_end_offset:
        data = leader.log.read(offset, 300)
        follower.log.append_as_follower(data)
        offset = follower.log.log_end_offset
    assert records_of(follower.log) == records_of(leader.log)
    follower.crash_and_reopen()  # recovery accepts the gaps (the log says it may hold them)
    assert records_of(follower.log) == records_of(leader.log)


def test_an_uncompacted_log_still_refuses_gaps(tmp_path):
    plain = LogManager.open(str(tmp_path / "plain"), LogConfig(), FakeClock(), broker_id=1,
                            cluster_id="c").get_or_create("t", 0)
    from epochlog.broker.storage import OffsetsNotIncreasing
    with pytest.raises(OffsetsNotIncreasing):
        plain.append_as_follower(build_batch([(b"k", b"v", None, 1)], base_offset=5))


def _pass_without_swap(c: Compacted):
    job = c.cleaner.choose()
    assert job is not None
    result = job.run()
    assert result.error is None and result.groups
    return result


def test_an_interrupted_clean_before_the_swap_is_discarded(tmp_path):
    c = Compacted(tmp_path)
    updates(c, 150)
    before = records_of(c.log)
    result = _pass_without_swap(c)
    base = result.groups[0].base_offset
    assert all(os.path.exists(p) for p in segment_paths(c.log.directory, base, CLEANED_SUFFIX))
    c.crash_and_reopen()
    assert records_of(c.log) == before
    assert not [n for n in os.listdir(c.log.directory) if n.endswith(CLEANED_SUFFIX)]


@pytest.mark.parametrize("step", ["swap", "some old deleted", "index renamed"])
def test_an_interrupted_swap_is_completed(tmp_path, step):
    c = Compacted(tmp_path)
    updates(c, 150)
    before = records_of(c.log)
    result = _pass_without_swap(c)
    group = result.groups[0]
    directory = c.log.directory
    for source, target in zip(segment_paths(directory, group.base_offset, CLEANED_SUFFIX),
                              segment_paths(directory, group.base_offset, SWAP_SUFFIX),
                              strict=True):
        os.rename(source, target)
    if step == "some old deleted":
        for path in segment_paths(directory, group.views[0].base_offset):
            if os.path.exists(path):  # a .txnindex only where a transaction was aborted
                os.rename(path, path + ".deleted")
    if step == "index renamed":
        swapped = segment_paths(directory, group.base_offset, SWAP_SUFFIX)
        final = segment_paths(directory, group.base_offset)
        os.replace(swapped[1], final[1])
    c.crash_and_reopen()
    after = records_of(c.log)
    assert latest(after) == latest(before)
    cleaned_end = group.next_offset
    old_part = [r for r in before if r[0] < cleaned_end]
    new_part = [r for r in after if r[0] < cleaned_end]
    assert len(new_part) < len(old_part), "the cleaned segment was not swapped in"
    assert [r for r in after if r[0] >= cleaned_end] == [r for r in before if r[0] >= cleaned_end]
    assert not [n for n in os.listdir(directory) if n.endswith((".swap", ".deleted"))]
    for segment in c.log.segments:
        for key, position in segment.offset_index.entries():
            assert segment.header_at(position).last_offset == key


def test_a_pass_on_a_log_truncated_meanwhile_is_abandoned(tmp_path):
    c = Compacted(tmp_path)
    updates(c, 150)
    job = c.cleaner.choose()
    result = job.run()
    c.log.truncate_to(c.log.segments[1].base_offset + 1)
    before = records_of(c.log)
    assert not c.cleaner.finish(job, result)
    assert records_of(c.log) == before
    assert not [n for n in os.listdir(c.log.directory) if n.endswith(CLEANED_SUFFIX)]


def test_cleaned_segments_group_and_index(tmp_path):
    c = Compacted(tmp_path)
    updates(c, 300)
    c.clean_all()  # full segments: one each, shrunk
    clean_end = c.cleaner.first_dirty[("t", 0)]
    shrunk = [s for s in c.log.segments if s.next_offset <= clean_end]
    updates(c, 300)
    c.clean_all()  # the shrunk ones group
    grouped = [s for s in c.log.segments if s.next_offset <= clean_end]
    assert len(grouped) < len(shrunk) / 3, "cleaned segments were not grouped"
    for segment in c.log.segments:
        for key, position in segment.offset_index.entries():
            assert segment.header_at(position).last_offset == key
    for offset in range(0, c.log.log_end_offset, 7):
        data = c.log.read(offset, 1)
        assert read_header(data).last_offset >= offset


# --- SIGKILL in the middle of cleaning (a real child process) ---

CRASH_RUNS = 8


def run_cleaner_child(data_dir: str, seed: int, rng: random.Random) -> int:
    """Start the child, SIGKILL it at a random moment; how many records it had fsynced."""
    child = subprocess.Popen([sys.executable, "-m", "tests.storage.cleaner_crash_child",
                              data_dir, str(seed)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    assert child.stdout.readline().strip() == "ready"
    time.sleep(rng.uniform(0.05, 0.4))
    child.send_signal(signal.SIGKILL)
    child.wait()
    flushed = 0
    for line in child.stdout.read().splitlines():
        if line.startswith("flushed "):
            flushed = int(line.split()[1])
    child.stdout.close()
    return flushed


def check_after_crash(data_dir: str, flushed: int) -> int:
    """Every record read back is one that was written, at its own offset; every key's latest
    value is at least as new as the last fsynced one; no half swap is left. Records read."""
    from .cleaner_crash_child import KEYS, open_manager
    manager = open_manager(data_dir)
    log = manager.get("t", 0)
    records = records_of(log)
    for offset, key, value in records:
        n = int(value.split(b":")[0])
        assert (n, key) == (offset, b"k%d" % (offset % KEYS)), "a record that was never written"
    assert [r[0] for r in records] == sorted({r[0] for r in records})
    newest = {key: int(value.split(b":")[0]) for _, key, value in records}
    for i in range(min(KEYS, flushed)):
        last_flushed = max(n for n in range(flushed) if n % KEYS == i)
        assert newest[b"k%d" % i] >= last_flushed, f"key k{i} lost its value {last_flushed}"
    for segment in log.segments:
        for key, position in segment.offset_index.entries():
            assert segment.header_at(position).last_offset == key
    leftovers = [n for n in os.listdir(log.directory) if n.endswith((".cleaned", ".swap",
                                                                     ".deleted"))]
    assert not leftovers
    for each in manager.logs.values():
        each.close()  # no clean shutdown: the next child recovers again
    return len(records)


def test_sigkill_mid_clean_leaves_old_or_cleaned_segments_never_a_mix(tmp_path):
    rng = random.Random(20240607)
    data_dir = str(tmp_path / "data")
    flushed = 0
    for _ in range(CRASH_RUNS):
        flushed = max(flushed, run_cleaner_child(data_dir, rng.randrange(2**32), rng))
        kept = check_after_crash(data_dir, flushed)
    assert flushed > 0 and kept < flushed, "nothing was compacted"
