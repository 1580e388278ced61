"""check_crcs: a record batch damaged on the wire is an error naming its partition and offset.

A real broker serves intact data; a proxy in front of it (the broker advertises the proxy's port,
so every connection of the consumer goes through it) flips one byte inside the records of the
first Fetch answers that carry records. The broker's own data stays intact, so the damage is
exactly what a bad link or middlebox would do.

- check_crcs=True (the default, Kafka's `check.crcs`): poll() raises CorruptMessageError naming
  the topic-partition and the batch's base offset, as Java's consumer does; the position stays on
  the batch, so once the link is good again the next poll() reads every record, none skipped.
- check_crcs=False: the CRC is not checked, so the flipped byte (placed inside a value) reaches
  the application: the setting really turns the check off.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from epochlog.client import Consumer, Producer, TopicPartition
from epochlog.client.errors import CorruptMessageError
from epochlog.protocol.api_keys import ApiKey
from epochlog.protocol.apis.fetch import FetchResponse
from epochlog.protocol.batch import BATCH_HEADER_BYTES
from epochlog.protocol.headers import decode_response_header, encode_response_header
from epochlog.protocol.registry import APIS
from tests.broker.cluster import Cluster, free_port

TOPIC = "crc"
RECORDS = 20
VALUE = b"v" * 64
WAIT_S = 30.0


class FlippingProxy:
    """Forwards one port to the broker's; flips a byte in the records of the next `flips` Fetch
    answers that carry records. Requests are read for their correlation id and API."""

    def __init__(self) -> None:
        self.broker_port = -1  # set before start()
        self.port = free_port()
        self.flips = 0
        self.flipped = 0
        self._apis: dict[int, tuple[int, int]] = {}  # correlation id -> (api key, version)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.broker_port)
        for pump in (self._requests(reader, up_writer), self._answers(up_reader, writer)):
            task = asyncio.create_task(pump)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _requests(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                frame = await _read_frame(reader)
                key, version, correlation = struct.unpack_from(">hhi", frame)
                self._apis[correlation] = (key, version)
                writer.write(struct.pack(">i", len(frame)) + frame)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def _answers(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                frame = await _read_frame(reader)
                correlation = struct.unpack_from(">i", frame)[0]
                key, version = self._apis.pop(correlation, (-1, -1))
                if key == ApiKey.FETCH and self.flipped < self.flips:
                    frame = self._flip(frame, version)
                writer.write(struct.pack(">i", len(frame)) + frame)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    def _flip(self, frame: bytes, version: int) -> bytes:
        api = APIS[ApiKey.FETCH]
        header_version = api.response_header_version(version)
        correlation, pos = decode_response_header(frame, header_version)
        answer: FetchResponse = api.decode_response(bytes(frame), version, pos)
        for topic in answer.responses:
            for partition in topic.partitions:
                records = partition.records
                if records and len(records) > BATCH_HEADER_BYTES + len(VALUE):
                    damaged = bytearray(records)
                    # the last byte of the first record's value: inside the CRC's range, and a
                    # decoder that does not check the CRC still parses the record
                    at = damaged.index(VALUE, BATCH_HEADER_BYTES) + len(VALUE) - 1
                    damaged[at] ^= 0x01
                    partition.records = bytes(damaged)
                    self.flipped += 1
                    return encode_response_header(correlation, header_version) + \
                        api.encode_response(answer, version)
        return frame


async def _read_frame(reader: asyncio.StreamReader) -> bytes:
    size = struct.unpack(">i", await reader.readexactly(4))[0]
    return await reader.readexactly(size)


@pytest.fixture
async def proxied(tmp_path: Path) -> AsyncIterator[FlippingProxy]:
    """One broker that advertises a proxy's port, with RECORDS records in TOPIC."""
    proxy = FlippingProxy()
    cluster = Cluster(tmp_path, brokers=1, broker_args=["--advertised", f"127.0.0.1:{proxy.port}"])
    proxy.broker_port = cluster.broker(1).port
    await proxy.start()
    try:
        # in a thread: the controller reaches the broker through the proxy, which runs on this
        # loop, while the cluster's start waits for the broker's log lines
        await asyncio.to_thread(cluster.__enter__)
        try:
            async with Producer([f"127.0.0.1:{proxy.port}"], acks="all", linger_ms=0) as p:
                for i in range(RECORDS):
                    await p.send(TOPIC, value=VALUE, key=b"%02d" % i, partition=0)
                await p.flush()
            yield proxy
        finally:
            await asyncio.to_thread(cluster.__exit__, None, None, None)
    finally:
        await proxy.close()


async def _read_all(consumer: Consumer) -> list[bytes | None]:
    values: list[bytes | None] = []
    async with asyncio.timeout(WAIT_S):
        while len(values) < RECORDS:
            values += [r.value for r in await consumer.poll(timeout_ms=500)]
    return values


async def test_a_corrupt_batch_is_an_error_naming_partition_and_offset(
        proxied: FlippingProxy) -> None:
    proxied.flips = 1
    tp = TopicPartition(TOPIC, 0)
    async with Consumer(f"127.0.0.1:{proxied.port}", auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        with pytest.raises(CorruptMessageError, match=rf"{TOPIC}-0: the record batch at offset "
                                                      r"0 is corrupt \(CRC mismatch"):
            async with asyncio.timeout(WAIT_S):
                while True:
                    assert not await consumer.poll(timeout_ms=500), "a corrupt record got out"
        assert proxied.flipped == 1
        assert consumer.metrics()["corrupt_batches"] == 1
        assert consumer.next_offsets()[tp][0] == 0, "the position stays on the corrupt batch"
        # the link is good again: the next polls read everything, nothing skipped
        assert await _read_all(consumer) == [VALUE] * RECORDS


async def test_check_crcs_off_lets_the_damage_through(proxied: FlippingProxy) -> None:
    proxied.flips = 1
    async with Consumer(f"127.0.0.1:{proxied.port}", auto_offset_reset="earliest",
                        check_crcs=False) as consumer:
        consumer.assign([TopicPartition(TOPIC, 0)])
        values = await _read_all(consumer)
    assert proxied.flipped == 1
    damaged = VALUE[:-1] + bytes([VALUE[-1] ^ 0x01])
    assert values == [damaged] + [VALUE] * (RECORDS - 1)
