"""The epochlog broker: storage, replication and the API handlers that serve Kafka clients."""
