"""The driver of tests/pipeline/test_spark_standalone.py, run as its own process (a Python
process holds one SparkContext, and the test run already has a local one):

    python -m tests.pipeline.standalone_job MASTER BOOTSTRAP TOPIC OUT

reads TOPIC with the "epochlog" source on the standalone cluster, batch and streaming (Parquet
under OUT), and prints one JSON line: counts, and the executors the work ran on."""

from __future__ import annotations

import json
import os
import sys

from epochlog import pipeline


def main() -> None:
    master, bootstrap, topic, out = sys.argv[1:5]
    spark = pipeline.session(master, "epochlog-standalone-test", **{
        "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1",
        "spark.ui.enabled": "false", "spark.executor.memory": "512m",
        "spark.cores.max": "2", "spark.sql.shuffle.partitions": "2"})
    spark.sparkContext.setLogLevel("ERROR")
    try:
        df = (spark.read.format("epochlog").option("kafka.bootstrap.servers", bootstrap)
              .option("subscribe", topic).load())
        rows = df.selectExpr("partition", "offset", "CAST(value AS STRING) AS value").collect()
        stream = (spark.readStream.format("epochlog").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest")
                  .option("maxOffsetsPerTrigger", 700).load()
                  .selectExpr("partition", "offset", "CAST(value AS STRING) AS value"))
        query = (stream.writeStream.format("parquet").option("path", out + "/data")
                 .option("checkpointLocation", out + "/checkpoint")
                 .trigger(availableNow=True).start())
        query.awaitTermination(180)
        streamed = spark.read.parquet(out + "/data").count()
        # the Python workers that ran the reads: not this process, and not the driver's JVM
        pids = spark.sparkContext.parallelize(range(4), 2).map(lambda _: os.getppid()) \
            .distinct().collect()
        executors = [e.host() for e in spark.sparkContext._jsc.sc().statusTracker()
                     .getExecutorInfos()]
        print(json.dumps({"master": spark.sparkContext.master, "rows": len(rows),
                          "distinct": len({(r.partition, r.offset) for r in rows}),
                          "values": sorted(r.value for r in rows) ==
                          sorted(f"s{i}" for i in range(len(rows))),
                          "streamed": streamed, "batches": len(query.recentProgress),
                          "worker_parents": pids, "driver_pid": os.getpid(),
                          "executors": executors}), flush=True)
    finally:
        spark.stop()


if __name__ == "__main__":
    main()
