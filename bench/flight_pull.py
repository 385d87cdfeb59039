"""Flight pull benchmark: the broker's DoGet against a Flight server streaming the same batches
from memory, in rows/s.

    .venv/bin/python bench/flight_pull.py [--quick] [--rows N] [--repeat K]

Loads N committed 1 KiB messages (default 1,000,000; --quick: 200,000) into a 4-queue topic
of a broker process whose files are hidden from this one (EmbeddedBroker(hidden=True)), then
reads every queue with one DoGet stream each:
(a) from the broker: the CommitLog decoded into Spark-schema batches by its compiled loops,
(b) from a Flight server process holding those very batches in memory (the limit: Flight's
    transport alone, no decode),
taking turns, best of --repeat rounds each. Both servers are separate processes and the
reader is the same code (a plain pyarrow.flight client). Target: (a) >= 0.7 of (b).
Also reported, being less at the mercy of a shared machine than the best rates: the median
and range of the ratio within each round (the two read back to back), and the CPU seconds
per million rows of each server and of the reader (medians, from /proc).
Prints one JSON line, writes bench/results/flight_pull.json.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.flight as flight

from broker import pid_cpu_s  # noqa: I001
from size_args import parse_size_args  # noqa: I001
from spark_common import BrokerProcess, emit  # noqa: I001
from spark_source import QUEUES, load_messages  # noqa: I001

# The limit: a Flight server process answering a ticket "<queue id>" with that queue's batches,
# loaded from Arrow IPC files into memory before it reports its port.
MEMORY_SERVER = textwrap.dedent("""
    import sys
    import pyarrow as pa
    import pyarrow.flight as flight

    directory, queues = sys.argv[1], int(sys.argv[2])
    tables = {}
    for q in range(queues):
        with pa.OSFile(f"{directory}/{q}.arrow", "rb") as source:
            tables[q] = pa.ipc.open_file(source).read_all()

    class Memory(flight.FlightServerBase):
        def do_get(self, context, ticket):
            table = tables[int(ticket.ticket.decode())]
            return flight.GeneratorStream(table.schema, iter(table.to_batches()))

    server = Memory("grpc+tcp://127.0.0.1:0")
    print(server.port, flush=True)
    server.serve()
""")


def read_all(reader: flight.FlightClient, tickets: list[bytes]) -> int:
    rows = 0
    for ticket in tickets:
        stream = reader.do_get(flight.Ticket(ticket))
        while True:
            try:
                rows += stream.read_chunk().data.num_rows
            except StopIteration:
                break
    return rows


def main() -> None:
    args, rows = parse_size_args(200_000, 1_000_000, repeat=5)
    rows -= rows % QUEUES
    from txmq.broker.client import NativeClient
    from txmq.broker.protocol import native_pb2 as pb

    with tempfile.TemporaryDirectory() as tmp, \
            BrokerProcess(Path(tmp) / "broker", flush="async", hidden=True) as broker:
        client = NativeClient(broker.endpoint)
        topic = "bench-flight"
        client.create_topic(topic, QUEUES)
        load_messages(client, topic, rows)
        cut = client.snapshot_offsets([topic])[topic]
        tickets = [pb.PullRequest(topic=topic, queue_id=q, start_offset=0, end_offset=end).SerializeToString()
                   for q, end in sorted(cut.items())]
        # the limit serves exactly the batches the broker streams
        for q, end in sorted(cut.items()):
            table = pa.Table.from_batches([r.batch for r in client.read_queue(topic, q, 0, end)])
            with pa.OSFile(f"{tmp}/{q}.arrow", "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
                writer.write_table(table)
        memory = subprocess.Popen([sys.executable, "-c", MEMORY_SERVER, tmp, str(QUEUES)], stdout=subprocess.PIPE,
                                  text=True)
        try:
            port = int(memory.stdout.readline())
            readers = {"broker": (flight.connect(client.data_plane()), tickets, broker.proc.pid),
                       "memory": (flight.connect(f"grpc+tcp://127.0.0.1:{port}"),
                                  [str(q).encode() for q in sorted(cut)], memory.pid)}
            seconds: dict[str, list[float]] = {name: [] for name in readers}
            cpu: dict[str, list[float]] = {f"{name}_{who}": [] for name in readers for who in ("server", "reader")}
            for _ in range(args.repeat):
                for name, (reader, named, pid) in readers.items():
                    server0, reader0, t0 = pid_cpu_s(pid), time.process_time(), time.perf_counter()
                    assert read_all(reader, named) == rows, f"{name} streamed the wrong row count"
                    seconds[name].append(time.perf_counter() - t0)
                    cpu[f"{name}_server"].append((pid_cpu_s(pid) - server0) / rows * 1e6)
                    cpu[f"{name}_reader"].append((time.process_time() - reader0) / rows * 1e6)
        finally:
            memory.kill()
            memory.wait()
        client.close()
    rates = {name: rows / min(times) for name, times in seconds.items()}
    paired = sorted(m / b for b, m in zip(seconds["broker"], seconds["memory"]))
    emit("flight_pull", {
        "rows": rows, "body_bytes": 1024, "queues": QUEUES,
        "rows_per_s": {k: round(v) for k, v in rates.items()},
        "ratios": {"broker_doget_vs_memory_flight_server": round(rates["broker"] / rates["memory"], 3)},
        "paired_rounds": {"median": round(statistics.median(paired), 3), "min": round(paired[0], 3),
                          "max": round(paired[-1], 3)},
        "cpu_s_per_million_rows": {k: round(statistics.median(v), 3) for k, v in cpu.items()},
        "target": {"broker_doget_vs_memory_flight_server": 0.7},
    })


if __name__ == "__main__":
    main()
