"""epochlog's Spark data source and sink: read and write topics from PySpark, with offsets that
carry leader epochs.

    from pyspark.sql import SparkSession
    from epochlog import pipeline
    spark = SparkSession.builder.master("local[2]").getOrCreate()
    pipeline.register(spark)            # the "epochlog" format, for read, readStream, write...
    df = (spark.read.format("epochlog").option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "orders").load())

Options and schema are Spark's Kafka connector's (docs/spark.md); the differences are that
every streaming offset is checkpointed with its leader epoch and validated by the executor that
reads from it (KIP-320), and that it needs no JVM code: it is a Python data source on the client
library (`epochlog.client`), the only part of epochlog it imports.

Modules: options (names and checks), planning (offset ranges, the checkpoint format), lookup
(the driver's questions to the cluster), partition_reader (an executor's read of one range),
arrow_records (record batches to Arrow columns), source (the DataSource and its readers), sink
(the writers), schema.

Importing this module fixes two things a first Spark session on a developer's machine trips
over, unless the user has set them: Spark's Python workers run this interpreter
(PYSPARK_PYTHON; otherwise they run `python3` from PATH, which may not have epochlog), and
`session()` builds a local session bound to the loopback address.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Executors are other processes; they must run an interpreter that can import epochlog. Spark
# reads PYSPARK_PYTHON when the session starts, so this must happen before getOrCreate().
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

__all__ = ["register", "session"]


def register(spark: SparkSession) -> None:
    """Register the "epochlog" data source with the session (read, readStream, write,
    writeStream). Checks that the session's Python workers can import epochlog."""
    from .source import EpochlogDataSource

    python = spark.sparkContext.pythonExec
    if python != sys.executable and os.path.isabs(python) and not _same_file(python,
                                                                             sys.executable):
        import logging

        logging.getLogger("epochlog.pipeline").warning(
            "Spark's Python workers run %s, not this interpreter (%s); they must be able to "
            "import epochlog (set PYSPARK_PYTHON before the session starts)", python,
            sys.executable)
    spark.dataSource.register(EpochlogDataSource)
    _append_by_default()
    _check_options_at_load()


def _append_by_default() -> None:
    """`df.write.format("epochlog")` starts in append mode. Spark refuses its default save mode
    (ErrorIfExists) for every Python data source, and a log can only be appended to (Spark's
    own Kafka sink appends under ErrorIfExists), so the users' usual `.save()` works as with
    Spark's Kafka sink; an explicit `.mode("overwrite")` after format() is still refused."""
    from pyspark.sql.readwriter import DataFrameWriter

    original = DataFrameWriter.format
    if getattr(original, "_epochlog_append", False):
        return

    def format(self: DataFrameWriter, source: str) -> DataFrameWriter:
        writer = original(self, source)
        return writer.mode("append") if source == "epochlog" else writer

    format._epochlog_append = True  # type: ignore[attr-defined]
    DataFrameWriter.format = format  # type: ignore[method-assign]


def _check_options_at_load() -> None:
    """`spark.read...load()` and `spark.readStream...load()` of "epochlog" check the options
    here, in the driver, knowing which of the two it is. Spark asks a Python data source only
    its schema at load(), the same way for both, so an option for the other kind (endingOffsets
    on a stream, maxOffsetsPerTrigger on a batch) would otherwise pass load() and fail later,
    at start() behind PySpark's own errors. The readers keep their options in the JVM, so
    format() and option() also note them on the Python object."""
    from pyspark.sql.readwriter import DataFrameReader
    from pyspark.sql.streaming.readwriter import DataStreamReader

    from .options import parse_read

    for cls, streaming in ((DataFrameReader, False), (DataStreamReader, True)):
        if getattr(cls.load, "_epochlog_checks", False):
            continue
        _note_options(cls)
        original = cls.load

        def load(self: Any, path: Any = None, format: str | None = None, schema: Any = None,
                 *, _original: Any = original, _streaming: bool = streaming,
                 **options: Any) -> Any:
            noted = getattr(self, "_epochlog_options", None)
            if (format or "").lower() == "epochlog" or (format is None and noted is not None):
                parse_read({**(noted or {}), **{k: _text(v) for k, v in options.items()}},
                           streaming=_streaming)
            return _original(self, path, format, schema, **options)

        load._epochlog_checks = True  # type: ignore[attr-defined]
        setattr(cls, "load", load)  # noqa: B010 - the two classes' load() differ in type


def _note_options(cls: Any) -> None:
    fmt, option, options = cls.format, cls.option, cls.options

    def format(self: Any, source: str) -> Any:
        if source.lower() == "epochlog":
            self._epochlog_options = {}
        else:
            self.__dict__.pop("_epochlog_options", None)
        return fmt(self, source)

    def option_(self: Any, key: str, value: Any) -> Any:
        if getattr(self, "_epochlog_options", None) is not None:
            self._epochlog_options[key] = _text(value)
        return option(self, key, value)

    def options_(self: Any, **opts: Any) -> Any:
        if getattr(self, "_epochlog_options", None) is not None:
            self._epochlog_options.update({k: _text(v) for k, v in opts.items()})
        return options(self, **opts)

    cls.format, cls.option, cls.options = format, option_, options_


def _text(value: Any) -> str:
    """An option's value as Spark passes it on (booleans as true and false)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def session(master: str = "local[2]", app_name: str = "epochlog", **conf: Any) -> SparkSession:
    """A SparkSession with the "epochlog" source registered. For a local master it binds the
    loopback address (Spark otherwise binds the address the host name resolves to, which on
    many machines is not reachable from the machine itself); conf entries are Spark settings."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.master(master).appName(app_name)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1") \
            .config("spark.driver.bindAddress", "127.0.0.1")
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False
