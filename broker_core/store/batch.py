"""A batch of messages as columns: the append hot path works column by column.

Per-message Python work is what limits append throughput, so an append reads
every Message field once (one C-level attribute getter per message), and the
validation, encoding and dispatch steps then run as list comprehensions and
`map` calls over these columns instead of a Python loop body per message.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Sequence

from txmq.broker.store.message import Message

_FIELDS = ("topic", "body", "queue_id", "properties", "flag", "sys_flag", "born_timestamp", "born_host",
           "reconsume_times", "prepared_transaction_offset")
_ALL_FIELDS = attrgetter(*_FIELDS)


class BatchColumns:
    """The fields of a batch's messages, one sequence per field (same order as the batch).

    `props_raw` (each message's encoded properties, without the CRC property) is
    filled by validation, which has to encode them to check their size anyway.
    """

    __slots__ = ("messages", "count", "topics", "bodies", "queue_ids", "properties", "flags", "sys_flags",
                 "born_timestamps", "born_hosts", "reconsume_times", "prepared_offsets", "body_lens", "props_raw")

    def __init__(self, messages: Sequence[Message]) -> None:
        self.messages = messages
        self.count = len(messages)
        if self.count == 1:
            columns = [(v,) for v in _ALL_FIELDS(messages[0])]
        else:
            columns = list(zip(*map(_ALL_FIELDS, messages)))
        (self.topics, self.bodies, self.queue_ids, self.properties, self.flags, self.sys_flags,
         self.born_timestamps, self.born_hosts, self.reconsume_times, self.prepared_offsets) = columns
        self.body_lens: list[int] = []  # filled by validation
        self.props_raw: list[bytes] = []
