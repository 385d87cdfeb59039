"""The Prometheus endpoint (--metrics-listen) serves RocketMQ's transaction metric names."""

from __future__ import annotations

import re
import time
import urllib.request

import pytest

from tests.client.helpers import bodies_batch
from tests.support.broker_process import BrokerProcess
from txmq.broker.client import NativeClient

METRICS_LINE = re.compile(r"txmq metrics on (http://\S+)")


@pytest.fixture(scope="module")
def metrics_broker(tmp_path_factory):
    proc = BrokerProcess(tmp_path_factory.mktemp("mb") / "data", flush="async",
                         extra_args=["--metrics-listen", "127.0.0.1:0"])
    with proc:
        deadline = time.monotonic() + 10
        url = None
        while url is None and time.monotonic() < deadline:
            url = next((m.group(1) for line in list(proc.output) if (m := METRICS_LINE.search(line))), None)
            time.sleep(0.05)
        assert url, "broker did not print its metrics address"
        yield proc, url


def _scrape(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("text/plain")
        return resp.read().decode()


def _value(text: str, name: str) -> float:
    m = re.search(rf"^{re.escape(name)} (\S+)$", text, re.M)
    assert m, f"{name} not in metrics"
    return float(m.group(1))


def test_metrics_count_commits_rollbacks_and_half_messages(metrics_broker):
    proc, url = metrics_broker
    with NativeClient(proc.endpoint) as client:
        committed = client.prepare_arrow("", bodies_batch(5), topic="mt", producer_group="g", sender="s")
        client.end_transaction(committed.transaction_id, "COMMIT")
        rolled = client.prepare_arrow("", bodies_batch(2), topic="mt", producer_group="g", sender="s")
        client.end_transaction(rolled.transaction_id, "ROLLBACK")
        client.prepare_arrow("", bodies_batch(3), topic="mt", producer_group="g", sender="s")
        client.send_arrow(bodies_batch(4), topic="mt")
        end = client.snapshot_offsets(["mt"])["mt"][0]
        pulled = client.pull_arrow("mt", 0, 0, end).batch.num_rows
    text = _scrape(url)
    assert _value(text, "rocketmq_commit_messages_total") == 5
    assert _value(text, "rocketmq_rollback_messages_total") == 1
    assert _value(text, 'rocketmq_half_messages{topic="mt"}') == 3
    assert _value(text, "rocketmq_transaction_finish_latency_count") == 2
    assert 'rocketmq_transaction_finish_latency_bucket{le="+Inf"} 2' in text
    assert _value(text, 'txmq_messages_total{op="send"}') == 4
    assert 'txmq_rpc_latency_seconds_bucket{op="pull",le="+Inf"}' in text
    assert _value(text, 'txmq_messages_total{op="pull"}') == pulled


def test_metrics_text_is_well_formed(metrics_broker):
    _, url = metrics_broker
    for line in _scrape(url).splitlines():
        assert line.startswith("# ") or re.match(r"^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[^}]*\})? \S+$", line), line


def test_unknown_path_is_404(metrics_broker):
    _, url = metrics_broker
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(url.replace("/metrics", "/nope"), timeout=10)
    assert info.value.code == 404
