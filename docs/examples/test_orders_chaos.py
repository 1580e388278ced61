"""A user's own test: confluent-kafka clients keep every order while the group's coordinator dies
mid-rebalance and a partition's leader is cut off from its followers. (epochlog's own test suite
copies this file into an empty folder and runs it there: tests/testing/test_user_project.py.)"""

import threading
import time

from epochlog.testing import History, check
from epochlog.testing.adapter_confluent import Consumer, Producer

TOPIC, GROUP = "orders", "billing"


def consume(bootstrap, history, name, stop, seen):
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": GROUP,
                         "auto.offset.reset": "earliest", "enable.auto.commit": False,
                         "session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
                        history=history, name=name)
    consumer.subscribe([TOPIC])
    while not stop.is_set():
        good = [m for m in consumer.consume(100, timeout=0.3) if m.error() is None]
        seen.update(m.value() for m in good)
        if good:
            try:
                consumer.commit(asynchronous=False)
            except Exception:  # across the coordinator's death; recorded, the next one retries
                pass
    consumer.close()


def test_orders_survive_a_dead_coordinator_and_a_cut_off_leader(epochlog_cluster):
    history = History()
    c = epochlog_cluster(brokers=3, network=True, on_fault=history.record_fault, settings={
        "min.insync.replicas": 2, "offsets.topic.replication.factor": 3,
        "broker.session.timeout.ms": 3000, "group.initial.rebalance.delay.ms": 0})
    c.create_topic(TOPIC, partitions=3, replication_factor=3)
    producer = Producer({"bootstrap.servers": c.bootstrap_servers, "acks": "all",
                         "enable.idempotence": True}, history=history)
    stop, seen, sent = threading.Event(), set(), [0]

    def produce(n):
        for _ in range(n):
            producer.produce(TOPIC, f"order-{sent[0]}".encode(), str(sent[0] % 8).encode())
            sent[0] += 1
            producer.poll(0.005)

    def consumer(name):
        t = threading.Thread(target=consume, args=(c.bootstrap_servers, history, name, stop,
                                                   seen))
        t.start()
        return t

    first = consumer("first")
    produce(200)
    coordinator = c.coordinator_of(GROUP)
    second = consumer("second")  # joins: the group rebalances...
    time.sleep(0.3)
    c.kill(coordinator)  # ...and its coordinator dies meanwhile
    produce(200)
    c.restart(coordinator)

    leader = c.leader_of(TOPIC, 0)  # cut off from its followers; clients still reach it
    c.partition({leader}, {b for b in c.brokers if b != leader})
    produce(200)
    time.sleep(4)
    c.heal()

    assert producer.flush(60) == 0
    c.wait_fully_replicated(TOPIC, timeout_s=60)
    acked = {op.value for op in history.ops if getattr(op, "acked", False)}
    deadline = time.monotonic() + 60
    while not acked <= seen and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    first.join(30)
    second.join(30)
    verdict = check(history)
    assert verdict.ok and not verdict.anomalies, verdict
    assert len(acked) == 600 and acked <= seen
