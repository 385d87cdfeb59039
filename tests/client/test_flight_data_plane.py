"""The Arrow Flight data plane as its users see it: the native client finds it by itself, and any
Arrow tool (a plain pyarrow.flight client, DuckDB) reads a topic's committed messages from it."""

from __future__ import annotations

import threading

import pyarrow as pa
import pyarrow.flight as flight
import pytest

from txmq.broker.protocol.native_arrow import PULL_SCHEMA

from .helpers import bodies_batch


def _flight(client) -> flight.FlightClient:
    return flight.connect(client.data_plane())


def test_the_client_learns_the_flight_location_from_the_broker(client, topic):
    host, port = client.target.rsplit(":", 1)
    assert client.data_plane().startswith(f"grpc+tcp://{host}:")
    assert not client.data_plane().endswith(f":{port}")


def test_a_plain_flight_client_reads_only_the_committed_messages_of_a_topic(client, topic):
    client.send_arrow(pa.table({"body": [b"plain-%d" % i for i in range(5)]}), topic=topic)
    committed = client.prepare_arrow("", pa.table({"body": [b"tx-%d" % i for i in range(3)]}), topic=topic,
                                     producer_group="g", sender="s")
    client.end_transaction(committed.transaction_id, "COMMIT")
    client.prepare_arrow("", pa.table({"body": [b"pending"]}), topic=topic, producer_group="g", sender="s")
    reader = _flight(client)
    info = reader.get_flight_info(flight.FlightDescriptor.for_path(topic))
    assert len(info.endpoints) == 4 and info.total_records == 8
    assert info.schema.equals(PULL_SCHEMA)
    table = pa.concat_tables(reader.do_get(e.ticket).read_all() for e in info.endpoints)
    assert sorted(table.column("body").to_pylist()) == sorted([b"plain-%d" % i for i in range(5)] +
                                                             [b"tx-%d" % i for i in range(3)])
    reader.close()


def test_list_flights_names_every_user_topic(client, topic):
    client.send_arrow(bodies_batch(1), topic=topic)
    reader = _flight(client)
    names = {info.descriptor.path[0].decode() for info in reader.list_flights()}
    assert topic in names and not any(n.startswith("RMQ_SYS") for n in names)
    reader.close()


def test_duckdb_queries_a_topic_through_arrow(client, topic):
    duckdb = pytest.importorskip("duckdb")
    client.send_arrow(pa.table({"body": [b"a", b"bb", b"ccc"], "tag": ["x", "y", "x"]}), topic=topic)
    reader = _flight(client)
    info = reader.get_flight_info(flight.FlightDescriptor.for_path(topic))
    messages = pa.concat_tables(reader.do_get(e.ticket).read_all() for e in info.endpoints)  # noqa: F841
    rows = duckdb.sql("SELECT tag, count(*) AS n, sum(octet_length(body)) AS bytes FROM messages "
                      "GROUP BY tag ORDER BY tag").fetchall()
    assert rows == [("x", 2, 4), ("y", 1, 2)]
    reader.close()


def test_a_stream_of_halves_is_one_transaction_and_each_batch_is_answered(client, topic):
    batches = [pa.record_batch({"body": [b"h%d-%d" % (b, i) for i in range(100)]}) for b in range(5)]
    summary = client.prepare_stream("", batches, topic=topic, producer_group="g", sender="s")
    assert summary.count == 500
    info = client.get_transaction(summary.transaction_id)
    assert info.half_count == 500 and info.state == "PENDING"
    client.end_transaction(summary.transaction_id, "COMMIT")
    cut = client.snapshot_offsets([topic])[topic]
    assert sum(cut.values()) == 500


def test_a_batch_of_another_schema_continues_the_transaction_on_a_new_stream(client, topic):
    first = pa.record_batch({"body": [b"a", b"b"]})
    second = pa.record_batch({"body": [b"c"], "tag": ["t"]})
    summary = client.prepare_stream("", [first, second], topic=topic, producer_group="g", sender="s")
    assert summary.count == 3 and client.get_transaction(summary.transaction_id).half_count == 3


def test_consecutive_put_streams_run_on_one_kept_thread(client, topic):
    seen = []
    for _ in range(3):
        client.prepare_arrow("", bodies_batch(2), topic=topic, producer_group="g", sender="s")
        seen.append({t.ident for t in threading.enumerate() if t.name == "txmq-flight-put"})
    assert seen[0] and seen[0] == seen[1] == seen[2]


def test_a_stream_thread_still_busy_leaves_the_next_stream_a_thread_of_its_own():
    from txmq.broker.client.data_plane import _StreamThreads

    threads, release = _StreamThreads(), threading.Event()
    stuck = threads.start(lambda: release.wait(10))
    assert threads.start(lambda: None).wait(5), "a second stream waited for the first one's thread"
    assert not stuck.is_set()
    release.set()
    assert stuck.wait(5)
    threads.close()
