"""The message model shared by the store, the transaction engine and the server.

`Message` is what a producer hands the store; `StoredMessage` is what a reader
gets back from the CommitLog, with the fields the store assigned (offsets,
store time, offset message id). Both are plain dataclasses: the record codec in
`record.py` turns them into RocketMQ's on-disk layout and back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator, NamedTuple, Sequence, TypeVar

T = TypeVar("T")

# --- reserved property names (RocketMQ's MessageConst where one exists) --------
PROP_KEYS = "KEYS"  # message keys, joined by a single space
PROP_TAGS = "TAGS"
PROP_UNIQ_KEY = "UNIQ_KEY"  # the client's message id
PROP_TRANSACTION_ID = "__transactionId__"
PROP_TRAN_MSG = "TRAN_MSG"  # "true" on transactional messages
PROP_REAL_TOPIC = "REAL_TOPIC"
PROP_REAL_QUEUE_ID = "REAL_QID"
PROP_PRODUCER_GROUP = "PGROUP"
PROP_DELAY_LEVEL = "DELAY"
PROP_DELIVER_TIME_MS = "__STARTDELIVERTIME"
PROP_TIMER_DELIVER_MS = "TIMER_DELIVER_MS"
PROP_CHECK_IMMUNITY_SECONDS = "CHECK_IMMUNITY_TIME_IN_SECONDS"
PROP_TRANSACTION_CHECK_TIMES = "TRANSACTION_CHECK_TIMES"
PROP_SHARDING_KEY = "__SHARDINGKEY"  # FIFO message group
PROP_BORN_HOST = "__BORNHOST"
PROP_CRC32 = "__CRC32#"  # whole-record CRC, always the last property (txmq addition)
# txmq additions for multi-sender transactions
PROP_TX_SENDER = "__TXMQ_SENDER"  # who added this half (e.g. "sinkid/batch/partition/attempt")
# txmq addition for timer messages: on a delivered copy, the queue offset of its scheduled
# original in TIMER_TOPIC (so a restart knows it was delivered)
PROP_TIMER_OF = "__TXMQ_TIMER_OF"

# --- system topics -------------------------------------------------------------
HALF_TOPIC = "RMQ_SYS_TRANS_HALF_TOPIC"
OP_HALF_TOPIC = "RMQ_SYS_TRANS_OP_HALF_TOPIC"
CHECK_MAX_TIME_TOPIC = "TRANS_CHECK_MAX_TIME_TOPIC"
# timer (delay) messages wait in TIMER_TOPIC until due; each delivery writes a marker to
# TIMER_DELIVERED_TOPIC in the same atomic group as the delivered copy (broker_core/timer/)
TIMER_TOPIC = "rmq_sys_wheel_timer"
TIMER_DELIVERED_TOPIC = "TXMQ_SYS_TIMER_DELIVERED"
# a COMMIT by reference's commit records: their slots publish its halves (store/commit_ref.py)
COMMIT_REF_TOPIC = "TXMQ_SYS_COMMIT_REF"
SYSTEM_TOPICS = frozenset({HALF_TOPIC, OP_HALF_TOPIC, CHECK_MAX_TIME_TOPIC, TIMER_TOPIC, TIMER_DELIVERED_TOPIC,
                           COMMIT_REF_TOPIC})

# --- SYSFLAG bits (RocketMQ MessageSysFlag, plus txmq's group bits) ------------
SYSFLAG_COMPRESSED = 0x1
SYSFLAG_MULTI_TAGS = 0x2
SYSFLAG_TRANSACTION_NOT_TYPE = 0x0
SYSFLAG_TRANSACTION_PREPARED = 0x1 << 2
SYSFLAG_TRANSACTION_COMMIT = 0x2 << 2
SYSFLAG_TRANSACTION_ROLLBACK = 0x3 << 2
SYSFLAG_TRANSACTION_MASK = 0x3 << 2
SYSFLAG_BORNHOST_V6 = 0x1 << 4
SYSFLAG_STOREHOST_V6 = 0x1 << 5
# An atomic group is a run of records appended in one write: every record but the
# last carries GROUP_MEMBER, the last carries GROUP_END. Recovery truncates a
# group whose GROUP_END record is missing, so a group is all-or-nothing.
SYSFLAG_GROUP_MEMBER = 0x1 << 16
SYSFLAG_GROUP_END = 0x1 << 17
# A split group is an atomic group written in several parts, with other writers'
# records allowed between the parts (a COMMIT of a large transaction must not stop
# every other producer for its whole copy). Each of its records carries
# SPLIT_GROUP, the first also GROUP_BEGIN, the last also GROUP_END. One split
# group is written at a time, so recovery pairs an END with the latest BEGIN; a
# split group without its END is never dispatched.
SYSFLAG_SPLIT_GROUP = 0x1 << 18
SYSFLAG_GROUP_BEGIN = 0x1 << 19
SYSFLAG_GROUP_BITS = SYSFLAG_GROUP_MEMBER | SYSFLAG_GROUP_END | SYSFLAG_SPLIT_GROUP | SYSFLAG_GROUP_BEGIN


@dataclass(slots=True)
class Message:
    """A message as a producer hands it to the store.

    `queue_id` is chosen by the caller (the server selects queues); the store
    assigns the queue offset. `properties` holds both RocketMQ's reserved
    properties (KEYS, TAGS, UNIQ_KEY, ...) and user properties.
    """

    topic: str
    body: bytes
    queue_id: int = 0
    properties: dict[str, str] = field(default_factory=dict)
    flag: int = 0
    sys_flag: int = 0
    born_timestamp: int = 0  # ms since epoch; 0 = store time
    born_host: tuple[str, int] = ("127.0.0.1", 0)
    reconsume_times: int = 0
    prepared_transaction_offset: int = 0

    @property
    def tags(self) -> str | None:
        return self.properties.get(PROP_TAGS)

    @property
    def keys(self) -> list[str]:
        raw = self.properties.get(PROP_KEYS)
        return raw.split(" ") if raw else []

    @property
    def unique_key(self) -> str | None:
        return self.properties.get(PROP_UNIQ_KEY)

    @property
    def transaction_id(self) -> str | None:
        return self.properties.get(PROP_TRANSACTION_ID)


@dataclass(slots=True)
class StoredMessage(Message):
    """A record read back from the CommitLog, with the fields the store assigned."""

    queue_offset: int = 0
    physical_offset: int = 0
    store_timestamp: int = 0
    store_host: tuple[str, int] = ("127.0.0.1", 0)
    body_crc: int = 0
    size: int = 0  # TOTALSIZE of the record
    msg_id: str = ""  # offset message id (store host + port + physical offset, hex)


class AppendResult(NamedTuple):
    """Where one appended message landed.

    Immutable, with named fields, like a frozen dataclass; a NamedTuple because one
    is built per appended message and a tuple is built by C code (the store makes a
    batch's results with one `map`), several times cheaper than a dataclass instance.
    """

    topic: str
    queue_id: int
    queue_offset: int
    physical_offset: int
    size: int
    msg_id: str  # offset message id
    store_timestamp: int


class LazyList(Sequence[T]):
    """A list whose items are made on first use (all at once), its length known up front.

    The store's writes produce a row per record that many callers never look at (see
    AppendResults; dispatch listeners that only ask whether anything was dispatched,
    after a COMMIT of a million records). Reads like a list: len, index, slice (a
    list), iteration, == with a list.
    """

    __slots__ = ("_count", "_build", "_items")

    def __init__(self, count: int, build: Callable[[], list[T]]) -> None:
        self._count = count
        self._build: Callable[[], list[T]] | None = build
        self._items: list[T] | None = None

    def _list(self) -> list[T]:
        items = self._items
        if items is None:
            build = self._build
            if build is None:  # another thread has just built them
                return self._items  # type: ignore[return-value]
            items = self._items = build()  # two threads may both build: same values
            self._build = None
        return items

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, index):
        return self._list()[index]

    def __iter__(self) -> Iterator[T]:
        return iter(self._list())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (list, LazyList)):
            return self._list() == list(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # like a list

    def __repr__(self) -> str:
        return repr(self._list())


class AppendResults(LazyList[AppendResult]):
    """The results of one append, in batch order, built on first use.

    An append produces a result per message, but many callers never look at them
    (a transaction's op record, a DLQ copy, a send whose client wants no ids), and
    building them, offset message ids included, is a sizeable part of an append's
    cost. So the store hands back the columns it has anyway and the AppendResult
    tuples are made when first read.
    `columns` (when the store sets it) is (queue offsets, physical offsets, sizes), one list
    each (the physical offsets may have one extra item, the end of the batch).
    `end` is the log's end after the write: what MessageStore.acknowledge takes.
    """

    __slots__ = ("columns", "end")

    def __init__(self, count: int, build: Callable[[], list[AppendResult]], end: int = 0) -> None:
        super().__init__(count, build)
        self.columns: tuple[list[int], list[int], list[int]] | None = None
        self.end = end
