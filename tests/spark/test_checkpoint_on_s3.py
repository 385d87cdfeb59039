"""Exactly-once with the whole checkpoint on an S3-compatible store: Spark's own checkpointLocation is
s3a:// (Hadoop's S3A from Maven Central), and the check-back and foreachBatch helpers read and write the
same location through connector/checkpoint_fs.py, with the S3 settings taken from the session. The
server is real (gofakes3, tests/spark/s3_store.py); drivers are killed at protocol points and restarted
(tests/spark/crash_driver.py), as in test_spark_crash.py."""

from __future__ import annotations

import uuid

import pyarrow.fs as pafs
import pytest

from tests.spark.s3_store import S3Server, build_server, fetch_s3a_jars
from tests.spark.test_spark_crash import foreach_scenario, sink_scenario

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.fixture(scope="module")
def s3():
    with S3Server(build_server()) as server:
        yield server


@pytest.fixture(scope="module")
def s3a_jars():
    return fetch_s3a_jars()


def s3_args(s3, s3a_jars) -> tuple[str, list[str]]:
    return f"s3a://{s3.bucket}/chk-{uuid.uuid4().hex[:8]}", ["--s3-endpoint", s3.endpoint, "--s3a-jars",
                                                             str(s3a_jars)]


def test_the_sink_is_exactly_once_through_driver_kills_with_its_checkpoint_on_s3(
        spark_env, spark_broker, client, tmp_path, s3, s3a_jars):
    checkpoint, extra = s3_args(s3, s3a_jars)
    sink_scenario(spark_env, spark_broker, client, tmp_path,
                  ["sink.after_halves:0", "sink.after_broker_commit:1"], checkpoint=checkpoint, extra=extra)
    commits = s3.filesystem().get_file_info(
        pafs.FileSelector(f"{checkpoint[len('s3a://'):]}/commits"))
    assert len(commits) >= 2, "Spark's commit log is on the S3 server"


def test_the_foreach_batch_helper_is_exactly_once_through_driver_kills_with_its_manifests_on_s3(
        spark_env, spark_broker, client, tmp_path, s3, s3a_jars):
    checkpoint, extra = s3_args(s3, s3a_jars)
    foreach_scenario(spark_env, spark_broker, client, tmp_path,
                     ["fb.after_halves:0", "fb.after_local_transaction:1"], checkpoint=checkpoint, extra=extra)
    manifests = s3.filesystem().get_file_info(
        pafs.FileSelector(f"{checkpoint[len('s3a://'):]}/txmq-foreach-batch"))
    assert len(manifests) >= 2, "the helper's manifests are on the S3 server"
