"""What each page shows, read from the brokers through the public client.

A view is plain data (dataclasses) built from native calls on a ClusterClient: the templates
only lay it out. Groups without a leader (electing) are shown, and their figures are left out
rather than guessed.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Iterable

from txmq.broker import errors
from txmq.broker.client.cluster_client import ClusterClient
from txmq.broker.client.types import (Election, GroupMember, GroupStatus, PendingGroup, ReceivedMessage, ScheduledMessage,
                                     TopicInfo, TransactionInfo)

SINGLE = ""  # the group name of a broker that is not in a cluster


def group_label(name: str) -> str:
    return name or "(single broker)"


def live_groups(cc: ClusterClient) -> list[str]:
    """The groups with a leader (a lone broker's one group always), from routes at most the
    client's route TTL old: a Routes answer lists every topic, too dear to ask per call."""
    routes = cc.routes()
    if not routes.cluster:
        return [SINGLE]
    return sorted(g for g in routes.groups if routes.leaders.get(g))


# ---- cluster ---------------------------------------------------------------------------

@dataclass
class ClusterView:
    cluster: bool
    groups: list[GroupStatus]
    unreachable: list[str] = field(default_factory=list)  # groups no broker would report on

    @property
    def elections(self) -> list[tuple[str, Election]]:
        """Every group's elections etcd recorded, newest first."""
        return sorted(((g.name, e) for g in self.groups for e in g.elections), key=lambda ge: -ge[1].at_ms)

    def epoch_chart(self) -> dict:
        """Each group's epoch over time (a step at each election) for the Cluster page's uPlot."""
        times = sorted({e.at_ms for g in self.groups for e in g.elections})
        series = []
        for g in self.groups:
            by_time = sorted((e.at_ms, e.epoch) for e in g.elections)
            values, i, epoch = [], 0, None
            for t in times:
                while i < len(by_time) and by_time[i][0] <= t:
                    epoch, i = by_time[i][1], i + 1
                values.append(epoch)
            series.append({"label": group_label(g.name), "values": values})
        return {"x": [t / 1000 for t in times], "series": series, "unit": "epoch", "stepped": True}


def cluster_view(cc: ClusterClient) -> ClusterView:
    """Every group's replicas, asked of the first broker that answers (each reads the same etcd):
    the groups known from cached routes first, then from fresh ones (a leader may have died)."""
    last: Exception | None = None
    for refresh in (False, True):
        routes = cc.routes(refresh=refresh)
        names = sorted(routes.groups) if routes.cluster else [SINGLE]
        for name in [g for g in names if routes.leaders.get(g) or not routes.cluster]:
            try:
                groups = cc.group(name).cluster_status()
            except (errors.BrokerUnavailable, errors.NotLeader, errors.RequestTimeout) as exc:
                last = exc
                continue
            shown = {g.name for g in groups}
            return ClusterView(routes.cluster, groups, [g for g in names if g not in shown])
    raise errors.BrokerUnavailable(f"no broker answered ClusterStatus: {last}")


# ---- transactions ----------------------------------------------------------------------

@dataclass
class TransactionsView:
    pending: list[tuple[str, PendingGroup]]  # (broker group, counts by producer group and topic)
    oldest: list[tuple[str, TransactionInfo]]  # the oldest pending transactions, each with its group
    discarded: list[tuple[str, TransactionInfo]]
    totals: dict[str, int]


def transactions_view(cc: ClusterClient, *, rows: int = 50) -> TransactionsView:
    pending, oldest, discarded = [], [], []
    discarded_count = 0
    for name in live_groups(cc):
        client = cc.group(name)
        summary, n_discarded = client.transaction_summary()
        pending += [(name, p) for p in summary]
        discarded_count += n_discarded
        oldest += [(name, t) for t in client.list_transactions(state="PENDING", limit=rows)]
        if n_discarded:
            discarded += [(name, t) for t in client.list_transactions(state="DISCARDED", limit=rows)]
    oldest.sort(key=lambda gt: -gt[1].age_ms)
    totals = {"pending": sum(p.transactions for _, p in pending), "discarded": discarded_count}
    return TransactionsView(pending, oldest[:rows], discarded[:rows], totals)


# ---- timers ----------------------------------------------------------------------------

@dataclass
class TimersView:
    pending: int
    bucket_ms: int
    buckets: list[tuple[int, int]]  # (bucket start ms, messages due in it) over every group, by time
    soonest: list[tuple[str, ScheduledMessage]]  # the next due, each with its broker group


def timers_view(cc: ClusterClient, *, rows: int = 50) -> TimersView:
    """Scheduled messages by due time over every group: each group is asked with the widest
    bucket any group picked, so their histograms add up."""
    names = live_groups(cc)
    answers = {name: cc.group(name).list_scheduled(limit=rows) for name in names}
    bucket_ms = max((a.bucket_ms for a in answers.values() if a.pending), default=1000)
    for name, a in answers.items():
        if a.pending and a.bucket_ms != bucket_ms:
            answers[name] = cc.group(name).list_scheduled(bucket_ms=bucket_ms, limit=rows)
    buckets: dict[int, int] = {}
    for a in answers.values():
        for start, count in a.buckets:
            buckets[start] = buckets.get(start, 0) + count
    soonest = sorted(((name, m) for name, a in answers.items() for m in a.soonest), key=lambda nm: nm[1].deliver_ms)
    return TimersView(sum(a.pending for a in answers.values()), bucket_ms, sorted(buckets.items()), soonest[:rows])


def recall(cc: ClusterClient, group: str, topic: str, recall_handle: str) -> str:
    return cc.group(group).recall_scheduled(topic, recall_handle)


# ---- topics ----------------------------------------------------------------------------

@dataclass
class QueueRow:
    group: str
    queue_id: int
    min_offset: int
    max_offset: int


@dataclass
class TopicRow:
    """A topic over every group; its queue rows are built only for the topics a page shows
    (1,000 topics' 4,000 rows cost more than the ListTopics call itself)."""

    name: str
    message_type: str
    parts: list[tuple[str, TopicInfo]]  # (broker group, that group's queues of the topic)

    @property
    def queues(self) -> list[QueueRow]:
        return [QueueRow(g, q, r.min_offset, r.max_offset) for g, t in self.parts for q, r in sorted(t.queues.items())]

    @property
    def messages(self) -> int:
        return sum(r.max_offset - r.min_offset for _, t in self.parts for r in t.queues.values())

    @property
    def end(self) -> int:
        return sum(r.max_offset for _, t in self.parts for r in t.queues.values())

    @property
    def groups(self) -> list[str]:
        return sorted({g for g, _ in self.parts})


def topics_view(cc: ClusterClient, *, include_system: bool = False) -> list[TopicRow]:
    """Each topic with its queues on every group (one ListTopics call per group)."""
    topics: dict[str, TopicRow] = {}
    for name in live_groups(cc):
        for t in cc.group(name).list_topics(include_system=include_system):
            row = topics.get(t.name)
            if row is None:
                row = topics[t.name] = TopicRow(t.name, t.message_type, [])
            row.parts.append((name, t))
    return [topics[n] for n in sorted(topics)]


# ---- consumer groups -------------------------------------------------------------------

@dataclass
class LagRow:
    group: str  # broker group
    topic: str
    queue_id: int
    committed: int
    max_offset: int
    lag: int


@dataclass
class MemberRow:
    """A live member as RocketMQ Dashboard's consumer connections show it, with its queues."""
    client_id: str
    address: str
    client: str
    heartbeat_age_s: float
    holds: str  # "pop: any queue", or its queues as topic group/queue, ...

    @staticmethod
    def of(m: GroupMember, now_ms: int) -> "MemberRow":
        if m.pop:
            holds = "pop: any queue"
        else:
            holds = ", ".join(f"{t} {g + '/' if g else ''}{q}" for t, g, q in m.queues) or "none"
        return MemberRow(m.client_id, m.address, m.client, max(0.0, (now_ms - m.last_heartbeat_ms) / 1000), holds)


@dataclass
class ConsumerGroupRow:
    name: str
    fifo: bool
    retry_max_times: int
    members: list[MemberRow]
    lag: list[LagRow]

    @property
    def total_lag(self) -> int:
        return sum(r.lag for r in self.lag)


def consumer_group_names(cc: ClusterClient) -> list[str]:
    names: set[str] = set()
    for name in live_groups(cc):
        names |= {g.name for g in cc.group(name).list_consumer_groups()}
    return sorted(names)


def consumer_group_view(cc: ClusterClient, consumer_group: str) -> ConsumerGroupRow:
    lag: list[LagRow] = []
    settings = None
    for name in live_groups(cc):
        client = cc.group(name)
        try:
            settings = settings or client.describe_consumer_group(consumer_group)
        except errors.ConsumerGroupNotFound:
            pass
        try:
            per_topic = client.group_lag(consumer_group)
        except errors.ConsumerGroupNotFound:  # nothing committed on this group's queues
            per_topic = {}
        lag += [LagRow(name, t, q, e.committed, e.max_offset, e.lag)
                for t, qs in sorted(per_topic.items()) for q, e in sorted(qs.items())]
    now_ms = int(time.time() * 1000)
    try:
        members = [MemberRow.of(m, now_ms) for m in cc.list_group_members(consumer_group)]
    except errors.Unsupported:  # a broker of a release before ListGroupMembers (a rolling upgrade)
        members = []
    if settings is None and not lag and not members:
        raise errors.ConsumerGroupNotFound(f"consumer group {consumer_group!r} has no settings, offsets or members")
    return ConsumerGroupRow(consumer_group, settings.fifo if settings else False,
                            settings.retry_max_times if settings else 16, members, lag)


def consumer_groups_view(cc: ClusterClient) -> list[ConsumerGroupRow]:
    return [consumer_group_view(cc, n) for n in consumer_group_names(cc)]


def reset_offsets(cc: ClusterClient, consumer_group: str, topic: str, to: str, at_ms: int | None = None) -> None:
    """Move a consumer group's committed offsets of `topic` to its queues' start, end, or (to
    "time") each queue's first message stored at or after `at_ms`, as RocketMQ's reset by time."""
    if to == "time":
        if at_ms is None:
            raise errors.BadRequest("a reset to a time needs the time")
        ends = cc.offsets_for_timestamp([topic], at_ms)
    else:
        ends = cc.min_offsets([topic]) if to == "earliest" else cc.snapshot_offsets([topic])
    cc.commit_offsets(consumer_group, ends)


# ---- messages --------------------------------------------------------------------------

@dataclass
class MessagePath:
    message: ReceivedMessage
    group: str
    steps: list[str]
    preview_kind: str  # json, text or hex
    preview: str


def body_preview(body: bytes, limit: int = 4096) -> tuple[str, str]:
    head = body[:limit]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return "hex", " ".join(f"{b:02x}" for b in head[:1024])
    try:
        return "json", json.dumps(json.loads(body), indent=2)[:limit]
    except ValueError:
        return "text", text


def _path(m: ReceivedMessage, group: str) -> list[str]:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(m.store_timestamp_ms / 1000))
    steps = []
    if m.transaction_id:
        steps += [f"half stored in transaction {m.transaction_id}", "transaction COMMIT"]
    where = f" on group {group}" if group else ""
    origin = m.properties.get("ORIGIN_TOPIC")
    if origin:  # a dead letter: its consumer group gave up on it after RETRY_TIMES deliveries
        steps.append(f"delivered from {origin} {m.properties.get('RETRY_TIMES', '?')} times, then dead-lettered")
    steps.append(f"stored in {m.topic} queue {m.queue_id} at offset {m.queue_offset}{where} ({stamp} UTC)")
    return steps


def _paths(found: Iterable[tuple[str, ReceivedMessage]]) -> list[MessagePath]:
    out = []
    for group, m in found:
        kind, text = body_preview(m.body)
        out.append(MessagePath(m, group, _path(m, group), kind, text))
    return out


def find_messages(cc: ClusterClient, *, message_id: str = "", topic: str = "", key: str = "",
                  begin_ms: int = 0, end_ms: int | None = None, limit: int = 32) -> list[MessagePath]:
    """Messages by id (asked of every group), by topic and key (the store's index, within
    [begin_ms, end_ms] when given), or by topic and time: those stored from begin_ms on."""
    found: list[tuple[str, ReceivedMessage]] = []
    for name in live_groups(cc):
        client = cc.group(name)
        if message_id:
            try:
                found.append((name, client.get_message(message_id)))
            except (errors.MessageNotFound, errors.NotFound):
                continue
        elif topic and key:
            try:
                found += [(name, m) for m in client.query_messages(topic, key, begin_ms=begin_ms, end_ms=end_ms,
                                                                  max_count=limit)]
            except errors.TopicNotFound:
                continue
        elif topic and begin_ms:
            try:
                found += [(name, m) for m in _stored_from(client, topic, begin_ms, end_ms, limit)]
            except errors.TopicNotFound:
                continue
    if not message_id and not key:
        found = sorted(found, key=lambda gm: (gm[1].store_timestamp_ms, gm[1].queue_id, gm[1].queue_offset))[:limit]
    return _paths(found)


def _stored_from(client, topic: str, begin_ms: int, end_ms: int | None, limit: int) -> list[ReceivedMessage]:
    """The first `limit` messages of each queue of `topic` stored at or after begin_ms (and at or
    before end_ms): each queue's offset for that time (OffsetsForTimestamp, RocketMQ's
    searchOffset by store time), then a read of the queue from there."""
    starts = client.offsets_for_timestamp([topic], begin_ms).get(topic, {})
    ends = client.snapshot_offsets([topic]).get(topic, {})
    out: list[ReceivedMessage] = []
    for queue_id, start in sorted(starts.items()):
        stop = min(ends.get(queue_id, start), start + limit)
        if stop <= start:
            continue
        for result in client.read_queue(topic, queue_id, start, stop):
            for row in result.batch.to_pylist():
                stored_ms = int(row["storeTimestamp"].timestamp() * 1000)
                if stored_ms < begin_ms or (end_ms is not None and stored_ms > end_ms):
                    continue
                out.append(ReceivedMessage(
                    topic=row["topic"], queue_id=row["queueId"], queue_offset=row["queueOffset"],
                    message_id=row["messageId"], offset_msg_id="", tag=row["tag"] or None, keys=tuple(row["keys"] or ()),
                    body=row["body"], properties=dict(row["properties"] or ()),
                    born_timestamp_ms=int(row["bornTimestamp"].timestamp() * 1000), store_timestamp_ms=stored_ms,
                    transaction_id=row["transactionId"] or None))
    return out


def resend(cc: ClusterClient, group: str, message_id: str, topic: str) -> str:
    """Send a copy of a message (e.g. from a %DLQ% topic) to `topic`; the new message id."""
    from txmq.broker.client.types import Message

    m = cc.group(group).get_message(message_id)
    summary = cc.send([Message(topic, m.body, tag=m.tag, keys=list(m.keys))], topic=topic)
    return summary.message_ids[0] if summary.message_ids else ""


def stats_by_group(cc: ClusterClient) -> dict[str, dict]:
    return {name: cc.group(name).stats() for name in live_groups(cc)}



# ---- spark -----------------------------------------------------------------------------

@dataclass
class SparkQueueRow:
    topic: str
    group: str
    queue_id: int
    committed: int
    end: int

    @property
    def lag(self) -> int:
        return max(0, self.end - self.committed)


@dataclass
class SparkView:
    checkpoint: str
    batch_id: int | None  # the last batch Spark's commit log holds
    queues: list[SparkQueueRow]
    sink_transactions: list[tuple[int, str, str]]  # (batch id, transaction id, state)

    @property
    def total_lag(self) -> int:
        return sum(r.lag for r in self.queues)


def spark_view(cc: ClusterClient, checkpoint: str, *, sink_batches: int = 5) -> SparkView:
    """A streaming query's committed source offsets (its checkpoint's offset log at the last batch
    its commit log holds) against each queue's end, and its sink's last transactions.

    The checkpoint's forms are the connector's (txmq.spark: offsets.from_json, the sink's ids),
    so this page needs the `spark` extra."""
    try:
        from txmq.spark.offsets import from_json
        from txmq.spark.options import InvalidOption, local_checkpoint_dir, sink_id_for_checkpoint
        from txmq.spark.sink import committed_batches
        from txmq.spark.transactions import transaction_id
    except ImportError as exc:
        raise errors.Unsupported(f"the Spark page reads checkpoints with txmq's Spark connector: "
                                 f"pip install 'txmq[spark]' ({exc})") from None
    try:
        path = local_checkpoint_dir(checkpoint, helper="txmq console")
    except InvalidOption as exc:
        raise errors.BadRequest(str(exc)) from None
    if not path.is_dir():
        raise errors.NotFound(f"no checkpoint directory {checkpoint!r} on the console's host")
    done = sorted(committed_batches(path))
    cut: dict = {}
    if done:
        # Spark's offset log: "v1", the batch's metadata, then one line per source
        lines = (path / "offsets" / str(done[-1])).read_text().splitlines()
        for line in lines[2:]:
            try:
                cut.update(from_json(json.loads(line)))
            except ValueError:
                continue  # another source's offsets
    ends = cc.snapshot_offsets(sorted(cut)) if cut else {}
    rows = [SparkQueueRow(t, g, q, cut[t].get((g, q), 0), e)
            for t in sorted(ends) for (g, q), e in sorted(ends[t].items())]
    sink = sink_id_for_checkpoint(checkpoint)
    txs = []
    for batch in done[-sink_batches:][::-1]:
        for generation in range(3):
            tx = transaction_id(sink, batch, generation)
            try:
                txs.append((batch, tx, str(cc.get_transaction(tx).state)))
            except (errors.UnknownTransaction, errors.InvalidTransactionId, errors.NotFound):
                continue
    return SparkView(checkpoint, done[-1] if done else None, rows, txs)
