"""Incremental fetch sessions (KIP-227): the broker remembers what a fetcher asks for.

Theory of operation
-------------------
A fetcher that keeps reading the same partitions need not list them all in every Fetch (v7+).
Its request carries (session_id, session_epoch):

    session_id  epoch   meaning                                         answer's session_id
    ----------  ------  ----------------------------------------------  -------------------
    0           -1      a full fetch, no session (every pre-v7 fetch)   0
    0           0       a full fetch that opens a session               the new id (0: none)
    S           0       close S, then as (0, 0)                         the new id
    S           -1      close S; a full fetch, no session               0
    S           n > 0   incremental: the request lists only partitions  S
                        added or changed since, and forgotten ones

An incremental request must carry the epoch the session expects (it rises by one per request,
wrapping from 2**31-1 to 1), else INVALID_FETCH_SESSION_EPOCH; an unknown S is
FETCH_SESSION_ID_NOT_FOUND. Both answer with no partitions and session_id 0; the client then
opens a new session with a full fetch. A session left with no partitions is closed.

The answer to an incremental request lists only partitions with something new: records, a
changed high watermark or log start offset, an error, a preferred read replica or a diverging
epoch. A full answer lists every partition. What the fetcher was last told (high watermark, log
start) is kept per partition, updated only for partitions an answer lists; an error sets the
remembered high watermark to -1 so the partition is listed again once the error clears. Listed
partitions move to the back of the session's order, so a byte limit cannot starve the others.

Bounds: at most `sessions_max` sessions; opening one more evicts the least recently used (its
fetcher gets FETCH_SESSION_ID_NOT_FOUND next time and starts over). Session ids come from an
injected random generator (a simulation seeds it), never 0, never one in use. No clock, no I/O.
"""

from __future__ import annotations

import enum
import logging
import random
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from epochlog.protocol.apis.fetch import FetchPartition, FetchRequest, FetchTopic, ForgottenTopic
from epochlog.protocol.error_codes import ErrorCode

log = logging.getLogger("epochlog.broker")

NO_SESSION = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
EPOCH_MAX = (1 << 31) - 1
SESSION_ID_MAX = (1 << 31) - 1
TopicPartition = tuple[str, int]


def next_epoch(epoch: int) -> int:
    return 1 if epoch >= EPOCH_MAX else epoch + 1


@dataclass
class SessionPartition:
    want: FetchPartition  # the fetcher's latest parameters for it
    high_watermark: int = -1  # as the fetcher was last told; -1: list it next time
    log_start_offset: int = -1


@dataclass(eq=False)
class FetchSession:
    session_id: int
    replica_id: int
    epoch: int  # the epoch the next incremental request must carry
    partitions: OrderedDict[TopicPartition, SessionPartition] = field(default_factory=OrderedDict)

    def wants(self) -> list[tuple[str, FetchPartition]]:
        return [(topic, part.want) for (topic, _), part in self.partitions.items()]

    def update(self, topics: Sequence[FetchTopic], forgotten: Sequence[ForgottenTopic]) -> None:
        """An incremental request: its partitions are added or replace ours; forgotten go."""
        for t in topics:
            for p in t.partitions:
                known = self.partitions.get((t.topic, p.partition))
                if known is None:
                    self.partitions[(t.topic, p.partition)] = SessionPartition(p)
                else:
                    known.want = p
        for f in forgotten:
            for index in f.partitions:
                self.partitions.pop((f.topic, index), None)


class Kind(enum.Enum):
    SESSIONLESS = "sessionless"  # a full fetch, answered with session_id 0
    FULL = "full"  # a full fetch that opened `session`
    INCREMENTAL = "incremental"
    ERROR = "error"


@dataclass(frozen=True)
class Begun:
    kind: Kind
    session: FetchSession | None = None
    error_code: int = 0

    @property
    def session_id(self) -> int:
        return self.session.session_id if self.session is not None else NO_SESSION


class FetchSessionCache:
    def __init__(self, sessions_max: int, rng: random.Random | None = None) -> None:
        assert sessions_max >= 0
        self.sessions_max = sessions_max
        self.rng = rng if rng is not None else random.Random()
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # least recent first
        self.opened_total = 0
        self.closed_total = 0
        self.evicted_total = 0
        self.incremental_total = 0  # incremental requests served
        self.refused: dict[str, int] = {}  # error name -> count

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def begin(self, request: FetchRequest) -> Begun:
        """Resolve a Fetch's session fields (the table above); mutates the cache."""
        sid, epoch = request.session_id, request.session_epoch
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if sid != NO_SESSION and self._sessions.pop(sid, None) is not None:
                self.closed_total += 1
            if epoch == FINAL_EPOCH or self.sessions_max == 0:
                return Begun(Kind.SESSIONLESS)
            return Begun(Kind.FULL, self._open(request))
        session = self._sessions.get(sid)
        if session is None or session.replica_id != request.replica_id:
            return self._refuse(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if epoch != session.epoch:
            return self._refuse(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        session.update(request.topics, request.forgotten_topics_data)
        session.epoch = next_epoch(epoch)
        self._sessions.move_to_end(sid)
        if not session.partitions:
            del self._sessions[sid]
            self.closed_total += 1
            return Begun(Kind.SESSIONLESS)
        self.incremental_total += 1
        return Begun(Kind.INCREMENTAL, session)

    def _refuse(self, error: ErrorCode) -> Begun:
        self.refused[error.name] = self.refused.get(error.name, 0) + 1
        return Begun(Kind.ERROR, error_code=int(error))

    def _open(self, request: FetchRequest) -> FetchSession:
        while len(self._sessions) >= self.sessions_max:
            self._sessions.popitem(last=False)
            self.evicted_total += 1
        sid = self.rng.randint(1, SESSION_ID_MAX)
        while sid in self._sessions:
            sid = self.rng.randint(1, SESSION_ID_MAX)
        session = FetchSession(sid, request.replica_id, next_epoch(INITIAL_EPOCH))
        session.update(request.topics, ())
        self._sessions[sid] = session
        self.opened_total += 1
        log.debug("fetch session %d opened for replica %d with %d partitions", sid,
                  request.replica_id, len(session.partitions))
        return session


def must_answer(part: SessionPartition, high_watermark: int, log_start_offset: int,
                has_records: bool, error_code: int, flagged: bool) -> bool:
    """Whether an incremental answer lists this partition (`flagged`: a preferred read replica
    or a diverging epoch to tell)."""
    return (has_records or error_code != 0 or flagged or high_watermark != part.high_watermark
            or log_start_offset != part.log_start_offset)


def remember(session: FetchSession, answered: Iterable[tuple[TopicPartition, int, int, int]]
             ) -> None:
    """Note what an answer told the fetcher: (partition, high watermark, log start, error) for
    each partition it listed, which then moves to the back of the session's order."""
    for tp, high_watermark, log_start_offset, error_code in answered:
        part = session.partitions.get(tp)
        if part is None:
            continue
        part.high_watermark = -1 if error_code else high_watermark
        part.log_start_offset = log_start_offset
        session.partitions.move_to_end(tp)
