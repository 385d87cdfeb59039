"""Logical offsets of a queue that moved between groups, and the physical queues holding them.

A moved queue keeps its name (group, queue id) and its offsets; its layout is a list of segments,
each a physical queue of some group holding the logical offsets from its `base` on (the physical
queue's offset 0 is `base`). Segment i holds [base_i, base_i+1); the last one has no end. These
functions are the one place that translates (docs/cluster.md, "Moving queues").
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterator, Mapping, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from txmq.broker.client.types import PullResult, QueueSegment

PhysicalKey = tuple[str, int]  # (group, physical queue id)


def spans(segments: Sequence[QueueSegment]) -> Iterator[tuple[QueueSegment, int | None]]:
    """Each segment with its length (None for the last: it grows)."""
    for i, seg in enumerate(segments):
        yield seg, (segments[i + 1].base - seg.base if i + 1 < len(segments) else None)


def ranges(segments: Sequence[QueueSegment], start: int, end: int) -> list[tuple[QueueSegment, int, int]]:
    """[start, end) in logical offsets as (segment, physical start, physical end) pieces, in order."""
    out = []
    for seg, length in spans(segments):
        hi = end if length is None else min(end, seg.base + length)
        lo = max(start, seg.base)
        if lo < hi:
            out.append((seg, lo - seg.base, hi - seg.base))
    return out


def to_physical(segments: Sequence[QueueSegment], offset: int) -> dict[PhysicalKey, int]:
    """A logical offset as a position in every segment: the segments before it read to their end,
    the ones after it from their start."""
    out = {}
    for seg, length in spans(segments):
        p = max(0, offset - seg.base)
        out[(seg.group, seg.queue_id)] = p if length is None else min(p, length)
    return out


def to_logical(segments: Sequence[QueueSegment], positions: Mapping[PhysicalKey, int]) -> int:
    """The logical offset of positions in the segments (a segment absent: at its start): the first
    segment not read to its end says where the queue stands."""
    for seg, length in spans(segments):
        p = positions.get((seg.group, seg.queue_id), 0)
        if length is None or p < length:
            return seg.base + p
    raise AssertionError("the last segment has no end")


def shifted(result: PullResult, segment: QueueSegment, logical_queue_id: int) -> PullResult:
    """A pull from a segment's physical queue, in the logical queue's offsets and id."""
    if segment.base == 0 and segment.queue_id == logical_queue_id:
        return result
    batch = result.batch
    names = batch.schema.names
    columns = list(batch.columns)
    if "queueOffset" in names:
        i = names.index("queueOffset")
        columns[i] = pc.add(columns[i], pa.scalar(segment.base, columns[i].type))
    if "queueId" in names:
        i = names.index("queueId")
        columns[i] = pa.array([logical_queue_id] * batch.num_rows, columns[i].type)
    batch = pa.RecordBatch.from_arrays(columns, schema=batch.schema)
    return replace(result, batch=batch, next_offset=result.next_offset + segment.base,
                   min_offset=result.min_offset + segment.base, max_offset=result.max_offset + segment.base)
