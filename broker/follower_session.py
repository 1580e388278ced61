"""`FollowerSession`: a follower's side of an incremental fetch session (KIP-227), as Kafka's
FetchSessionHandler is for its replica fetcher.

Theory of operation
-------------------
Sans-IO: `SourceFetcher` says which partitions it wants fetched now, each with its request
parameters; this says what the Fetch request carries, and learns from the answer's session
fields (or a failure) what the next one can leave out. The leader's side is fetch_sessions.py.

    state                  next request                                 session_epoch
    ---------------------  -------------------------------------------  -------------
    no session (id 0)      full: every partition wanted                 0 (open one)
    session S, epoch n     incremental: partitions added or whose       n
                           parameters changed; forgotten: those no
                           longer wanted; unchanged ones are left out

    answer                                           then
    -----------------------------------------------  -----------------------------------------
    full, session_id S != 0                          session S, epoch 1
    full, session_id 0 (the leader keeps none)       no session: the next request is full too
    incremental, no error                            epoch n + 1 (wrapping to 1)
    FETCH_SESSION_ID_NOT_FOUND,                      no session: a full fetch next, at once;
      INVALID_FETCH_SESSION_EPOCH                    the partitions are not to blame
    any other top-level error, a lost connection,    the next request is full (epoch 0 with S,
      a timeout                                      which closes S on the leader: its view of
                                                     our parameters may differ from ours)

What the session holds is the parameters of the request last answered without error; a request
whose answer never came leaves the session's view unknown, hence the full fetch. An incremental
answer lists only partitions with news (records, a moved high watermark or log start, an error, a
diverging epoch); the others had none. No clock, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from epochlog.protocol.apis.fetch import FetchPartition
from epochlog.protocol.error_codes import ErrorCode

from .fetch_sessions import FINAL_EPOCH, INITIAL_EPOCH, NO_SESSION, next_epoch

TopicPartition = tuple[str, int]
Params = tuple[int, int, int, int, int]
SESSION_ERRORS = frozenset({ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
                            ErrorCode.INVALID_FETCH_SESSION_EPOCH})


def params(p: FetchPartition) -> Params:
    """What the leader's session keeps of a partition: a change in any is sent."""
    return (p.current_leader_epoch, p.fetch_offset, p.last_fetched_epoch, p.log_start_offset,
            p.partition_max_bytes)


def fetch_partition(index: int, want: Params) -> FetchPartition:
    """The request entry for a partition's parameters (the inverse of `params`)."""
    leader_epoch, fetch_offset, last_fetched_epoch, log_start_offset, max_bytes = want
    return FetchPartition(partition=index, current_leader_epoch=leader_epoch,
                          fetch_offset=fetch_offset, last_fetched_epoch=last_fetched_epoch,
                          log_start_offset=log_start_offset, partition_max_bytes=max_bytes)


@dataclass(frozen=True)
class Built:
    """One Fetch's session fields and partitions."""

    session_id: int
    session_epoch: int
    send: list[tuple[TopicPartition, Params]]  # the partitions the request names
    forget: list[TopicPartition]

    @property
    def full(self) -> bool:
        return self.session_epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FollowerSession:
    def __init__(self) -> None:
        self.session_id = NO_SESSION
        self.epoch = INITIAL_EPOCH  # the epoch the next request carries; 0: a full one
        self._held: dict[TopicPartition, Params] = {}  # the leader's view, as last answered
        self._pending: dict[TopicPartition, Params] | None = None  # the request on its way
        self.full_total = 0
        self.incremental_total = 0
        self.reset_total = 0  # sessions the leader refused (not found, wrong epoch)

    def build(self, wanted: dict[TopicPartition, Params]) -> Built:
        """The next request's session fields and partitions (`wanted` in the caller's order).
        Parameters, not request entries, so that an idle fetch of thousands of partitions
        builds no entry at all."""
        self._pending = wanted
        if self.epoch == INITIAL_EPOCH:
            self.full_total += 1
            return Built(self.session_id, INITIAL_EPOCH, list(wanted.items()), [])
        self.incremental_total += 1
        held = self._held
        send = [(tp, want) for tp, want in wanted.items() if held.get(tp) != want]
        forget = [tp for tp in held if tp not in wanted]
        return Built(self.session_id, self.epoch, send, forget)

    def on_answer(self, error_code: int, session_id: int) -> bool:
        """The answer to the request built last; False when it is to be ignored (its
        partitions carry nothing: a session error, a full fetch next)."""
        pending, self._pending = self._pending, None
        assert pending is not None, "a fetch answer without a request built"
        if error_code in SESSION_ERRORS:
            self.reset_total += 1
            self._forget_session()
            return False
        if error_code:
            self._close_next()
            return True
        if self.epoch == INITIAL_EPOCH:
            self.session_id = session_id  # 0: the leader keeps no session for us
            self.epoch = next_epoch(INITIAL_EPOCH) if session_id != NO_SESSION else INITIAL_EPOCH
        elif session_id != self.session_id:  # the leader closed it (it held nothing)
            self._forget_session()
            return True
        else:
            self.epoch = next_epoch(self.epoch)
        self._held = pending
        return True

    def on_failure(self) -> None:
        """No answer (a lost connection, a timeout): the leader's view is unknown."""
        self._pending = None
        self._close_next()

    def _close_next(self) -> None:
        self.epoch = INITIAL_EPOCH  # with our id: the leader closes it and opens another
        self._held = {}

    def _forget_session(self) -> None:
        self.session_id = NO_SESSION
        self._close_next()
