"""A consume-transform-produce worker, exactly once, as a process of its own: the application the
transaction chaos test (tests/chaos/test_txn_pipeline.py) runs, kills, and pauses.

    python -m epochlog.testing.chaos.txn_worker --bootstrap 127.0.0.1:9092 --source in \
        --sink out --group pipeline --transactional-id worker-1 --history worker-1.jsonl

It reads `source` with a read_committed consumer in `group`, and for each poll, in one
transaction of epochlog's transactional Producer: writes each record to `sink` (the same key and
partition; the value `<source value>|<transaction name>`, unique per transaction so that the
checker can tell two processings of one record apart), sends the consumer's next offsets with
its group_metadata() (KIP-447), and commits. When a transaction fails it is aborted and the
consumer goes back to the group's committed offsets; when the producer is fenced (a newer
instance took the transactional id, or the coordinator timed the transaction out while the
process was paused) it is closed and a new one started with the same id, which fences any
other instance of it. Everything is recorded (epochlog.testing.adapter_ours) into a History
saved to `--history` when the worker ends on SIGTERM or SIGINT; it then leaves the group and
aborts what is open. One line per meaningful change on stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from pathlib import Path

from epochlog.client import KafkaError, TopicPartition
from epochlog.client.errors import ProducerFencedError
from epochlog.client.types import ConsumerRecord

from ..adapter_ours import Consumer, Producer
from ..history import History

log = logging.getLogger("epochlog.txn-worker")

POLL_MS = 300
RECORDS_PER_TXN_MAX = 50
SESSION_MS = 6000
HEARTBEAT_MS = 500
TXN_TIMEOUT_MS = 10_000
INIT_ATTEMPTS_MAX = 20
MAX_BLOCK_MS = 20_000  # each init, commit and abort gives up after this (then tried again)


class Worker:
    def __init__(self, args: argparse.Namespace, history: History) -> None:
        self.args = args
        self.history = history
        self.name = args.name or args.transactional_id
        self.producer: Producer | None = None
        self.instances = 0
        self.committed = 0
        self.aborted = 0

    async def run(self, stop: asyncio.Event) -> None:
        a = self.args
        consumer = Consumer(bootstrap_servers=a.bootstrap, group_id=a.group,
                            isolation_level="read_committed", auto_offset_reset="earliest",
                            enable_auto_commit=False, session_timeout_ms=SESSION_MS,
                            heartbeat_interval_ms=HEARTBEAT_MS, history=self.history,
                            name=f"{self.name}-consumer")
        async with consumer:
            consumer.subscribe([a.source])
            try:
                while not stop.is_set():
                    if self.producer is None:
                        self.producer = await self._new_producer(stop)
                        continue
                    records = await consumer.poll(timeout_ms=POLL_MS,
                                                  max_records=RECORDS_PER_TXN_MAX)
                    if records:
                        await self._process(consumer, records)
            finally:
                if self.producer is not None:
                    await self.producer.close()  # aborts an open transaction
        log.info("%s: stopped after %d commits and %d aborts (%d producer instances)",
                 self.name, self.committed, self.aborted, self.instances)

    async def _new_producer(self, stop: asyncio.Event) -> Producer | None:
        a = self.args
        for attempt in range(INIT_ATTEMPTS_MAX):
            producer = Producer(bootstrap_servers=a.bootstrap, transactional_id=a.transactional_id,
                                transaction_timeout_ms=TXN_TIMEOUT_MS, linger_ms=5,
                                max_block_ms=MAX_BLOCK_MS,
                                history=self.history, name=f"{self.name}-producer")
            try:
                await producer.start()
                await producer.init_transactions()
            except KafkaError as exc:
                log.info("%s: init_transactions failed (%s); again", self.name, exc)
                await producer.close()
                if stop.is_set():
                    return None
                await asyncio.sleep(min(1.0, 0.1 * (attempt + 1)))
                continue
            self.instances += 1
            log.info("%s: producer instance %d ready", self.name, self.instances)
            return producer
        raise RuntimeError(f"{self.name}: init_transactions failed {INIT_ATTEMPTS_MAX} times")

    async def _process(self, consumer: Consumer, records: list[ConsumerRecord]) -> None:
        producer = self.producer
        assert producer is not None
        a = self.args
        offsets: dict[TopicPartition, tuple[int, int]] = {}
        try:
            producer.begin_transaction()
            name = (producer.transaction_name or "").encode()
            for r in records:
                await producer.send(a.sink, (r.value or b"") + b"|" + name, key=r.key,
                                    partition=r.partition)
                offsets[TopicPartition(a.source, r.partition)] = (r.offset + 1, r.leader_epoch)
            await producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            await producer.commit_transaction()
            self.committed += 1
        except ProducerFencedError as exc:
            log.info("%s: fenced (%s); starting a new producer", self.name, exc)
            await self._replace_producer()
            await self._rewind(consumer, offsets)
        except KafkaError as exc:
            log.info("%s: transaction failed (%s); aborting", self.name, exc)
            try:
                await producer.abort_transaction()
                self.aborted += 1
            except KafkaError as abort_error:
                log.info("%s: abort failed (%s); starting a new producer", self.name,
                         abort_error)
                await self._replace_producer()
            await self._rewind(consumer, offsets)

    async def _replace_producer(self) -> None:
        producer, self.producer = self.producer, None
        if producer is not None:
            await producer.close(timeout_ms=1000)  # a fenced one ends at once

    async def _rewind(self, consumer: Consumer, offsets: dict[TopicPartition, tuple[int, int]]
                      ) -> None:
        """Back to the committed offsets of the partitions the failed transaction read."""
        owned = consumer.assignment()
        tps = [tp for tp in offsets if tp in owned]
        if not tps:
            return
        try:
            committed = await consumer.committed(tps)
        except KafkaError as exc:
            log.info("%s: committed offsets unknown (%s); leaving the group to reset them",
                     self.name, exc)
            raise
        for tp in tps:
            got = committed.get(tp)
            if got is None:
                consumer.seek_to_beginning(tp)
            else:
                consumer.seek(tp, got[0], got[1] if got[1] >= 0 else None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--sink", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--transactional-id", required=True)
    parser.add_argument("--history", required=True, type=Path)
    parser.add_argument("--name")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    history = History()
    worker = Worker(args, history)

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        task = asyncio.ensure_future(worker.run(stop))
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({task, stopped}, return_when=asyncio.FIRST_COMPLETED)
        if not task.done():
            try:
                async with asyncio.timeout(30):
                    await task  # the loop sees stop between polls
            except TimeoutError:
                task.cancel()
        task.result() if task.done() and not task.cancelled() else None

    try:
        asyncio.run(run())
    finally:
        history.save(args.history)
        print(f"history saved: {args.history} ({len(history)} ops)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
