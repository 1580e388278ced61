"""Transactions (KIP-98): the transaction coordinator's state and its `__transaction_state` log.

Modules: log_records (the topic's records in Kafka's layouts), state (the coordinator's state
machine per transactional id, sans I/O).
"""
