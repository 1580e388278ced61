"""Authorized operations, as Kafka answers them without an authorizer: every operation the
resource type supports (KIP-430), as a bit field with bit N set for operation code N.

Kafka's operation codes: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
CLUSTER_ACTION 9, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11, IDEMPOTENT_WRITE 12. A request that did
not ask gets INT32_MIN ("not requested").
"""

from __future__ import annotations

import enum


class AclOperation(enum.IntEnum):
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12


def bit_field(operations: frozenset[AclOperation]) -> int:
    return sum(1 << op for op in operations)


Op = AclOperation
UNREQUESTED = -(1 << 31)
TOPIC_OPERATIONS = bit_field(frozenset({Op.READ, Op.WRITE, Op.CREATE, Op.DELETE, Op.ALTER,
                                        Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}))
CLUSTER_OPERATIONS = bit_field(frozenset({Op.CREATE, Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION,
                                          Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS,
                                          Op.IDEMPOTENT_WRITE}))
GROUP_OPERATIONS = bit_field(frozenset({Op.READ, Op.DELETE, Op.DESCRIBE}))
