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
