"""Runs inside a client container on the compose network (tests/docker/test_compose_up.py): a
confluent-kafka producer and consumer through the brokers' INTERNAL names. Prints one JSON line:
the brokers Metadata named and the values read back.

    python3 network_client.py BOOTSTRAP TOPIC COUNT
"""

from __future__ import annotations

import json
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

WAIT_S = 30.0


def main(bootstrap: str, topic: str, count: int) -> dict[str, object]:
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all",
                         "enable.idempotence": True, "message.timeout.ms": int(WAIT_S * 1000)})
    metadata = producer.list_topics(topic, timeout=WAIT_S)  # a named topic: created on first use
    brokers = sorted(f"{b.host}:{b.port}" for b in metadata.brokers.values())
    partitions = len(metadata.topics[topic].partitions)
    failures: list[str] = []
    for i in range(count):
        producer.produce(topic, value=b"net-%d" % i, on_delivery=lambda err, _m: (
            failures.append(str(err)) if err is not None else None))
    left = producer.flush(WAIT_S)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "network-client",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
    values: list[str] = []
    deadline = time.monotonic() + WAIT_S
    while len(values) < count and time.monotonic() < deadline:
        for message in consumer.consume(100, timeout=0.5):
            if not message.error():
                values.append((message.value() or b"").decode())
    consumer.close()
    return {"brokers": brokers, "unflushed": left, "failures": failures, "values": values}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2], int(sys.argv[3]))))
