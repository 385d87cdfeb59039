"""A short campaign in CI (`make test-faults`, ~55 s): the leader isolated by a silent drop, then cut
from its followers, with native writers (transactions and check-back), a consumer and, when its venv
exists, the official client (plain sends; transactions with check-back) on hosts of their own. Safety only: the
failover-time target is test_partitions.py's (issue 38 item 5); `make lab` runs every fault."""

from __future__ import annotations

import pytest

from lab import campaign

# a campaign of partitions on lab hosts: make test-faults, not the default suite
pytestmark = pytest.mark.faults


def test_a_short_campaign_loses_duplicates_tears_nothing_and_ends_with_identical_logs(lab_available, tmp_path):
    outcome = campaign.run(tmp_path / "run", campaign.SHORT, rounds=1, hold_s=4, recover_s=2, log=lambda *_: None)
    result = outcome.result
    assert not outcome.errors, outcome.errors
    assert result.committed > 50
    assert result.ok, result.summary()
    assert outcome.identical_logs is True
    assert (tmp_path / "run" / "histories" / "checker.json").exists()
