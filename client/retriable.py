"""Which errors the client retries, and how: one table for the producer, consumer and admin.

Whether an error may be retried at all is Kafka's Java classification, kept once in
protocol.error_codes (`info(code).retriable`, and `KafkaError.retriable` on every exception
class). These sets say, of the retriable errors, which ones mean that the metadata we hold is out
of date, so the request is retried only after a metadata refresh (otherwise it would go to the
same wrong broker again):

- STALE_LEADER: the broker we asked is not (or no longer, or not yet) the partition's leader, or
  cannot serve it right now;
- LEADER_EPOCH: our leader epoch and the broker's disagree (KIP-320, KIP-359): FENCED_LEADER_EPOCH
  (ours is older: newer metadata names the new leader) or UNKNOWN_LEADER_EPOCH (the broker is
  behind our metadata: retry after the backoff). The consumer treats these apart, because a fenced
  position must be validated against the new leader's log;
- STALE_METADATA: either.

Anything else retriable is retried after retry_backoff_ms as it is; anything not retriable fails.
"""

from __future__ import annotations

from epochlog.protocol.error_codes import ErrorCode as E
from epochlog.protocol.error_codes import is_retriable

STALE_LEADER = frozenset({E.NOT_LEADER_OR_FOLLOWER, E.UNKNOWN_TOPIC_OR_PARTITION,
                          E.LEADER_NOT_AVAILABLE, E.REPLICA_NOT_AVAILABLE,
                          E.KAFKA_STORAGE_ERROR})
LEADER_EPOCH = frozenset({E.FENCED_LEADER_EPOCH, E.UNKNOWN_LEADER_EPOCH})
STALE_METADATA = STALE_LEADER | LEADER_EPOCH

# Every code above must be one Kafka calls retriable: a refresh cannot fix a request.
assert all(is_retriable(code) for code in STALE_METADATA), "a stale-metadata error not retriable"


def refresh_before_retry(code: int) -> bool:
    """Whether an error means our metadata is stale (refresh it, then retry)."""
    return code in STALE_METADATA
