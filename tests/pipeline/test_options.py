"""Every option of the source and the sink is checked before any job runs, and a bad one is an
error naming it (pipeline.options is pure, so each case is checked here without Spark; the
Spark tests check that such an error reaches the user from load() and save())."""

from __future__ import annotations

import pytest

from epochlog.client.types import TopicPartition
from epochlog.pipeline.options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    parse_read,
    parse_write,
)

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092"}


def read(streaming: bool | None = True, **options: str) -> object:
    return parse_read({**BASE, **options}, streaming)


def test_names_are_case_insensitive_and_mean_what_spark_means() -> None:
    # Spark hands the options lower-cased; the spelling the user wrote must not matter
    got = parse_read({"KAFKA.BOOTSTRAP.SERVERS": "a:1,b:2", "SubscribePattern": "ord.*",
                      "startingoffsets": '{"orders": {"0": {"offset": 42, "epoch": 3}, '
                                         '"1": -2}}',
                      "MAXOFFSETSPERTRIGGER": "100", "kafka.client.rack": "b",
                      "includeHeaders": "TRUE", "maxTriggerDelay": "30s",
                      "minOffsetsPerTrigger": "10"}, streaming=True)
    assert got.topics.pattern == "ord.*" and got.topics.matches("orders")
    assert not got.topics.matches("xorders")
    assert got.starting == {TopicPartition("orders", 0): OffsetSpec(42, 3),
                            TopicPartition("orders", 1): OffsetSpec(EARLIEST)}
    assert got.max_offsets_per_trigger == 100 and got.min_offsets_per_trigger == 10
    assert got.max_trigger_delay_ms == 30_000 and got.include_headers
    assert got.consumer == {"bootstrap_servers": ["a:1", "b:2"], "client_rack": "b"}
    assert got.fail_on_data_loss  # Spark's default


def test_defaults_as_spark() -> None:
    stream, batch = read(subscribe="t"), read(False, subscribe="t")
    assert stream.starting == OffsetSpec(LATEST)  # type: ignore[attr-defined]
    assert batch.starting == OffsetSpec(EARLIEST)  # type: ignore[attr-defined]
    assert batch.ending == OffsetSpec(LATEST)  # type: ignore[attr-defined]


@pytest.mark.parametrize(("streaming", "options", "message"), [
    (True, {"subscribe": "t", "kafka.bootstrap.servers": ""}, "kafka.bootstrap.servers is empty"),
    (True, {"subscribe": "t", "kafka.bootstrap.servers": "nohostport"}, "is not host:port"),
    (True, {"subscribe": "t", "subscribePatern": "x"}, "unknown option 'subscribepatern'"),
    (True, {"subscribe": "t", "topic": "x"}, "(topic is a sink option)"),
    (True, {}, "exactly one of the options assign, subscribe and subscribePattern must be given, "
               "not none"),
    (True, {"subscribe": "t", "assign": '{"t": [0]}'}, "not assign and subscribe"),
    (True, {"assign": "t-0"}, "option assign is not valid JSON"),
    (True, {"assign": '{"t": [-1]}'}, 'option assign must be JSON like {"topic": [0, 1]}'),
    (True, {"subscribe": " , "}, "option subscribe names no topic"),
    (True, {"subscribePattern": "("}, "option subscribePattern: '(' is not a regular"),
    (True, {"subscribe": "t", "startingOffsets": "first"}, "option startingOffsets is not valid"),
    (True, {"subscribe": "t", "startingOffsets": '{"t": {"x": 1}}'}, "partition 'x' is not a"),
    (True, {"subscribe": "t", "startingOffsets": '{"t": {"0": -3}}'}, "offset -3 is not an"),
    (True, {"subscribe": "t", "startingOffsets": '{"t": {"0": {"offset": 5, "epoch": -2}}}'},
     'must be an offset or {"offset": N, "epoch": E}'),
    (True, {"subscribe": "t", "startingOffsets": '{"t": {"0": {"offset": -2, "epoch": 1}}}'},
     "gives an epoch with offset -2"),
    (True, {"subscribe": "t", "endingOffsets": "latest"},
     "option endingOffsets applies to batch (read) queries only"),
    (False, {"subscribe": "t", "maxOffsetsPerTrigger": "5"},
     "option maxOffsetsPerTrigger applies to streaming (readStream) queries only"),
    (False, {"subscribe": "t", "startingOffsets": "latest"}, "latest (-1) is not a valid start"),
    (False, {"subscribe": "t", "endingOffsets": '{"t": {"0": -2}}'},
     "earliest (-2) is not a valid end for a batch query (t-0)"),
    (True, {"subscribe": "t", "maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger must be "
                                                            "positive, not 0"),
    (True, {"subscribe": "t", "maxOffsetsPerTrigger": "ten"}, "must be a whole number"),
    (True, {"subscribe": "t", "maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "6"},
     "minOffsetsPerTrigger (6) is larger than maxOffsetsPerTrigger (5)"),
    (True, {"subscribe": "t", "maxTriggerDelay": "5m"}, "maxTriggerDelay needs "
                                                         "minOffsetsPerTrigger"),
    (True, {"subscribe": "t", "minOffsetsPerTrigger": "5", "maxTriggerDelay": "soon"},
     "maxTriggerDelay must be a duration"),
    (True, {"subscribe": "t", "failOnDataLoss": "yes"}, "failOnDataLoss must be true or false"),
    (True, {"subscribe": "t", "startingOffsetsByTimestampStrategy": "earliest"},
     "must be 'error' or 'latest'"),
    (True, {"subscribe": "t", "startingOffsetsByTimestamp": '{"t": {"0": "noon"}}'},
     "must be a timestamp in ms"),
    (True, {"subscribe": "t", "kafka.group.id": "g"}, "kafka.group.id is not supported: the "
                                                      "source joins no consumer group"),
    (True, {"subscribe": "t", "groupIdPrefix": "g"}, "groupIdPrefix is not supported"),
    (True, {"subscribe": "t", "kafka.auto.offset.reset": "earliest"}, "startingOffsets instead"),
    (True, {"subscribe": "t", "kafka.value.deserializer": "x"}, "values are always bytes"),
    (True, {"subscribe": "t", "kafka.linger.ms": "5"}, "kafka.linger.ms is not a setting the "
                                                       "source knows"),
    (True, {"subscribe": "t", "kafka.fetch.max.wait.ms": "soon"}, "must be a whole number"),
    (True, {"subscribe": "t", "kafka.check.crcs": "maybe"}, "must be true or false"),
])
def test_bad_read_options_are_named(streaming: bool, options: dict[str, str],
                                    message: str) -> None:
    raw = {**BASE, **options}
    if "kafka.bootstrap.servers" in options:
        raw["kafka.bootstrap.servers"] = options["kafka.bootstrap.servers"]
    with pytest.raises(ValueError) as caught:
        parse_read(raw, streaming)
    assert message in str(caught.value)


def test_bootstrap_is_required() -> None:
    with pytest.raises(ValueError, match="option kafka.bootstrap.servers is required"):
        parse_read({"subscribe": "t"}, True)


def test_write_options() -> None:
    got = parse_write({**BASE, "topic": "out", "kafka.linger.ms": "20",
                       "kafka.compression.type": "zstd"})
    assert got.topic == "out"
    assert got.producer == {"bootstrap_servers": ["127.0.0.1:9092"], "linger_ms": 20,
                            "compression_type": "zstd", "acks": "all",
                            "enable_idempotence": True}
    plain = parse_write({**BASE, "kafka.acks": "1", "kafka.enable.idempotence": "false"})
    assert plain.topic is None and plain.producer["acks"] == "1"
    assert not got.exactly_once and not plain.exactly_once  # at-least-once by default
    once = parse_write({**BASE, "deliveryGuarantee": "Exactly-Once",
                        "transactionalIdPrefix": "orders-job",
                        "kafka.transaction.timeout.ms": "30000"})
    assert once.exactly_once and once.transactional_id_prefix == "orders-job"
    assert once.producer["transaction_timeout_ms"] == 30_000


@pytest.mark.parametrize(("options", "message"), [
    ({"kafka.acks": "1"}, "kafka.acks=1 contradicts kafka.enable.idempotence=true"),
    ({"subscribe": "t"}, "(subscribe is a source option)"),
    ({"topic": " "}, "option topic is empty"),
    ({"kafka.key.serializer": "x"}, "write key as a binary or string column"),
    ({"kafka.client.rack": "a"}, "kafka.client.rack is not a setting the sink knows"),
    ({"deliveryGuarantee": "twice"}, "option deliveryGuarantee is 'twice': at-least-once (the "
                                     "default) or exactly-once"),
    ({"deliveryGuarantee": "exactly-once", "kafka.enable.idempotence": "false"},
     "kafka.enable.idempotence=false contradicts deliveryGuarantee=exactly-once"),
    ({"transactionalIdPrefix": "p"}, "transactionalIdPrefix applies with "
                                     "deliveryGuarantee=exactly-once only"),
    ({"deliveryGuarantee": "exactly-once", "transactionalIdPrefix": " "},
     "option transactionalIdPrefix is empty"),
    ({"kafka.transactional.id": "t"}, "name their prefix with transactionalIdPrefix"),
])
def test_bad_write_options_are_named(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as caught:
        parse_write({**BASE, **options})
    assert message in str(caught.value)


def test_exactly_once_is_refused_for_a_batch_write() -> None:
    """A batch write has no micro-batch id to replay by: refused when the writer is built (at
    save(), before any job runs), naming the streaming alternative."""
    from pyspark.sql.types import BinaryType, StructField, StructType

    from epochlog.pipeline.sink import BatchWriter, StreamWriter

    schema = StructType([StructField("value", BinaryType())])
    options = {**BASE, "topic": "out", "deliveryGuarantee": "exactly-once"}
    with pytest.raises(ValueError, match="applies to streaming queries"):
        BatchWriter(options, schema, overwrite=False)
    assert StreamWriter(options, schema, overwrite=False).options.exactly_once
