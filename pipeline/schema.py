"""The source's schema, as Spark's Kafka source has it, plus leaderEpoch; and its Arrow twin.

Spark's Kafka source yields key, value, topic, partition, offset, timestamp, timestampType, and
headers only with includeHeaders=true. We add leaderEpoch last: the partition leader epoch of
the record's batch (KIP-320), what a user stores beside the offset to resume and be validated.
The Arrow schema is Spark's own conversion of that schema (to_arrow_schema, in UTC), because the
Python data source checks a yielded pyarrow.RecordBatch against exactly that.
"""

from __future__ import annotations

import functools
from typing import Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

HEADER_TYPE = StructType([StructField("key", StringType()), StructField("value", BinaryType())])


def source_schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", ArrayType(HEADER_TYPE)))
    fields.append(StructField("leaderEpoch", IntegerType()))
    return StructType(fields)


@functools.cache
def arrow_schema(include_headers: bool) -> Any:
    """The pyarrow.Schema Spark expects of a RecordBatch in source_schema(include_headers)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(source_schema(include_headers), timezone="UTC")
