"""The helpers that read a streaming query's checkpoint on the driver (SinkCheckback, TransactionalBatch)
reach it through one owner, connector/checkpoint_fs.py: a local path, a file: URI, or a location on an
S3-compatible store (s3a://bucket/key) given in Spark's own S3A settings. A real S3 server
(gofakes3, tests/spark/s3_store.py) holds the checkpoint here: no mock."""

import json

import pytest

from tests.spark.s3_store import S3Server, build_server
from txmq.spark import SinkCheckback, TransactionalBatch
from txmq.spark.checkpoint_fs import CheckpointDir, S3Settings
from txmq.spark.options import InvalidOption, SinkOptions
from txmq.spark.transactions import transaction_id


@pytest.fixture(scope="module")
def s3():
    with S3Server(build_server()) as server:
        yield server


def test_a_file_uri_and_a_path_name_the_same_directory(tmp_path):
    (tmp_path / "commits").mkdir()
    (tmp_path / "commits" / "0").write_text("v1")
    assert CheckpointDir(f"file://{tmp_path}", helper="x").names("commits") == ["0"]
    assert CheckpointDir(f"file:{tmp_path}", helper="x").names("commits") == ["0"]
    assert CheckpointDir(str(tmp_path), helper="x").names("commits") == ["0"]


def test_a_checkpoint_on_an_unknown_filesystem_is_refused_with_one_line():
    with pytest.raises(InvalidOption, match=r"SinkCheckback: checkpoint location 'abfss://c@a/q': no filesystem "
                                            r"known for abfss://"):
        SinkCheckback("abfss://c@a/q", broker="127.0.0.1:1", topics=["t"])


def test_s3_settings_are_read_from_spark_s_s3a_keys():
    settings = S3Settings.from_hadoop_conf({"spark.hadoop.fs.s3a.endpoint": "http://10.0.0.5:9000",
                                            "spark.hadoop.fs.s3a.access.key": "k",
                                            "spark.hadoop.fs.s3a.secret.key": "s"})
    assert settings == S3Settings("http://10.0.0.5:9000", "k", "s", None, True)


def test_the_check_back_helper_reads_spark_s_commit_log_on_s3(s3):
    location = f"s3a://{s3.bucket}/chk/cb"
    fs = s3.filesystem()
    for name in ("0", ".1.tmp"):  # batch 0 committed; batch 1's commit file not yet renamed into place
        with fs.open_output_stream(f"{s3.bucket}/chk/cb/commits/{name}") as f:
            f.write(b'v1\n{"nextBatchWatermarkMs":0}')
    helper = SinkCheckback(location, broker="127.0.0.1:1", topics=["t"], checkpoint_filesystem=fs)
    sink_id = SinkOptions.parse({"broker": "127.0.0.1:1", "checkpointLocation": location}).sink_id
    assert helper.answer(transaction_id(sink_id, 0, 3)) == "ROLLBACK", "batch 0 is in the commit log"
    assert helper.answer(transaction_id(sink_id, 1, 0)) == "IN_PROGRESS", "batch 1 is not"


def test_the_foreach_batch_manifest_is_written_to_and_read_from_s3(s3):
    location = f"s3a://{s3.bucket}/chk/fb"
    helper = TransactionalBatch(broker="127.0.0.1:1", checkpoint_location=location, checkback=False,
                                local_transaction=lambda df, b: None, check=lambda b: True,
                                checkpoint_filesystem=s3.filesystem())
    helper._write_manifest(4, "tx-4", ["p0.a0.n"], ("",))  # no broker here: a lone broker's one group
    stored = s3.filesystem().open_input_stream(f"{s3.bucket}/chk/fb/txmq-foreach-batch/4.json").read()
    assert json.loads(stored) == {"transaction_id": "tx-4", "senders": ["p0.a0.n"], "participants": [""]}
    assert helper._read_manifest(4)["senders"] == ["p0.a0.n"]
    assert helper._read_manifest(5) is None


def test_a_checkpoint_file_is_replaced_whole_on_s3(s3):
    checkpoint = CheckpointDir(f"s3a://{s3.bucket}/chk/w", helper="x", filesystem=s3.filesystem())
    checkpoint.write("m/1", b"first")
    checkpoint.write("m/1", b"second")
    assert checkpoint.read("m/1") == b"second" and checkpoint.names("m") == ["1"]
    assert checkpoint.read("m/2") is None and checkpoint.names("absent") == []
