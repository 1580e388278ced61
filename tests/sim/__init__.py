"""Deterministic simulation of an epochlog cluster (issue 5, "Tests", first bullet).

The real controller state machine (`controller.state.ControllerState`, driven the way
`controller/service.py` and `controller/sender.py` drive it) and the real broker replica state
machines (`broker.replicas.ReplicaManager`, `broker.partition.Partition` over real
`broker.storage` logs in a temp dir) run in one process, on one simulated clock, over a simulated
network, with faults (crashes, pauses, lost and delayed messages, restarts, network partitions),
all drawn from one `random.Random(seed)`. Checkers watch safety properties while it runs and at
the end. A failing seed replays exactly: `python -m tests.sim SEED [--verbose]`.

Modules: scheduler (clock, event heap, nodes that crash and pause), network (links, loss, delay,
partitions, the real codec now and then), controller_node, broker_node, producer, faults, checkers,
harness (one run), `__main__` (replay), test_simulation (the CI runs). See docs/simulation.md.

The consumer group simulation (`python -m tests.sim --group SEED`) runs the real member state
machine (`client.group_member`) against the broker's real group coordinator core
(`broker.groups.core.GroupCore`, over `broker.groups.state.Group`) on the same scheduler and
network: group_coordinator, group_member_node, group_checkers, group_harness,
test_group_simulation.

The transaction simulation (`python -m tests.sim --txn SEED`) runs the broker's real transaction
coordinator core (`broker.txn.core.TxnCore` over `broker.txn.state.TxnState`, its log records,
`broker.txn.markers_left`) and real storage logs (their producer state judges every batch and
marker) against transactional producers: txn_partitions, txn_markers, txn_coordinator,
txn_broker, txn_producer, txn_checkers, txn_harness, test_txn_simulation.

Both drive their core as the broker's asyncio shell does (core_driver); trace puts the real
code's log lines in a verbose run's trace.
"""
