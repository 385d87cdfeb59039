"""Source offsets: the JSON form Spark checkpoints, and the pure planning around it.

An offset is a cut: {topic: {queue: next_offset}} (end-exclusive, like the
client's snapshots), a queue being (group, queue id) as in a cluster of broker
groups; outside a cluster the group is "". Spark stores the cut as JSON:
{"topic": {"0": 42}} for a lone broker's queues, {"topic": {"g1": {"0": 42}}}
for a cluster's (JSON keys are strings; queue ids are ints everywhere else).

Everything here is pure (no client): resolving a startingOffsets spec against
known earliest/latest cuts, picking up new queues, splitting a trigger's row
limit across queues by backlog, and cutting a batch into Spark partitions.
"""

from __future__ import annotations

from dataclasses import dataclass

from .options import EARLIEST, LATEST, InvalidOption, QueueKey, parse_queue_offsets, queue_name

Cut = dict[str, dict[QueueKey, int]]


def to_json(cut: Cut) -> dict[str, dict]:
    """The checkpointed form: sorted, string queue ids, nested by group in a cluster (stable JSON for Spark)."""
    out: dict[str, dict] = {}
    for t in sorted(cut):
        keys = sorted(cut[t])
        if all(g == "" for g, _ in keys):
            out[t] = {str(q): int(cut[t][(g, q)]) for g, q in keys}
        else:
            nested: dict[str, dict[str, int]] = {}
            for g, q in keys:
                nested.setdefault(g, {})[str(q)] = int(cut[t][(g, q)])
            out[t] = nested
    return out


def from_json(raw: dict) -> Cut:
    try:
        return {str(t): parse_queue_offsets(queues) for t, queues in raw.items()}
    except (AttributeError, TypeError, ValueError):
        raise ValueError(f"not a txmq source offset: {raw!r}") from None


def total(cut: Cut) -> int:
    return sum(sum(q.values()) for q in cut.values())


def backlog(start: Cut, end: Cut) -> dict[tuple[str, QueueKey], int]:
    """Rows between two cuts per queue (queues missing from `start` count from 0)."""
    out = {}
    for t, queues in end.items():
        for q, e in queues.items():
            s = start.get(t, {}).get(q, 0)
            if e > s:
                out[(t, q)] = e - s
    return out


def resolve_spec(spec: Cut, earliest: Cut, latest: Cut, *, option: str) -> Cut:
    """Turn a JSON offsets option into a cut: -2 → earliest, -1 → latest, checked against the queues.

    Queues of a named topic that the spec leaves out start at earliest (like
    Kafka's new partitions).
    """
    cut: Cut = {}
    for topic, queues in spec.items():
        if topic not in latest:
            raise InvalidOption(f"option '{option}' names topic {topic!r}, which does not exist")
        cut[topic] = dict(earliest.get(topic, {}))
        for q, off in queues.items():
            if q not in latest[topic]:
                raise InvalidOption(
                    f"option '{option}': topic {topic!r} has no queue {queue_name(q)} "
                    f"(queues: {', '.join(queue_name(k) for k in sorted(latest[topic]))})"
                )
            if off == EARLIEST:
                cut[topic][q] = earliest[topic].get(q, 0)
            elif off == LATEST:
                cut[topic][q] = latest[topic][q]
            elif off > latest[topic][q]:
                raise InvalidOption(
                    f"option '{option}': offset {off} of {topic}/{queue_name(q)} is beyond the queue's end "
                    f"{latest[topic][q]}"
                )
            else:
                cut[topic][q] = off
    return cut


def with_new_queues(start: Cut, latest: Cut, earliest: Cut | None = None) -> Cut:
    """`start` plus every queue of `latest` it does not know yet, from that queue's earliest offset."""
    out = {t: dict(q) for t, q in start.items()}
    for t, queues in latest.items():
        for q in queues:
            if q not in out.setdefault(t, {}):
                out[t][q] = (earliest or {}).get(t, {}).get(q, 0)
    return out


def clamp(cut: Cut, low: Cut, high: Cut) -> Cut:
    """Per queue: max(low, min(cut, high)); queues of `high` missing in `cut` take `low`."""
    out: Cut = {}
    for t, queues in high.items():
        out[t] = {}
        for q, h in queues.items():
            lo = low.get(t, {}).get(q, 0)
            v = cut.get(t, {}).get(q, lo)
            out[t][q] = max(lo, min(v, h))
    return out


def split_limit(start: Cut, latest: Cut, max_rows: int) -> Cut:
    """An end at most `max_rows` past `start`, shared among queues by their backlog.

    Each queue gets floor(limit * its share); the rows left by rounding go to the
    queues with the largest remainders, so the total is exactly min(limit, backlog).
    The result is only a proposal: the reader still moves it to a consistent cut.
    """
    lag = backlog(start, latest)
    want = sum(lag.values())
    end = {t: {q: start.get(t, {}).get(q, 0) for q in qs} for t, qs in latest.items()}
    if want <= max_rows:
        return {t: dict(qs) for t, qs in latest.items()}
    shares = {k: max_rows * v / want for k, v in lag.items()}
    given = {k: int(s) for k, s in shares.items()}
    rest = max_rows - sum(given.values())
    for k in sorted(shares, key=lambda k: (shares[k] - given[k], lag[k]), reverse=True)[:rest]:
        given[k] += 1
    for (t, q), n in given.items():
        end[t][q] += min(n, lag[(t, q)])
    return end


@dataclass(frozen=True)
class QueueRange:
    """One Spark partition: rows [start, end) of one queue. Primitives only (pickled to executors)."""

    topic: str
    group: str
    queue_id: int
    start: int
    end: int


def plan_ranges(start: Cut, end: Cut, max_rows_per_partition: int) -> list[QueueRange]:
    """Cut the batch [start, end) into queue ranges of at most `max_rows_per_partition` rows.

    Deterministic in its inputs, so a batch replayed after a restart is planned,
    and read, exactly as before.
    """
    ranges = []
    for t in sorted(end):
        for q in sorted(end[t]):
            s, e = start.get(t, {}).get(q, 0), end[t][q]
            while s < e:
                stop = min(e, s + max_rows_per_partition)
                ranges.append(QueueRange(t, q[0], q[1], s, stop))
                s = stop
    return ranges
