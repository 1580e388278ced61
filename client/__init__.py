"""epochlog's asyncio client library. Its connection layer (client.connection) is shared with brokers and the controller."""
