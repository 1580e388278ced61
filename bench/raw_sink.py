"""A raw Kafka sink: a plain asyncio server that speaks just enough Kafka to be produced to.

    python bench/raw_sink.py PATH [--versions 0:3-9,1:4-12,3:1-12,18:0-3,...] [--partitions 1]

The yardstick for bench/broker_ingest.py that keeps the client the same on both sides: a real
Kafka producer (confluent-kafka) can produce to it exactly as it produces to an epochlog broker,
so the broker's figure divided by this one is the broker's own cost, with librdkafka's cost on
both sides. It is "raw" the way the file-writing raw server is: no storage engine, no checks.

Theory of operation
-------------------
One process, one uvloop event loop, every connection an asyncio BufferedProtocol whose bytes the
kernel copies straight into buffers of a `protocol.frames.FrameReceiver` (the same zero-copy
framing the broker uses; a large frame's buffer is recycled for the next one). Each whole frame is
answered at once, in arrival order, on the loop:
  - ApiVersions: the version ranges given by --versions; by default the broker's own, every API
    of its handler registry, so that librdkafka picks the same versions and the same features as
    against the broker. The whole list matters, not only the APIs answered here: librdkafka
    derives features from combinations (it writes RecordBatch v2 only if Produce v3+ AND Fetch v4+
    are offered; offered Produce alone, it sends Produce v9 carrying magic-0 message sets). A
    version beyond ours gets UNSUPPORTED_VERSION with our ranges in a v0 body (KIP-511).
  - Metadata: this server is broker 1, the controller, and the leader (leader epoch 0, sole
    replica, in sync) of --partitions partitions of every topic asked for; asked for all topics,
    it names the topics it has been asked about so far.
  - InitProducerId: a new producer id each time, epoch 0 (only if a client asks; the bench's
    producer has idempotence off, so it should not).
  - Produce: the whole request frame is appended to PATH with os.write on the loop (as the raw
    server and the broker's append write), then answered: success for every partition, with a
    base offset that grows by the record count read from each batch header (no CRC, no sequence,
    no validation of any kind). acks=0 gets no answer.
A task fsyncs PATH every second in an executor thread, like the broker's default flush and the
raw server. Any other API key (advertised or not: only these four are answered), or a frame
that does not decode, closes that connection with one line on stderr. SIGTERM/SIGINT: stop
listening, close connections, fsync, close PATH, and print one JSON line of counts (requests by
API and version, bytes written, next offsets, and batches that were not RecordBatch v2, which
should be none) on stdout. It does the same by itself after --idle-s-max with nothing received.
The port it listens on (127.0.0.1, chosen by the OS) is the first line on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import struct
import sys
import time
from typing import Any, cast

from epochlog.protocol.apis.api_versions import ApiVersion, ApiVersionsResponse
from epochlog.protocol.apis.init_producer_id import InitProducerIdResponse
from epochlog.protocol.apis.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from epochlog.protocol.apis.produce import (
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceResponse,
)
from epochlog.protocol.error_codes import ErrorCode
from epochlog.protocol.errors import ProtocolError
from epochlog.protocol.frames import FrameReceiver
from epochlog.protocol.frames import frame as size_prefixed
from epochlog.protocol.headers import (
    decode_request_header,
    encode_response_header,
    peek_request_header,
)
from epochlog.protocol.registry import APIS

PRODUCE, METADATA, API_VERSIONS, INIT_PRODUCER_ID = 0, 3, 18, 22
ANSWERED = (PRODUCE, METADATA, API_VERSIONS, INIT_PRODUCER_ID)
NODE_ID = 1
FSYNC_INTERVAL_S = 1.0  # as the raw server and the broker's default log_flush_interval_ms
IDLE_S_MAX = 300.0  # nothing received this long: stop (a bench that died leaves no sink behind)
BATCH_HEADER_BYTES = 61  # RecordBatch v2 header; records count is its last int32 (offset 57)
_I32 = struct.Struct(">i")

Ranges = dict[int, tuple[int, int]]  # API key -> (min version, max version)


def broker_ranges() -> Ranges:
    """What an epochlog broker's ApiVersions offers, read from its handler registry (importing
    the handler modules registers them; no broker code runs)."""
    from epochlog.broker.handlers import load_all

    return {key: (r.min_version, r.max_version) for key, r in sorted(load_all().items())}


def format_ranges(ranges: Ranges) -> str:
    return ",".join(f"{key}:{lo}-{hi}" for key, (lo, hi) in sorted(ranges.items()))


def parse_ranges(text: str) -> Ranges:
    ranges: Ranges = {}
    for item in text.split(","):
        key_text, _, span = item.partition(":")
        lo_text, _, hi_text = span.partition("-")
        ranges[int(key_text)] = (int(lo_text), int(hi_text))
    if API_VERSIONS not in ranges:
        raise ValueError("--versions must include ApiVersions (key 18)")
    for key, (lo, hi) in ranges.items():
        api = APIS.get(key)
        if key in ANSWERED and (api is None or not api.min_version <= lo <= hi <= api.max_version):
            raise ValueError(f"--versions: key {key} v{lo}-{hi} is outside what protocol/ codes")
    return ranges


def records_in(records: Any) -> tuple[int, int]:
    """(records, batches that are not RecordBatch v2) in a Produce partition's bytes, from each
    batch header's count and magic byte (no other checks)."""
    if records is None:
        return 0, 0
    count, not_v2, pos, end = 0, 0, 0, len(records)
    while end - pos >= BATCH_HEADER_BYTES:
        count += _I32.unpack_from(records, pos + 57)[0]
        not_v2 += records[pos + 16] != 2
        pos += 12 + _I32.unpack_from(records, pos + 8)[0]  # base offset, length, then the rest
    return count, not_v2


class SinkError(Exception):
    """A request this sink will not answer; its connection is closed."""


class KafkaSink:
    """The state the connections share: the file, the offsets, the counts."""

    def __init__(self, fd: int, ranges: Ranges, partitions: int, host: str) -> None:
        self.fd = fd
        self.ranges = ranges
        self.partitions = partitions
        self.host = host
        self.port = 0  # set once listening
        self.next_offset: dict[tuple[str, int], int] = collections.defaultdict(int)
        self.topics: dict[str, None] = {}  # names asked about, in order
        self.next_producer_id = 1000
        self.requests: collections.Counter[str] = collections.Counter()
        self.bytes_written = 0
        self.batches_not_v2 = 0
        self.last_active = time.monotonic()  # when bytes last came in, on any connection
        self.api_keys = [ApiVersion(key, lo, hi) for key, (lo, hi) in sorted(ranges.items())]

    def answer(self, request: bytearray) -> bytes | None:
        """The framed answer to one request frame, or None (acks=0)."""
        # The codec reads through the buffer protocol: records come out as views of the frame.
        data = cast(bytes, memoryview(request))
        key, version, correlation_id = peek_request_header(data)
        if key not in ANSWERED or key not in self.ranges:
            raise SinkError(f"API key {key} is not answered here")
        api = APIS[key]
        lo, hi = self.ranges[key]
        if not lo <= version <= hi:
            if key != API_VERSIONS:
                raise SinkError(f"{api.name} v{version} is not supported (v{lo}-{hi})")
            body = api.encode_response(ApiVersionsResponse(
                error_code=ErrorCode.UNSUPPORTED_VERSION, api_keys=self.api_keys), 0)
            return size_prefixed(encode_response_header(correlation_id, 0) + body)
        self.requests[f"{api.name} v{version}"] += 1
        result: Any
        if key == API_VERSIONS:  # its body (client name and version) is not needed
            result = ApiVersionsResponse(api_keys=self.api_keys)
        else:
            if key == PRODUCE:
                self.bytes_written += os.write(self.fd, request)
            _, pos = decode_request_header(data, api.request_header_version(version))
            message = api.decode_request(data, version, pos, strict=False)
            if key == PRODUCE:
                result = self.produce(message)
                if message.acks == 0:
                    return None
            elif key == METADATA:
                result = self.metadata(message)
            else:
                result = InitProducerIdResponse(producer_id=self.next_producer_id)
                self.next_producer_id += 1
            del message  # its views of the frame: the frame may then be recycled
        del data
        header = encode_response_header(correlation_id, api.response_header_version(version))
        return size_prefixed(header + api.encode_response(result, version))

    def produce(self, request: ProduceRequest) -> ProduceResponse:
        topics = []
        for topic in request.topic_data:
            partitions = []
            for data in topic.partition_data:
                where = (topic.name, data.index)
                base = self.next_offset[where]
                count, not_v2 = records_in(data.records)
                self.next_offset[where] = base + count
                self.batches_not_v2 += not_v2
                partitions.append(PartitionProduceResponse(index=data.index, base_offset=base,
                                                           log_start_offset=0))
            topics.append(TopicProduceResponse(name=topic.name, partition_responses=partitions))
        return ProduceResponse(responses=topics)

    def metadata(self, request: MetadataRequest) -> MetadataResponse:
        if request.topics is None:
            names: list[str | None] = list(self.topics)
        else:
            names = [t.name for t in request.topics]
        topics = []
        for name in names:
            if name is None:  # asked by topic id: no ids here
                topics.append(MetadataResponseTopic(error_code=ErrorCode.UNKNOWN_TOPIC_ID,
                                                    name=None))
                continue
            self.topics[name] = None
            topics.append(MetadataResponseTopic(name=name, partitions=[
                MetadataResponsePartition(partition_index=i, leader_id=NODE_ID, leader_epoch=0,
                                          replica_nodes=[NODE_ID], isr_nodes=[NODE_ID])
                for i in range(self.partitions)]))
        return MetadataResponse(
            brokers=[MetadataResponseBroker(node_id=NODE_ID, host=self.host, port=self.port)],
            cluster_id="raw-kafka-sink", controller_id=NODE_ID, topics=topics)


class SinkConnection(asyncio.BufferedProtocol):
    def __init__(self, sink: KafkaSink, connections: set[SinkConnection]) -> None:
        self.sink = sink
        self.connections = connections
        self.frames = FrameReceiver()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.connections.add(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.frames.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        assert self.transport is not None
        self.sink.last_active = time.monotonic()
        try:
            frames = self.frames.buffer_updated(nbytes)
            frames.reverse()
            while frames:
                request = frames.pop()
                answer = self.sink.answer(request)
                if answer is not None:
                    self.transport.write(answer)
                if sys.getrefcount(request) == 2:  # no view of it left (request, the argument)
                    self.frames.recycle(request)
        except (ProtocolError, SinkError) as exc:
            print(f"raw Kafka sink: closing a connection: {exc}", file=sys.stderr, flush=True)
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)


async def serve(path: str, ranges: Ranges, partitions: int, idle_s_max: float,
                host: str = "127.0.0.1") -> None:
    loop = asyncio.get_running_loop()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sink = KafkaSink(fd, ranges, partitions, host)
    connections: set[SinkConnection] = set()
    server = await loop.create_server(lambda: SinkConnection(sink, connections), host, 0)
    sink.port = server.sockets[0].getsockname()[1]
    print(sink.port, flush=True)
    stopping = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopping.set)

    async def fsync_every_second() -> None:
        while True:
            await asyncio.sleep(FSYNC_INTERVAL_S)
            await loop.run_in_executor(None, os.fsync, fd)
            if time.monotonic() - sink.last_active > idle_s_max:  # its parent is gone, likely
                print(f"raw Kafka sink: nothing received for {idle_s_max:g} s, stopping",
                      file=sys.stderr, flush=True)
                stopping.set()

    syncing = asyncio.ensure_future(fsync_every_second())
    try:
        await stopping.wait()
    finally:
        syncing.cancel()
        server.close()
        for conn in list(connections):
            if conn.transport is not None:
                conn.transport.abort()
        os.fsync(fd)
        os.close(fd)
    print(json.dumps({"requests": dict(sink.requests), "bytes_written": sink.bytes_written,
                      "offsets": {f"{t}-{p}": n for (t, p), n in sink.next_offset.items()},
                      "batches_not_v2": sink.batches_not_v2}),
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", help="file the Produce requests are appended to")
    parser.add_argument("--versions", default=None,
                        help="KEY:MIN-MAX,... advertised by ApiVersions (default: what an "
                             "epochlog broker advertises)")
    parser.add_argument("--partitions", type=int, default=1,
                        help="partitions of every topic in Metadata answers (default 1)")
    parser.add_argument("--idle-s-max", type=float, default=IDLE_S_MAX,
                        help=f"stop after this long with nothing received (default "
                             f"{IDLE_S_MAX:g})")
    args = parser.parse_args()
    ranges = parse_ranges(args.versions) if args.versions else broker_ranges()
    import uvloop
    uvloop.run(serve(args.path, ranges, args.partitions, args.idle_s_max))


if __name__ == "__main__":
    main()
