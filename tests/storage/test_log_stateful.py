"""Random appends, reads, rolls, truncations, log start moves, retention and reopenings (clean and
after a crash) of a real Log, checked after every step against a plain in-memory model: a list of
the batches, stamped as the leader stamps them."""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from epochlog.protocol.batch import check_all, read_header, shift_offsets

from .helpers import SMALL, FakeClock, make_batch, open_log, read_all


class LogMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp()
        self.path = f"{self.dir}/t-0"
        self.clock = FakeClock()
        self.log = open_log(self.path, SMALL, self.clock)
        self.batches: list[tuple[int, int, int, bytes]] = []  # base, last, epoch, bytes
        self.log_start = 0
        self.epoch = 0
        self.tag = 0

    @property
    def log_end(self) -> int:
        return self.batches[-1][1] + 1 if self.batches else self.log.segments[0].base_offset

    def live(self):
        return [b for b in self.batches if b[1] >= self.log_start]

    @rule(count=st.integers(1, 6), value_bytes=st.integers(0, 300), bump=st.booleans())
    def append(self, count, value_bytes, bump):
        self.epoch += bump
        self.tag += 1
        self.clock.advance(7)
        raw = make_batch(count, value_bytes=value_bytes, tag=self.tag,
                         timestamp_ms=self.clock.now_ms)
        info = self.log.append_as_leader(raw, self.epoch)
        stamped = bytearray(raw)
        shift_offsets(stamped, info.first_offset, self.epoch)
        expected_first = self.batches[-1][1] + 1 if self.batches else self.log_end
        assert info.first_offset == expected_first
        self.batches.append((info.first_offset, info.last_offset, self.epoch, bytes(stamped)))

    @rule(pick=st.integers(0, 10**6), bytes_max=st.integers(0, 3000))
    def read(self, pick, bytes_max):
        span = self.log_end - self.log_start + 1
        offset = self.log_start + pick % span
        data = self.log.read(offset, bytes_max)
        expected = [b for b in self.live() if b[1] >= offset]
        if not expected:
            assert data == b""
            return
        headers = check_all(data)
        assert data[:headers[0].size] == expected[0][3]
        assert len(data) <= max(bytes_max, headers[0].size)
        assert data == b"".join(b[3] for b in expected[:len(headers)])

    @rule()
    def roll(self):
        self.log.roll()

    @rule(pick=st.integers(0, 10**6))
    def truncate(self, pick):
        target = pick % (self.log_end + 2)
        first_base, old_end = self.log.segments[0].base_offset, self.log_end
        self.log.truncate_to(target)
        if target >= old_end:
            return
        if target < first_base:
            self.batches = []
            self.log_start = target
            assert self.log.log_end_offset == target
            return
        removed = [b for b in self.batches if b[1] >= target]
        self.batches = [b for b in self.batches if b[1] < target]
        assert self.log.log_end_offset == removed[0][0]
        self.log_start = min(self.log_start, self.log.log_end_offset)
        self.epoch = max(self.epoch, self.log.epoch_cache.latest_epoch)

    @rule(pick=st.integers(0, 10**6))
    def advance_start(self, pick):
        target = self.log_start + pick % (self.log_end - self.log_start + 1)
        self.log.update_high_watermark(self.log_end)
        self.log.advance_log_start_offset(target)
        self.log_start = max(self.log_start, target)

    @rule(ms=st.integers(0, 10**8))
    def retention(self, ms):
        self.clock.advance(ms)
        self.log.update_high_watermark(self.log_end)
        old = self.log_start
        self.log.delete_retained_segments()
        assert self.log.log_start_offset >= old
        self.log_start = self.log.log_start_offset
        assert self.log_start == self.log.segments[0].base_offset or self.log_start == old

    @rule(clean=st.booleans())
    def reopen(self, clean):
        if clean:
            self.log.flush()
        recovery_point = self.log.recovery_point
        self.log.close()
        self.log = open_log(self.path, SMALL, self.clock, recovery_point=recovery_point,
                            log_start_offset=self.log_start, clean_shutdown=clean)

    @precondition(lambda self: self.batches)
    @rule(pick=st.integers(0, 10**6))
    def by_timestamp(self, pick):
        timestamps = [(read_header(b[3]).base_timestamp, b) for b in self.live()]
        if not timestamps:
            return
        target = timestamps[0][0] + pick % (timestamps[-1][0] - timestamps[0][0] + 10)
        expected = None
        for base_ts, (base, last, _, _) in timestamps:
            for i in range(last - base + 1):
                if base + i >= self.log_start and base_ts + i >= target:
                    expected = (base + i, base_ts + i)
                    break
            if expected:
                break
        assert self.log.offset_for_timestamp(target) == expected

    @invariant()
    def agrees_with_model(self):
        log = self.log
        assert (log.log_start_offset, log.log_end_offset) == (self.log_start, self.log_end)
        assert [b for _, b in read_all(log)] == [b[3] for b in self.live()]
        entries = []
        for base, _, epoch, _ in self.live():
            if not entries or entries[-1][1] != epoch:
                entries.append((base, epoch))
        if entries and entries[0][0] < self.log_start:
            entries[0] = (self.log_start, entries[0][1])
        assert [(e.start_offset, e.epoch) for e in log.epoch_cache.entries] == entries \
            or self._only_differs_by_empty_epochs(entries)
        for segment in log.segments:
            for offset, position in segment.offset_index.entries():
                assert segment.header_at(position).last_offset == offset
            for _, offset in segment.time_index.entries():
                assert segment.base_offset <= offset < segment.next_offset

    def _only_differs_by_empty_epochs(self, entries):
        # An epoch whose only batches were truncated away stays gone; one assigned at the very
        # log end with no batch yet is allowed to remain (KIP-101 keeps (epoch, log end)).
        got = [(e.start_offset, e.epoch) for e in self.log.epoch_cache.entries]
        return got[:len(entries)] == entries and all(s == self.log_end for s, _ in
                                                      got[len(entries):])

    def teardown(self):
        self.log.close()
        shutil.rmtree(self.dir)


LogMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)
TestLog = LogMachine.TestCase
