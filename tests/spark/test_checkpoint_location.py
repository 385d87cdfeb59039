"""The two helpers that read a streaming query's checkpoint on the driver (SinkCheckback, TransactionalBatch)
take a local path or a file: URI, and refuse a checkpoint on another filesystem with one line, instead of
reading or writing a local directory named like it."""

import pytest

from txmq.spark import SinkCheckback, TransactionalBatch
from txmq.spark.options import InvalidOption, local_checkpoint_dir


def test_a_file_uri_and_a_path_name_the_same_directory():
    assert local_checkpoint_dir("file:///chk/q", helper="x") == local_checkpoint_dir("/chk/q", helper="x")
    assert str(local_checkpoint_dir("file:/chk/q", helper="x")) == "/chk/q"


@pytest.mark.parametrize("location", ["hdfs://nn:8020/chk/q", "s3a://bucket/chk/q", "abfss://c@a.dfs.core.windows.net/q"])
def test_the_check_back_helper_refuses_a_checkpoint_on_another_filesystem(location):
    with pytest.raises(InvalidOption, match=r"SinkCheckback: checkpoint location .* is not a local path"):
        SinkCheckback(location, broker="127.0.0.1:1", topics=["t"])


def test_the_foreach_batch_helper_refuses_a_checkpoint_on_another_filesystem():
    with pytest.raises(InvalidOption, match=r"TransactionalBatch: checkpoint location 'hdfs://nn/chk' is not a local"):
        TransactionalBatch(broker="127.0.0.1:1", checkpoint_location="hdfs://nn/chk",
                           local_transaction=lambda df, b: None, check=lambda b: False)
