"""Retention with commit records that point at older halves (COMMIT by reference, issue #42).

Segments here are 100 bytes: segment k holds [100k, 100k+100). A ledger entry (commit record
offset, lowest half offset) says a commit record names halves from that offset on.
"""

from __future__ import annotations

from txmq.broker.store.retention import ReferenceLedger


def seg(offset: int) -> int:
    return offset - offset % 100


def ledger(*entries: tuple[int, int]) -> ReferenceLedger:
    out = ReferenceLedger()
    for commit_at, lowest_half in entries:
        out.add(commit_at, lowest_half)
    return out


def test_without_references_age_alone_sets_the_boundary() -> None:
    assert ledger().boundary(300, seg) == 300


def test_a_half_segment_is_kept_while_a_kept_commit_record_names_it() -> None:
    # halves in segment 1, their commit record in segment 3: deleting below 200 would lose the halves
    assert ledger((350, 120)).boundary(200, seg) == 100


def test_a_half_segment_goes_with_the_commit_record_that_named_it() -> None:
    # the commit record (segment 1) expires with its halves (segment 0): no deadlock between them
    assert ledger((150, 20)).boundary(200, seg) == 200


def test_the_boundary_is_lowered_until_no_kept_commit_record_names_a_half_below_it() -> None:
    # three segments chained: a kept commit record (segment 4) names halves in segment 2, and the
    # commit record in segment 2 names halves in segment 0; once segment 2 is kept, so is segment 0
    assert ledger((250, 10), (450, 230)).boundary(300, seg) == 0


def test_a_commit_record_below_the_boundary_holds_nothing_back() -> None:
    assert ledger((50, 10), (450, 330)).boundary(300, seg) == 300


def test_a_truncated_log_forgets_the_commit_records_past_the_truncation() -> None:
    refs = ledger((250, 10), (450, 230))
    refs.truncate_from(400)
    assert refs.boundary(300, seg) == 300


# --- a real store: the engine's COMMIT by reference, then retention by age ---------------------------


def _committed_long_after_prepare(path):
    """A store (small segments) where 8 halves of "orders":0 were committed by reference segments
    after they were prepared; returns (store, the commit record's offset, the first half's)."""
    from tests.store._helpers import msg, small_config
    from txmq.broker.store import MessageStore
    from txmq.broker.store.commit_ref import COMMIT_REF_TOPIC
    from txmq.broker.transaction import Resolution, TransactionConfig, TransactionEngine

    store = MessageStore(small_config(path))
    store.topics.create("orders", queue_count=1)
    engine = TransactionEngine(store, TransactionConfig(), clock=lambda: 1_700_000_000.0)
    halves = engine.prepare([msg("orders", b"h%03d" % i * 100, 0) for i in range(8)], transaction_id="t").results
    store.append([msg("other", b"f" * 1000, 0) for _ in range(40)])  # a few segments of other traffic
    engine.end("t", Resolution.COMMIT)
    engine.close()
    commit_at = store.read_queue_entries(COMMIT_REF_TOPIC, 0, 0, 1)[0].physical_offset
    return store, commit_at, halves[0].physical_offset


def _age(store, below: int) -> None:
    import os
    import time

    old = time.time() - 200 * 3600
    for s in store.commitlog.segments:
        if s.start + s.capacity <= below:
            os.utime(s.path, (old, old))


def test_a_store_reopened_keeps_the_half_segments_its_commit_records_name(tmp_path) -> None:
    """The ledger is rebuilt from the TXMQ_SYS_COMMIT_REF queue when a store opens: the halves'
    segments outlive every older segment retention deletes while their slots' segment stays."""
    from txmq.broker.store import MessageStore
    from tests.store._helpers import small_config

    store, commit_at, first_half = _committed_long_after_prepare(tmp_path / "data")
    store.close()
    store = MessageStore(small_config(tmp_path / "data"))
    try:
        _age(store, commit_at)
        store.delete_expired()
        assert store.commitlog.min_offset <= first_half
        bodies = [m.body for m in store.read_queue("orders", 0, 0, 100).messages]
        assert bodies == [b"h%03d" % i * 100 for i in range(8)]
    finally:
        store.close()


def test_the_half_segments_go_once_the_slots_segment_expires(tmp_path) -> None:
    from tests.store._helpers import msg

    store, commit_at, first_half = _committed_long_after_prepare(tmp_path / "data")
    try:
        store.append([msg("other", b"f" * 1000, 0) for _ in range(40)])  # the commit record's segment is not the last
        _age(store, store.commitlog.segments[-1].start)
        store.delete_expired()
        assert store.commitlog.min_offset > commit_at > first_half
        assert store.min_offset("orders", 0) == store.max_offset("orders", 0) == 8
    finally:
        store.close()
