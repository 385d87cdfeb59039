"""A new leader serves once its in-sync followers hold its log. One of them alive and in etcd but
unable to reach it used to hold the take-over for the whole --replica-lag-max. In a group of five,
the leader is killed while its four followers, in two pairs, cannot reach each other: whichever is
elected has such a follower, and reaches the other two. Both sides' evidence (no fetch heard for
1.5 s, and the follower's own report in etcd of the new leader silent) now drops it sooner; the
other two stay in sync, so nothing acknowledged can be lost. (In a group of three the new
leader's only in-sync follower would be the unreachable one: dropping it could not let a write be
acknowledged, so it still waits.)"""

from __future__ import annotations

import pytest

from lab import campaign

LAG_MAX_S = 10.0  # far longer than the default 2 s, so that a wait for it cannot pass for the fix


@pytest.mark.lab  # ~2 min: run by `make lab`
def test_a_new_leader_that_cannot_reach_one_follower_serves_before_replica_lag_max(lab_available, tmp_path):
    outcome = campaign.run(tmp_path / "run", ["kill9-leader-followers-split"], rounds=2, hold_s=LAG_MAX_S + 4,
                           recover_s=6, writers=1, with_consumer=False, official=False, replicas=5,
                           group_args=["--replica-lag-max", f"{LAG_MAX_S:g}s"], log=lambda *_: None)
    assert not outcome.errors, outcome.errors
    assert outcome.result.ok and outcome.result.committed > 0, outcome.result.summary()
    assert outcome.identical_logs is True
    times = outcome.failover_s["kill9-leader-followers-split"]
    # the lease (2 s) runs out, a follower takes over and drops the unreachable one: well below the lag max
    assert max(times) < LAG_MAX_S, f"first acknowledged write after {times} s (--replica-lag-max {LAG_MAX_S:g}s)"
