"""Read a txmq topic with plain Arrow tools: a pyarrow.flight client, then DuckDB and Polars.

    .venv/bin/python examples/arrow_tools/read_topic.py                      # an embedded broker, sample data
    .venv/bin/python examples/arrow_tools/read_topic.py --broker H:P --topic orders

The broker's data plane is an Arrow Flight service: GetFlightInfo on a topic gives one
endpoint per queue, each ending at a consistent cut (a transaction is wholly in or wholly
out), and DoGet streams that queue's committed messages as record batches. Nothing here is
txmq-specific but the address: NativeClient(...).data_plane() asks the broker for it.
"""

from __future__ import annotations

import argparse
import tempfile
from contextlib import ExitStack
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight

from txmq.broker.client import NativeClient


def read_topic(location: str, topic: str, headers: list[tuple[bytes, bytes]] = ()) -> pa.Table:
    """Every committed message of `topic`, up to a consistent cut, with a plain Flight client."""
    options = flight.FlightCallOptions(headers=list(headers))
    reader = flight.connect(location)
    try:
        info = reader.get_flight_info(flight.FlightDescriptor.for_path(topic), options)
        return pa.concat_tables(reader.do_get(endpoint.ticket, options).read_all() for endpoint in info.endpoints)
    finally:
        reader.close()


def load_sample(client: NativeClient, topic: str) -> None:
    """Plain messages and one committed and one pending transaction: only committed ones are read."""
    client.create_topic(topic, 4)
    client.send_arrow(pa.table({"body": [b'{"order": %d}' % i for i in range(6)],
                                "tag": ["paid", "refund", "paid", "paid", "refund", "paid"]}), topic=topic)
    done = client.prepare_arrow("", pa.table({"body": [b'{"order": 100}', b'{"order": 101}'], "tag": ["paid", "paid"]}),
                                topic=topic, producer_group="example", sender="example")
    client.end_transaction(done.transaction_id, "COMMIT")
    client.prepare_arrow("", pa.table({"body": [b'{"order": 999}'], "tag": ["paid"]}), topic=topic,
                         producer_group="example", sender="example")  # left pending: invisible


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--broker", help="HOST:PORT of a running broker (default: start an embedded one)")
    parser.add_argument("--topic", default="orders")
    args = parser.parse_args()
    with ExitStack() as stack:
        endpoint = args.broker
        if endpoint is None:
            from txmq.broker.embedded import EmbeddedBroker

            data = Path(stack.enter_context(tempfile.TemporaryDirectory())) / "broker"
            endpoint = stack.enter_context(EmbeddedBroker(data, flush="async")).endpoint
        client = stack.enter_context(NativeClient(endpoint))
        if args.broker is None:
            load_sample(client, args.topic)
        location = client.data_plane()
        orders = read_topic(location, args.topic)
        print(f"data plane: {location}")
        print(f"{orders.num_rows} committed messages in {args.topic!r}")
        try:
            import duckdb

            print("DuckDB:", duckdb.sql("SELECT tag, count(*) AS n FROM orders GROUP BY tag ORDER BY tag").fetchall())
        except ImportError:
            print("DuckDB: not installed (pip install duckdb)")
        try:
            import polars as pl

            frame = pl.from_arrow(orders.select(["tag", "queueId", "queueOffset"]))
            print("Polars:", frame.group_by("tag").len().sort("tag").rows())
        except ImportError:
            print("Polars: not installed (pip install polars)")


if __name__ == "__main__":
    main()
