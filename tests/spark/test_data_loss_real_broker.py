"""failOnDataLoss against a real broker whose retention really deleted the oldest segments.

The broker runs with 64 KiB CommitLog segments and 1 s retention, so after a
few hundred 1 KiB messages every segment but the active one is deleted and the
queue's minimum offset moves past 0. Spark then asks for offsets from 0.
"""

from __future__ import annotations

import json
import time

import pytest

from tests.support.broker_process import BrokerProcess
from txmq.broker.client import Message, NativeClient

TOPIC = "aged"


@pytest.fixture(scope="module")
def aged_broker(tmp_path_factory):
    """A broker whose retention has deleted the start of topic `aged` (one queue)."""
    with BrokerProcess(tmp_path_factory.mktemp("aged-broker"),
                       extra_args=["--segment-bytes", "65536", "--retention", "1s"]) as proc:
        with NativeClient(proc.endpoint) as client:
            client.create_topic(TOPIC, 1)
            for start in range(0, 300, 50):
                client.send([Message(TOPIC, b"%05d" % i + b"x" * 1019) for i in range(start, start + 50)])
            deadline = time.monotonic() + 60
            while client.describe_topic(TOPIC).queues[0].min_offset == 0:
                assert time.monotonic() < deadline, "retention deleted nothing within 60 s"
                time.sleep(0.5)
        yield proc


def read_from_zero(spark, broker: str, fail_on_data_loss: bool):
    return (spark.read.format("txmq").option("broker", broker).option("topic", TOPIC)
            .option("startingOffsets", json.dumps({TOPIC: {"0": 0}}))
            .option("failOnDataLoss", str(fail_on_data_loss).lower()).load())


def test_reading_deleted_offsets_fails_and_names_the_option(spark, aged_broker):
    with pytest.raises(Exception, match="failOnDataLoss"):
        read_from_zero(spark, aged_broker.endpoint, True).collect()


def test_deleted_offsets_are_skipped_when_data_loss_is_allowed(spark, aged_broker):
    with NativeClient(aged_broker.endpoint) as client:
        queue = client.describe_topic(TOPIC).queues[0]
    offsets = sorted(r.queueOffset for r in read_from_zero(spark, aged_broker.endpoint, False)
                     .select("queueOffset").collect())
    assert offsets, "the retained tail must be read"
    assert offsets[0] >= queue.min_offset > 0
    assert offsets == list(range(offsets[0], queue.max_offset)), "a contiguous tail up to the end, once each"
