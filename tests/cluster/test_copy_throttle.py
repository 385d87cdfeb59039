"""The history copy's throttle (cluster/copier.py) and the CLI's byte rates: pure functions."""

from __future__ import annotations

import pytest

from txmq.broker.cli import UsageError, _rate
from txmq.broker.cluster.copier import TokenBucket


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0

    def clock(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s


@pytest.mark.parametrize("batch", [1_000, 64_000, 3_000_000])
def test_the_token_bucket_holds_the_rate_whatever_the_batch_size(batch):
    t = FakeTime()
    bucket = TokenBucket(1_000_000, clock=t.clock, sleep=t.sleep)
    for _ in range(10_000_000 // batch):
        bucket.take(batch)
    assert t.now == pytest.approx(10_000_000 // batch * batch / 1_000_000, rel=0.01)


def test_an_idle_bucket_saves_at_most_one_seconds_worth():
    t = FakeTime()
    bucket = TokenBucket(1_000, clock=t.clock, sleep=t.sleep)
    t.now = 60.0  # a minute idle
    bucket.take(3_000)
    assert t.now == pytest.approx(62.0), "only one second's tokens were kept"


def test_rate_zero_is_unlimited():
    t = FakeTime()
    TokenBucket(0, clock=t.clock, sleep=t.sleep).take(10**12)
    assert t.now == 0.0


def test_a_byte_rate_is_read_with_its_unit():
    assert _rate("32MiB") == 32 << 20 and _rate("500KiB/s") == 500 << 10 and _rate("1.5MB") == 1_500_000
    assert _rate("0") == 0 and _rate("1000") == 1000
    with pytest.raises(UsageError, match="bytes per second"):
        _rate("fast")
