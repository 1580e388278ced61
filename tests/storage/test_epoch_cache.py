"""The leader epoch cache against Kafka's rules: the cases of Kafka's own LeaderEpochFileCacheTest,
then random operations checked against a plain restatement of the rules, with every change read
back from the checkpoint file."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from epochlog.broker.storage.epoch_cache import LEADER_EPOCH_FILE, EpochEntry, LeaderEpochCache

E = EpochEntry


def cache_with(tmp_path, *entries: tuple[int, int]) -> LeaderEpochCache:
    cache = LeaderEpochCache.load(str(tmp_path / LEADER_EPOCH_FILE))
    for epoch, offset in entries:
        cache.assign(epoch, offset)
    return cache


def test_latest_epoch_answers_the_log_end(tmp_path):
    cache = cache_with(tmp_path, (2, 10))
    assert cache.end_offset_for(2, 11) == (2, 11)


def test_undefined_epoch_and_empty_cache_answer_undefined(tmp_path):
    assert cache_with(tmp_path).end_offset_for(0, 5) == (-1, -1)
    assert cache_with(tmp_path, (2, 10)).end_offset_for(-1, 11) == (-1, -1)


def test_epoch_above_the_latest_is_undefined(tmp_path):
    assert cache_with(tmp_path, (2, 10)).end_offset_for(3, 11) == (-1, -1)


def test_same_epoch_does_not_move_its_start_forward(tmp_path):
    cache = cache_with(tmp_path, (2, 6), (2, 7))
    assert cache.entries == [E(2, 6)]


def test_same_epoch_at_a_lower_offset_replaces_it(tmp_path):
    cache = cache_with(tmp_path, (1, 0), (2, 6), (2, 4))
    assert cache.entries == [E(1, 0), E(2, 4)]


def test_start_offsets_stay_monotonic(tmp_path):
    cache = cache_with(tmp_path, (2, 6), (3, 5))
    assert cache.entries == [E(3, 5)]


def test_lower_epoch_drops_the_entries_at_or_above_it(tmp_path):
    cache = cache_with(tmp_path, (1, 0), (3, 10), (4, 20), (2, 15))
    assert cache.entries == [E(1, 0), E(2, 15)]


def test_epoch_between_entries_answers_floor_epoch_and_next_start(tmp_path):
    cache = cache_with(tmp_path, (0, 10), (2, 13), (4, 17))
    assert cache.end_offset_for(1, 30) == (0, 13)
    assert cache.end_offset_for(2, 30) == (2, 17)
    assert cache.end_offset_for(3, 30) == (2, 17)
    assert cache.end_offset_for(4, 30) == (4, 30)


def test_matching_epoch_at_earlier_offset_truncates(tmp_path):
    cache = cache_with(tmp_path, (5, 11), (6, 12), (7, 13), (7, 12))
    assert cache.end_offset_for(5, 20) == (5, 12)
    assert cache.end_offset_for(6, 20) == (5, 12)


def test_epoch_below_all_answers_itself_with_first_start(tmp_path):
    cache = cache_with(tmp_path, (5, 11), (6, 12))
    assert cache.end_offset_for(4, 20) == (4, 11)


def test_negative_assign_is_refused(tmp_path):
    cache = cache_with(tmp_path, (1, 0))
    for epoch, offset in ((-1, 5), (2, -1)):
        with pytest.raises(ValueError):
            cache.assign(epoch, offset)
    assert cache.entries == [E(1, 0)]


def test_truncate_from_end(tmp_path):
    cache = cache_with(tmp_path, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_end(9)
    assert cache.entries == [E(2, 6), E(3, 8)]
    cache.truncate_from_end(8)
    assert cache.entries == [E(2, 6)]
    cache.truncate_from_end(-1)
    assert cache.entries == [E(2, 6)]


@pytest.mark.parametrize("start, expected", [
    (5, [E(2, 6), E(3, 8), E(4, 11)]),
    (8, [E(3, 8), E(4, 11)]),
    (9, [E(3, 9), E(4, 11)]),
    (6, [E(2, 6), E(3, 8), E(4, 11)]),
    (11, [E(4, 11)]),
    (15, [E(4, 15)]),
])
def test_truncate_from_start_keeps_the_epoch_of_the_new_start(tmp_path, start, expected):
    cache = cache_with(tmp_path, (2, 6), (3, 8), (4, 11))
    cache.truncate_from_start(start)
    assert cache.entries == expected
    assert LeaderEpochCache.load(cache.path).entries == expected


def test_file_layout_is_kafkas(tmp_path):
    cache = cache_with(tmp_path, (0, 0), (3, 1200))
    with open(cache.path, "rb") as f:
        assert f.read() == b"0\n2\n0 0\n3 1200\n"
    assert not os.path.exists(cache.path + ".tmp")


# --- random operations against the rules restated plainly ---

def model_assign(entries, epoch, offset):
    if entries and entries[-1][0] == epoch and offset >= entries[-1][1]:
        return entries
    return [e for e in entries if e[0] < epoch and e[1] < offset] + [(epoch, offset)]


def model_end_offset_for(entries, epoch, log_end):
    if epoch == -1 or not entries:
        return -1, -1
    if epoch == entries[-1][0]:
        return epoch, log_end
    higher = [e for e in entries if e[0] > epoch]
    if not higher:
        return -1, -1
    lower = [e for e in entries if e[0] <= epoch]
    return (lower[-1][0] if lower else epoch), higher[0][1]


def model_truncate_from_start(entries, start):
    before = [e for e in entries if e[1] <= start]
    if not before:
        return entries
    return [(before[-1][0], start)] + [e for e in entries if e[1] > start]


epochs = st.integers(0, 12)
offsets = st.integers(0, 60)


class EpochCacheMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        import tempfile
        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, LEADER_EPOCH_FILE)
        self.cache = LeaderEpochCache.load(self.path)
        self.model: list[tuple[int, int]] = []

    @rule(epoch=epochs, offset=offsets)
    def assign(self, epoch, offset):
        self.cache.assign(epoch, offset)
        self.model = model_assign(self.model, epoch, offset)

    @rule(epoch=st.integers(-1, 14), log_end=st.integers(60, 80))
    def end_offset_for(self, epoch, log_end):
        assert self.cache.end_offset_for(epoch, log_end) == \
            model_end_offset_for(self.model, epoch, log_end)

    @rule(offset=offsets)
    def truncate_from_end(self, offset):
        self.cache.truncate_from_end(offset)
        self.model = [e for e in self.model if e[1] < offset]

    @rule(offset=offsets)
    def truncate_from_start(self, offset):
        self.cache.truncate_from_start(offset)
        self.model = model_truncate_from_start(self.model, offset)

    @rule()
    def reopen(self):
        self.cache = LeaderEpochCache.load(self.path)

    @invariant()
    def matches_model_and_file(self):
        assert [tuple(e) for e in self.cache.entries] == self.model
        for a, b in zip(self.model, self.model[1:], strict=False):  # neighbours: one list shorter
            assert a[0] < b[0] and a[1] < b[1]
        if os.path.exists(self.path):
            assert [tuple(e) for e in LeaderEpochCache.load(self.path).entries] == self.model

    def teardown(self):
        import shutil
        shutil.rmtree(self.dir)


EpochCacheMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30,
                                               deadline=None)
TestEpochCache = EpochCacheMachine.TestCase
