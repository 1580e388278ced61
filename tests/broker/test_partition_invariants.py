"""Partition owns its high watermark, ISR and leader epoch, and checks their invariants.

- A state from the controller that breaks them (ISR outside the replicas, a leader that is not a
  replica, a broker named twice) is refused as bad input: InvalidPartitionState, no change, and
  INVALID_REQUEST for that partition from the replica manager (the broker stays up).
- A change from our own code that breaks them is a bug and fails loudly (AssertionError): a
  leader's high watermark going back, a proposed ISR outside the replicas or without the leader,
  a leader following another's high watermark or truncating.
- A follower's high watermark is its leader's capped at the log end, and comes down with the log
  end when it truncates (KIP-101), never below the log start.
- Nothing outside broker/partition.py (and storage) writes these fields: checked in the source.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from epochlog.broker.partition import InvalidPartitionState, Partition, PartitionState, Role
from epochlog.broker.replicas import ReplicaManager
from epochlog.broker.storage import Log, LogConfig, LogManager
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.records import build_batch

ME, F2, F3 = 1, 2, 3
REPLICAS = (ME, F2, F3)
BROKER = Path(__file__).resolve().parents[2] / "broker"


def clock() -> int:
    return 1_000


def partition(tmp_path: Path, leader: int = ME, records: int = 0) -> Partition:
    log = Log.open(str(tmp_path / "t-0"), LogConfig(), clock, clean_shutdown=True)
    p = Partition("t", 0, ME, log, clock)
    if records:  # written as leader at epoch 0 (a batch each), then the role asked at epoch 1
        assert p.apply(PartitionState(ME, 0, 0, REPLICAS, (ME,)))
        for _ in range(records):
            p.append_as_leader(build_batch([(None, b"v", [], 0)]))
    assert p.apply(PartitionState(leader, 1, 0, REPLICAS, REPLICAS))
    return p


@pytest.mark.parametrize(("state", "problem"), [
    (PartitionState(ME, 2, 0, REPLICAS, (ME, 4)), r"isr \[1, 4\] is not within"),
    (PartitionState(4, 2, 0, REPLICAS, (ME,)), r"leader 4 is not one of the replicas"),
    (PartitionState(ME, 2, 0, (ME, F2, F2), (ME,)), r"name a broker twice"),
])
def test_a_state_that_breaks_the_invariants_is_refused(tmp_path: Path, state: PartitionState,
                                                       problem: str) -> None:
    p = partition(tmp_path)
    before = p.state
    with pytest.raises(InvalidPartitionState, match=problem):
        p.apply(state)
    assert p.state == before and p.role is Role.LEADER


def test_the_replica_manager_answers_invalid_request_and_keeps_serving(tmp_path: Path) -> None:
    logs = LogManager.open(str(tmp_path / "data"), LogConfig(), clock, broker_id=ME,
                           cluster_id="test")
    replicas = ReplicaManager(ME, logs, clock, produce_waiters_max=10, fetch_waiters_max=10)
    assert replicas.apply_partition_state("t", 0, PartitionState(ME, 0, 0, REPLICAS, REPLICAS),
                                          True) == 0
    bad = PartitionState(F2, 1, 0, REPLICAS, (F2, 7))
    assert replicas.apply_partition_state("t", 0, bad, False) == ErrorCode.INVALID_REQUEST
    served = replicas.get("t", 0)
    assert served is not None and served.leader_epoch == 0 and served.is_leader


def test_epochs_only_grow(tmp_path: Path) -> None:
    p = partition(tmp_path)
    assert not p.apply(PartitionState(ME, 0, 5, REPLICAS, REPLICAS)), "older leader epoch"
    assert not p.apply(PartitionState(ME, 1, 0, REPLICAS, (ME,))), "same epochs"
    assert p.apply(PartitionState(ME, 1, 1, REPLICAS, (ME,))), "newer partition epoch"
    assert (p.leader_epoch, p.state and p.state.partition_epoch) == (1, 1)


def test_a_leaders_high_watermark_never_goes_back(tmp_path: Path) -> None:
    p = partition(tmp_path, records=5)
    assert p.apply(PartitionState(ME, 2, 0, REPLICAS, (ME,)))
    assert p.high_watermark == 5
    with pytest.raises(AssertionError, match="went back from 5 to 3"):
        p._set_high_watermark(3)
    with pytest.raises(AssertionError, match="outside the log"):
        p._set_high_watermark(6)
    with pytest.raises(AssertionError, match="a leader follows no high watermark"):
        p.follow_high_watermark(5)
    with pytest.raises(AssertionError, match="a leader does not truncate"):
        p.truncate_to(2)
    assert p.high_watermark == 5 and p.log_end_offset == 5


def test_a_followers_high_watermark_is_its_leaders_capped_at_the_log_end(tmp_path: Path) -> None:
    p = partition(tmp_path, leader=F2, records=5)  # its high watermark was 5 as leader
    assert not p.follow_high_watermark(9)
    assert (p.high_watermark, p.leader_high_watermark) == (5, 9), "capped at the log end"
    assert p.follow_high_watermark(3), "a new leader may report a lower one"
    assert p.high_watermark == 3
    assert not p.follow_high_watermark(3)
    p.follow_high_watermark(5)
    p.truncate_to(2)  # KIP-101: a follower cut by leader epoch
    assert (p.log_end_offset, p.high_watermark) == (2, 2)
    p.truncate_fully_and_start_at(10)
    assert (p.log_start_offset, p.log_end_offset, p.high_watermark) == (10, 10, 10)


def test_a_proposed_isr_stays_within_the_replicas_and_keeps_the_leader(tmp_path: Path) -> None:
    p = partition(tmp_path)
    with pytest.raises(AssertionError, match="not within"):
        p.propose_isr((ME, 7))
    with pytest.raises(AssertionError, match="leaves the leader out"):
        p.propose_isr((F2, F3))
    p.propose_isr((ME, F2))
    assert p.maximal_isr == (ME, F2, F3)
    p.withdraw_isr_proposal()
    assert p.proposed_isr is None
    follower = partition(tmp_path / "f", leader=F2)
    with pytest.raises(AssertionError, match="only a leader proposes"):
        follower.propose_isr((ME, F2))


# Fields of Partition (and of its Log's high watermark) that only broker/partition.py may write.
OWNED_ATTRIBUTES = {"proposed_isr", "leader_high_watermark", "role"}
OWNED_CALLS = {"update_high_watermark", "truncate_to", "truncate_fully_and_start_at"}


def _writes_outside(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else []
        for target in targets:
            if not isinstance(target, ast.Attribute):
                continue
            of_log = isinstance(target.value, ast.Attribute) and target.value.attr == "log"
            if (target.attr in OWNED_ATTRIBUTES and not (
                    isinstance(target.value, ast.Name) and target.value.id == "self")) \
                    or (target.attr == "high_watermark" and of_log):
                found.append(f"{path.name}:{node.lineno} writes .{target.attr}")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in OWNED_CALLS \
                and isinstance(node.func.value, ast.Attribute) and node.func.value.attr == "log":
            found.append(f"{path.name}:{node.lineno} calls log.{node.func.attr}")
    return found


def test_only_partition_writes_its_state(tmp_path: Path) -> None:
    """Every other broker module goes through Partition's methods; storage keeps its own."""
    writes = [w for path in sorted(BROKER.rglob("*.py"))
              if path.name != "partition.py" and "storage" not in path.parts
              for w in _writes_outside(path)]
    assert not writes, writes
    # and the check can fail: the follower's old way of setting its high watermark
    sample = tmp_path / "invariant_sample.py"
    sample.write_text("def f(p, hw):\n    p.leader_high_watermark = hw\n"
                      "    p.log.update_high_watermark(hw)\n    p.log.high_watermark = hw\n")
    assert len(_writes_outside(sample)) == 3
