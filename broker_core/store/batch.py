"""A batch of messages as columns: the append hot path works column by column.

Per-message Python work is what limits append throughput, so an append reads
every Message field once (one C-level attribute getter per message), and the
validation, encoding and dispatch steps then run as list comprehensions and
`map` calls over these columns instead of a Python loop body per message.
"""

from __future__ import annotations

from itertools import repeat
from operator import attrgetter
from typing import Sequence

from txmq.broker.store.message import Message
from txmq.broker.store.record import CRC_PREFIX

_FIELDS = ("topic", "body", "queue_id", "properties", "flag", "sys_flag", "born_timestamp", "born_host",
           "reconsume_times", "prepared_transaction_offset")
_ALL_FIELDS = attrgetter(*_FIELDS)


class BatchColumns:
    """The fields of a batch's messages, one sequence per field (same order as the batch).

    Validation has to encode the properties to check their size anyway, so it
    leaves them here for the encoder in one of two forms: `props_crc` (each
    message's encoded properties followed by the CRC property's name, i.e. the
    record's property string up to the CRC digits: the common case, one template
    format per message yields it) or `props_raw` (without the CRC property name).
    Either is derived from the other on demand.
    """

    __slots__ = ("messages", "count", "topics", "bodies", "queue_ids", "properties", "flags", "sys_flags",
                 "born_timestamps", "born_hosts", "reconsume_times", "prepared_offsets", "body_lens", "_props_raw",
                 "_props_crc")

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
        self._props_raw: list[bytes] | None = []
        self._props_crc: list[bytes] | None = None

    @property
    def props_raw(self) -> list[bytes]:
        """Each message's encoded properties, without the CRC property."""
        if self._props_raw is None:
            cut = -len(CRC_PREFIX)
            self._props_raw = [p[:cut] for p in self._props_crc]
        return self._props_raw

    @props_raw.setter
    def props_raw(self, value: list[bytes]) -> None:
        self._props_raw, self._props_crc = value, None

    @property
    def props_crc(self) -> list[bytes]:
        """Each message's encoded properties followed by the CRC property's name (CRC_PREFIX)."""
        if self._props_crc is None:
            self._props_crc = list(map(bytes.__add__, self._props_raw, repeat(CRC_PREFIX)))
        return self._props_crc

    @props_crc.setter
    def props_crc(self, value: list[bytes]) -> None:
        self._props_crc, self._props_raw = value, None
