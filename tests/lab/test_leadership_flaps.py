"""Issue 38 item 7: leadership flapping, again and again, must not leave the group in an election
storm (an epoch raised by every tick, no replica able to take over). The leader is cut from etcd,
from its followers and paused, and every replica isolated in turn, with short holds and recoveries;
afterwards the group has one leader whose epoch stays put (campaign._settled), every acknowledged
write is there once and the logs are byte-identical."""

from __future__ import annotations

import pytest

from lab import campaign

FLAPS = ["leader-cut-from-etcd", "rolling-partitions", "leader-cut-from-followers", "pause-leader"]


@pytest.mark.lab  # ~2 min: run by `make lab`
def test_leadership_flapping_again_and_again_settles_on_one_leader_and_loses_no_acknowledged_write(
        lab_available, tmp_path):
    outcome = campaign.run(tmp_path / "run", FLAPS, rounds=2, hold_s=3, recover_s=1.5, writers=1,
                           with_consumer=True, official=False, log=lambda *_: None)
    assert not outcome.errors, outcome.errors  # "leadership did not settle" among them
    assert outcome.result.ok and outcome.result.committed > 0, outcome.result.summary()
    assert outcome.identical_logs is True
