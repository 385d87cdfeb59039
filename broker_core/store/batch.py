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

from txmq.broker.store.message import PROP_KEYS, PROP_TAGS, PROP_UNIQ_KEY, Message
from txmq.broker.store.checksum import crc32
from txmq.broker.store.record import decode_host, encode_host
from txmq.broker.store.record_layout import CRC_PREFIX
from txmq.broker.store.record_block import BlockLayout, RecordBlock


def _body_crcs(batch: "BatchColumns") -> Sequence[int]:
    return batch.body_crcs if batch.body_crcs is not None else list(map(crc32, batch.bodies))


def _encoded_born_hosts(batch: "BatchColumns") -> Sequence[bytes]:
    if batch.born_raws is not None:
        return batch.born_raws
    return [encode_host(h)[0] for h in batch.born_hosts]


_NO_PROPERTIES: dict[str, str] = {}
_DEFAULT_BORN_HOST = Message.__dataclass_fields__["born_host"].default

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

    __slots__ = ("_messages", "count", "topics", "bodies", "queue_ids", "properties", "flags", "sys_flags",
                 "born_timestamps", "born_hosts", "born_raws", "reconsume_times", "prepared_offsets", "body_lens",
                 "body_crcs", "dispatch", "_props_raw", "_props_crc", "block")

    def __init__(self, messages: Sequence[Message]) -> None:
        self._messages: Sequence[Message] | None = messages
        self.count = len(messages)
        if self.count == 1:
            columns = [(v,) for v in _ALL_FIELDS(messages[0])]
        else:
            columns = list(zip(*map(_ALL_FIELDS, messages)))
        (self.topics, self.bodies, self.queue_ids, self.properties, self.flags, self.sys_flags,
         self.born_timestamps, self.born_hosts, self.reconsume_times, self.prepared_offsets) = columns
        self.body_lens: list[int] = []  # filled by validation
        self.born_raws: Sequence[bytes] | None = None  # encoded BORNHOST per message when known
        self.body_crcs: Sequence[int] | None = None  # BODYCRC per message when known
        self.dispatch: tuple[list, list, list] | None = None  # (tags, UNIQ_KEY bytes, KEYS) when known
        self._props_raw: list[bytes] | None = []
        self._props_crc: list[bytes] | None = None
        self.block: RecordBlock | None = None

    @classmethod
    def of_columns(cls, *, topics: list[str], bodies: list, queue_ids: list[int], flags: list[int],
                   sys_flags: list[int], born_timestamps: list[int], born_raws: list[bytes],
                   reconsume_times: list[int], prepared_offsets: list[int], body_lens: list[int],
                   body_crcs: list[int], props_crc: list[bytes], tags: list, uniq_keys: list,
                   keys: list) -> "BatchColumns":
        """A batch that is already checked and encoded, given as columns (record copies): no
        Message objects and no property dicts. Hosts come encoded (BORNHOST bytes), bodies may
        be any buffers, and the dispatch inputs are given (see `dispatch_columns`)."""
        batch = cls.__new__(cls)
        batch._messages = None
        batch.count = len(topics)
        batch.topics, batch.bodies, batch.queue_ids, batch.flags, batch.sys_flags = (
            topics, bodies, queue_ids, flags, sys_flags)
        batch.born_timestamps, batch.born_raws, batch.reconsume_times = born_timestamps, born_raws, reconsume_times
        batch.prepared_offsets, batch.body_lens, batch.body_crcs = prepared_offsets, body_lens, body_crcs
        batch.born_hosts = None
        batch.properties = None
        batch.dispatch = (tags, uniq_keys, keys)
        batch._props_raw, batch._props_crc = None, props_crc
        batch.block = None
        return batch

    @classmethod
    def of_block(cls, block: RecordBlock, *, topics: list[str], queue_ids: list[int], sys_flags: list[int],
                 tags: list, uniq_keys: list, keys: list) -> "BatchColumns":
        """A checked and encoded batch given as a RecordBlock (record copies): the CommitLog encodes
        it column-wise (record_block). The per-record list columns (bodies, hosts, property
        strings...) are made only if something needs them (`fill_lists`)."""
        batch = cls.__new__(cls)
        batch._messages = None
        batch.count = len(topics)
        batch.topics, batch.queue_ids, batch.sys_flags = topics, queue_ids, sys_flags
        batch.properties = batch.born_hosts = None
        batch.bodies = batch.flags = batch.born_timestamps = batch.born_raws = batch.reconsume_times = None
        batch.prepared_offsets = batch.body_lens = batch.body_crcs = None
        batch.dispatch = (tags, uniq_keys, keys)
        batch._props_raw = batch._props_crc = None
        batch.block = block
        block.layout = BlockLayout(block, topics, queue_ids)  # ahead of the write, on the caller's thread
        return batch

    def fill_lists(self) -> None:
        """Make the list columns of a batch given as a RecordBlock (what the record-by-record
        encoders take), and drop the block."""
        if self.block is None or self.bodies is not None:
            return
        columns = self.block.list_columns()
        self._props_crc = columns.pop("props_crc")
        for name, value in columns.items():
            setattr(self, name, value)
        self.block = None

    @classmethod
    def of_bodies(cls, topics: list[str], bodies: list[bytes], queue_ids: list[int],
                  born_timestamp: int) -> "BatchColumns":
        """Messages that are a topic, a body and a queue, nothing else (most producers' and the
        Spark sink's rows), as columns: no Message objects; validated like any batch."""
        n = len(topics)
        batch = cls.__new__(cls)
        batch._messages = None
        batch.count = n
        batch.topics, batch.bodies, batch.queue_ids = topics, bodies, queue_ids
        batch.properties = [_NO_PROPERTIES] * n  # shared and never mutated
        batch.flags = batch.sys_flags = batch.reconsume_times = batch.prepared_offsets = [0] * n
        batch.born_timestamps = [born_timestamp] * n
        batch.born_hosts = [_DEFAULT_BORN_HOST] * n
        batch.born_raws = batch.body_crcs = batch.dispatch = None
        batch.body_lens = []
        batch._props_raw, batch._props_crc = [], None
        batch.block = None
        return batch

    def followed_by(self, other: "BatchColumns") -> "BatchColumns":
        """This checked and encoded batch, then `other`, as one batch (written as one group)."""
        self.fill_lists()
        other.fill_lists()
        a, b = self.dispatch_columns(), other.dispatch_columns()
        return BatchColumns.of_columns(
            topics=[*self.topics, *other.topics], bodies=[*self.bodies, *other.bodies],
            queue_ids=[*self.queue_ids, *other.queue_ids], flags=[*self.flags, *other.flags],
            sys_flags=[*self.sys_flags, *other.sys_flags],
            born_timestamps=[*self.born_timestamps, *other.born_timestamps],
            born_raws=[*_encoded_born_hosts(self), *_encoded_born_hosts(other)],
            reconsume_times=[*self.reconsume_times, *other.reconsume_times],
            prepared_offsets=[*self.prepared_offsets, *other.prepared_offsets],
            body_lens=[*self.body_lens, *other.body_lens],
            body_crcs=[*_body_crcs(self), *_body_crcs(other)], props_crc=[*self.props_crc, *other.props_crc],
            tags=[*a[0], *b[0]], uniq_keys=[*a[1], *b[1]], keys=[*a[2], *b[2]])

    @property
    def messages(self) -> Sequence[Message]:
        """The batch as Messages (what the general record encoder and the sequential validation
        take); built on first use for a batch given as columns (record copies come without
        properties: the encoder takes those encoded)."""
        if self._messages is None:
            self.fill_lists()
            if self.born_hosts is not None:
                born_hosts = self.born_hosts
            else:
                hosts = {raw: decode_host(raw) for raw in set(self.born_raws)}
                born_hosts = list(map(hosts.__getitem__, self.born_raws))
            properties = self.properties if self.properties is not None else repeat(None)
            self._messages = [
                Message(topic, bytes(body), qid, dict(props) if props else {}, flag, sys_flag, born_ts, born,
                        reconsume, prepared)
                for topic, body, qid, props, flag, sys_flag, born_ts, born, reconsume, prepared in zip(
                    self.topics, self.bodies, self.queue_ids, properties, self.flags, self.sys_flags,
                    self.born_timestamps, born_hosts, self.reconsume_times, self.prepared_offsets)]
        return self._messages

    def dispatch_columns(self) -> tuple[list, list, list]:
        """(TAGS, UNIQ_KEY, KEYS) per message, None where absent: what dispatch needs. UNIQ_KEY is a
        str for a batch of Messages, the stored bytes for one given as columns."""
        if self.dispatch is None:
            props = self.properties
            try:
                tags = list(map(dict.get, props, repeat(PROP_TAGS)))
                uniqs = list(map(dict.get, props, repeat(PROP_UNIQ_KEY)))
                keys = list(map(dict.get, props, repeat(PROP_KEYS)))
            except TypeError:  # properties that are not a dict (the slow validation path accepts a None)
                tags = [p.get(PROP_TAGS) if p else None for p in props]
                uniqs = [p.get(PROP_UNIQ_KEY) if p else None for p in props]
                keys = [p.get(PROP_KEYS) if p else None for p in props]
            self.dispatch = (tags, uniqs, keys)
        return self.dispatch

    @property
    def props_raw(self) -> list[bytes]:
        """Each message's encoded properties, without the CRC property."""
        self.fill_lists()
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
        self.fill_lists()
        if self._props_crc is None:
            self._props_crc = list(map(bytes.__add__, self._props_raw, repeat(CRC_PREFIX)))
        return self._props_crc

    @props_crc.setter
    def props_crc(self, value: list[bytes]) -> None:
        self._props_crc, self._props_raw = value, None
