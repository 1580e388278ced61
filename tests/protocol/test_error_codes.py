"""protocol.error_codes: the table against kafka-python's `kafka.errors`, and the lookup API."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import warnings
from pathlib import Path

import pytest

with warnings.catch_warnings():
    # importing the kafka package loads its schemas through deprecated importlib.resources calls
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka.errors as kafka_errors

from epochlog.protocol import error_codes
from epochlog.protocol.error_codes import ALL, ErrorCode, ErrorInfo, info, is_retriable, name_of

# kafka-python names a few codes differently from Kafka. Ours are Kafka's names, the constants of
# Kafka's `Errors` enum as printed in the protocol guide's error table; kafka-python kept names
# Kafka has since changed (UNKNOWN, NOT_LEADER_FOR_PARTITION) or spelled its own.
KAFKA_PYTHON_NAMES: dict[int, str] = {
    -1: "UNKNOWN",  # Kafka: UNKNOWN_SERVER_ERROR (renamed from UNKNOWN in Kafka 2.x)
    0: "NO_ERROR",  # Kafka: NONE
    6: "NOT_LEADER_FOR_PARTITION",  # Kafka: NOT_LEADER_OR_FOLLOWER (renamed in Kafka 2.6, KIP-392)
    10: "MESSAGE_SIZE_TOO_LARGE",  # Kafka: MESSAGE_TOO_LARGE
    17: "INVALID_TOPIC",  # Kafka: INVALID_TOPIC_EXCEPTION
    39: "INVALID_REPLICATION_ASSIGNMENT",  # Kafka: INVALID_REPLICA_ASSIGNMENT
}

# Codes whose retriable flag deliberately differs from kafka-python's. In each case we follow
# Kafka's Java classification (the exception class extends RetriableException), which is what
# the "Retriable" column of Kafka's protocol error table shows.
KAFKA_PYTHON_RETRIABLE_DIFFERS: dict[int, str] = {
    # Java's CorruptRecordException extends RetriableException (protocol table: CORRUPT_MESSAGE,
    # retriable True); kafka-python's CorruptRecordError is not a RetriableError.
    2: "CORRUPT_MESSAGE",
}


def _kafka_python_errors() -> dict[int, type]:
    """kafka-python's broker error classes by errno (aliases such as CorruptRecordException
    and subclasses reusing an errno, e.g. IncompatibleBrokerVersion, collapse to one entry)."""
    by_code: dict[int, type] = {}
    for obj in vars(kafka_errors).values():
        if (
            inspect.isclass(obj)
            and issubclass(obj, kafka_errors.BrokerResponseError)
            and obj.errno is not None
        ):
            prior = by_code.get(obj.errno)
            if prior is None or issubclass(prior, obj):  # keep the most basic class
                by_code[obj.errno] = obj
    return by_code


KP = _kafka_python_errors()


def test_kafka_python_defines_codes_to_compare() -> None:
    assert -1 in KP and 0 in KP and 119 in KP


@pytest.mark.parametrize("code", sorted(KP))
def test_number_and_name_agree_with_kafka_python(code: int) -> None:
    assert code in {e.code for e in ALL}, f"kafka-python knows {code}, our table does not"
    ours = info(code)
    assert ours.code == code
    expected = KAFKA_PYTHON_NAMES.get(code, ours.name)
    assert KP[code].message == expected


@pytest.mark.parametrize("code", sorted(KP))
def test_retriable_agrees_with_kafka_python(code: int) -> None:
    theirs = bool(KP[code].retriable)
    if code in KAFKA_PYTHON_RETRIABLE_DIFFERS:
        assert name_of(code) == KAFKA_PYTHON_RETRIABLE_DIFFERS[code]
        assert is_retriable(code) is not theirs, "documented difference no longer differs"
    else:
        assert is_retriable(code) is theirs


def test_name_aliases_are_still_needed() -> None:
    # Fails once kafka-python adopts Kafka's name, so the alias can be removed.
    for code, their_name in KAFKA_PYTHON_NAMES.items():
        assert KP[code].message == their_name
        assert name_of(code) != their_name


def test_covers_every_code_from_minus_one_through_119() -> None:
    codes = {e.code for e in ALL}
    assert set(range(-1, 120)) <= codes
    assert codes == set(range(min(codes), max(codes) + 1))  # no gaps


def test_names_unique() -> None:
    names = [e.name for e in ALL]
    assert len(names) == len(set(names))


def test_numbers_unique() -> None:
    codes = [e.code for e in ALL]
    assert len(codes) == len(set(codes))
    rows = [row[0] for row in error_codes._TABLE]
    assert len(rows) == len(set(rows)), "a code appears twice in _TABLE"


def test_table_and_enum_agree() -> None:
    assert [e.code for e in ALL] == sorted(int(m) for m in ErrorCode)
    for e in ALL:
        assert ErrorCode(e.code).name == e.name
        assert info(ErrorCode[e.name]) is e


def test_all_is_sorted_plain_data() -> None:
    assert isinstance(ALL, tuple)
    assert [e.code for e in ALL] == sorted(e.code for e in ALL)
    for e in ALL:
        assert type(e) is ErrorInfo
        assert type(e.code) is int and type(e.retriable) is bool
        assert e.name.isupper() and " " not in e.name
        assert e.message and "\n" not in e.message


@pytest.mark.parametrize(
    ("name", "code", "retriable"),
    [
        ("UNKNOWN_SERVER_ERROR", -1, False),
        ("NONE", 0, False),
        ("NOT_LEADER_OR_FOLLOWER", 6, True),
        ("STALE_CONTROLLER_EPOCH", 11, False),
        ("COORDINATOR_LOAD_IN_PROGRESS", 14, True),
        ("NOT_ENOUGH_REPLICAS", 19, True),
        ("NOT_ENOUGH_REPLICAS_AFTER_APPEND", 20, True),
        ("UNSUPPORTED_VERSION", 35, False),
        ("OUT_OF_ORDER_SEQUENCE_NUMBER", 45, False),
        ("DUPLICATE_SEQUENCE_NUMBER", 46, False),
        ("UNKNOWN_PRODUCER_ID", 59, False),
        ("FENCED_LEADER_EPOCH", 74, True),
        ("UNKNOWN_LEADER_EPOCH", 75, True),
        ("STALE_BROKER_EPOCH", 77, False),
        ("OFFSET_NOT_AVAILABLE", 78, True),
        ("MEMBER_ID_REQUIRED", 79, False),
        ("FENCED_INSTANCE_ID", 82, False),
    ],
)
def test_known_codes(name: str, code: int, retriable: bool) -> None:
    assert ErrorCode[name] == code
    assert name_of(code) == name
    assert is_retriable(code) is retriable


@pytest.mark.parametrize("code", [-2, 999, 10_000, 32767, -32768])
def test_unknown_code(code: int) -> None:
    e = info(code)
    assert (e.code, e.name, e.retriable) == (code, f"UNKNOWN_ERROR_{code}", False)
    assert e.message and "\n" not in e.message
    assert name_of(code) == f"UNKNOWN_ERROR_{code}"
    assert is_retriable(code) is False


def test_error_info_is_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        info(0).retriable = True  # type: ignore[misc]


def test_module_is_sans_io() -> None:
    tree = ast.parse(Path(error_codes.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module.split(".")[0])
    assert "asyncio" not in imported
