"""The foreachBatch helper in the test session: local transaction and messages commit or roll back together."""

from __future__ import annotations

import sqlite3
import uuid

import pytest

from tests.spark.crash_driver import sqlite_local_transaction
from tests.spark.support import send_plain, topic_bodies
from txmq.spark import TransactionalBatch

pytestmark = pytest.mark.spark


def run(spark, source_options, src, helper, checkpoint):
    df = (spark.readStream.format("txmq").options(**source_options, topic=src, startingOffsets="earliest",
                                                  maxOffsetsPerTrigger="8").load().select("body"))
    query = df.writeStream.foreachBatch(helper).option("checkpointLocation", checkpoint) \
        .trigger(availableNow=True).start()
    try:
        query.awaitTermination(180)
    except Exception:
        pass
    return query


def db_rows(db) -> list[bytes]:
    con = sqlite3.connect(db)
    try:
        return sorted(bytes(r[0]) for r in con.execute("SELECT body FROM rows"))
    finally:
        con.close()


def test_messages_commit_with_the_local_transaction(spark, client, source_options, topic, checkpoint, tmp_path):
    dst = f"fb-{uuid.uuid4().hex[:8]}"
    client.create_topic(dst, 4)
    send_plain(client, topic, [b"o%d" % i for i in range(20)])
    local, check = sqlite_local_transaction(str(tmp_path / "db.sqlite"))
    with TransactionalBatch(broker=source_options["broker"], topic=dst, checkpoint_location=checkpoint,
                            local_transaction=local, check=check) as helper:
        assert run(spark, source_options, topic, helper, checkpoint).exception() is None
    assert db_rows(tmp_path / "db.sqlite") == sorted(b"o%d" % i for i in range(20))
    assert sorted(topic_bodies(client, dst)) == sorted(b"o%d" % i for i in range(20))


def test_messages_roll_back_when_the_local_transaction_raises(spark, client, source_options, topic, checkpoint,
                                                             tmp_path):
    dst = f"fb-{uuid.uuid4().hex[:8]}"
    client.create_topic(dst, 4)
    send_plain(client, topic, [b"o%d" % i for i in range(6)])

    def failing(batch_df, batch_id):
        raise RuntimeError("database is down")

    with TransactionalBatch(broker=source_options["broker"], topic=dst, checkpoint_location=checkpoint,
                            local_transaction=failing, check=lambda b: False) as helper:
        query = run(spark, source_options, topic, helper, checkpoint)
    assert "database is down" in str(query.exception())
    assert topic_bodies(client, dst) == []
    assert client.list_transactions(state="PENDING", topic=dst) == []
