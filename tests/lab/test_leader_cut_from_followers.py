"""Issue 38 item 8: a leader cut off from its followers but still reaching etcd and the clients used
to keep its lease and refuse every write for as long as the partition lasted (8.8-14.6 s without an
acknowledgement). It abdicates to its in-sync followers, which report it silent in etcd: a follower
leads, the old leader acknowledges nothing more, and no acknowledged write is lost."""

from __future__ import annotations

import pytest

from lab import campaign


@pytest.mark.lab  # ~1 min: run by `make lab`
def test_a_leader_cut_from_its_followers_hands_over_and_writes_are_acknowledged_within_5s(lab_available, tmp_path):
    outcome = campaign.run(tmp_path / "run", ["leader-cut-from-followers"], rounds=2, hold_s=8, recover_s=4,
                           writers=1, with_consumer=False, official=False, log=lambda *_: None)
    assert not outcome.errors, outcome.errors
    assert outcome.result.ok and outcome.result.committed > 0, outcome.result.summary()
    assert outcome.identical_logs is True
    times = outcome.failover_s["leader-cut-from-followers"]
    assert max(times) <= campaign.FAILOVER_TARGET_S, f"first acknowledged write after {times} s"
