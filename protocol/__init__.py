"""epochlog's sans-IO Kafka wire codec: bytes in, typed messages out, bytes back.

No module here does I/O or imports asyncio. The parts:
- schema: how messages are declared (typed msgspec classes whose annotations carry the layout);
- codegen: fast encoders/decoders generated from those declarations;
- reference: the same layouts built from construct primitives (primitives), used to name the
  field where bad input broke and to cross-check the fast codec in tests;
- apis/*: one module per API key; registry: all of them by key;
- headers, frames: request/response headers and size-prefixed frames with a size limit;
- batch, records: RecordBatch v2 (headers, CRC-32C, stamping; records and compression);
- error_codes: Kafka's error codes.
"""
