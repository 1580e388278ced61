"""Consumer groups: the group coordinator (Kafka's), its state in `__consumer_offsets`.

- state.py: one group's membership state machine, sans-IO with an injected clock;
- offsets_log.py: Kafka's key/value record formats of the offsets topic;
- coordinator.py: the groups of the offsets partitions this broker leads (loading, unloading,
  parked requests, timers, appends through the leader's normal path).
The handlers (handlers/find_coordinator.py, join_group.py, ...) are thin: they translate.
"""
