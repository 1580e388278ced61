"""The driver of tests/pipeline/test_spark_exactly_once.py, run as its own process (so that a test
can SIGKILL it, and give it a master with task retries):

    python -m tests.pipeline.exactly_once_job MASTER BOOTSTRAP SOURCE TARGET CHECKPOINT GUARANTEE
                                             POISON

A streaming query, trigger availableNow: SOURCE through the "epochlog" source, 100 records a
micro-batch, into TARGET through the "epochlog" sink with deliveryGuarantee GUARANTEE. Each
record's value passes through a Python UDF that, for a value of "poison":
- POISON a path: fails the task (after 3 s, so that the batch's other tasks finish and commit
  first) for as long as that file exists;
- POISON "first-attempt": fails the task's first attempt only (Spark runs it again), leaving
  the file CHECKPOINT.first-attempt-failed to say so;
- POISON "slow": sleeps 50 ms for every record instead (a query slow enough to be killed mid-way).
Prints "done" and exits 0 when the query has read everything; exits 1 with the query's error.
"""

from __future__ import annotations

import os
import sys
import time

from epochlog import pipeline


def main() -> None:
    master, bootstrap, source, target, checkpoint, guarantee, poison = sys.argv[1:8]
    spark = pipeline.session(master, "epochlog-exactly-once-test", **{
        "spark.ui.enabled": "false", "spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    from pyspark.sql.functions import col, udf
    from pyspark.sql.types import StringType

    def check(value: str) -> str:
        from pyspark import TaskContext

        if poison == "slow":
            time.sleep(0.05)
        elif value == "poison":
            ctx = TaskContext.get()
            if poison == "first-attempt":
                if ctx is not None and ctx.attemptNumber() == 0:
                    open(checkpoint + ".first-attempt-failed", "w").close()  # for the test
                    raise RuntimeError("poison record: the task's first attempt fails")
            elif os.path.exists(poison):
                time.sleep(3)
                raise RuntimeError(f"poison record: failing while {poison} exists")
        return value

    try:
        stream = (spark.readStream.format("epochlog").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", source).option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", 100).load()
                  .select("key", udf(check, StringType())(col("value").cast("string"))
                          .alias("value")))
        query = (stream.writeStream.format("epochlog")
                 .option("kafka.bootstrap.servers", bootstrap).option("topic", target)
                 .option("deliveryGuarantee", guarantee)
                 .option("checkpointLocation", checkpoint)
                 .trigger(availableNow=True).start())
        try:
            query.awaitTermination()
        except Exception as exc:  # the query failed: its first line and Python's errors
            lines = str(exc).splitlines()
            said = [lines[0][:300]] + [line.strip()[:300] for line in lines
                                       if "Error:" in line or "Exception:" in line][:5]
            print("query failed: " + "\n  ".join(said), flush=True)
            sys.exit(1)
        print("done", flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
