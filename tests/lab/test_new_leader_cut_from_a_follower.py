"""A new leader serves once its in-sync followers hold its log. One of them alive and in etcd but
unable to reach it (the followers cut from each other when the leader is killed) used to hold the
take-over for the whole --replica-lag-max; both sides' evidence (no fetch heard for 1.5 s, and the
follower's own report in etcd of the new leader silent) drops it sooner, the other follower staying
in sync, so nothing acknowledged can be lost."""

from __future__ import annotations

import pytest

from lab import campaign

LAG_MAX_S = 8.0  # longer than the default 2 s, so that a wait for it cannot pass for the fix


@pytest.mark.lab  # ~1.5 min: run by `make lab`
def test_a_new_leader_that_cannot_reach_one_follower_serves_before_replica_lag_max(lab_available, tmp_path):
    outcome = campaign.run(tmp_path / "run", ["kill9-leader-followers-split"], rounds=2, hold_s=LAG_MAX_S + 4,
                           recover_s=6, writers=1, with_consumer=False, official=False,
                           group_args=["--replica-lag-max", f"{LAG_MAX_S:g}s"], log=lambda *_: None)
    assert not outcome.errors, outcome.errors
    assert outcome.result.ok and outcome.result.committed > 0, outcome.result.summary()
    assert outcome.identical_logs is True
    times = outcome.failover_s["kill9-leader-followers-split"]
    # the lease (2 s) runs out, a follower takes over and drops the unreachable one: well below the lag max
    assert max(times) < LAG_MAX_S, f"first acknowledged write after {times} s (--replica-lag-max {LAG_MAX_S:g}s)"
