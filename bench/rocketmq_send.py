"""RocketMQ 5 protocol front: how close SendMessage / transactions get to a bare gRPC call.

    .venv/bin/python bench/rocketmq_send.py [--quick]

Starts a real broker process (async flush) and, in the same run, a bare echo
gRPC server (thread pool, the same server model): the bare unary call rate is
the limit any RPC can reach on this machine. Measures, with one sequential
client and with 8 client threads, over the wire (RocketMQ 5 messages, 1 KiB
bodies): SendMessage of one NORMAL message, and a transaction (SendMessage of
one TRANSACTION half + EndTransaction COMMIT). Ratios are against the bare
call rate. Writes bench/results/rocketmq_send.json.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.grpc_server_models import drive, start_server  # noqa: E402
from bench.load import closed_loop  # noqa: E402
from bench.results_io import emit  # noqa: E402
from tests.server.wire import Wire  # noqa: E402
from tests.support.broker_process import BrokerProcess  # noqa: E402
from txmq.broker.protocol import rocketmq_v2_pb2 as pb  # noqa: E402

BODY = b"x" * 1024


def run(fn, seconds: float, threads: int) -> dict:
    figures = closed_loop(fn, seconds, threads)
    return {"ops_per_s": figures["per_s"], "p50_ms": figures["p50_ms"], "p99_ms": figures["p99_ms"]}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    seconds = 2.0 if args.quick else 5.0
    result: dict = {"bench": "rocketmq_send", "quick": args.quick, "body_bytes": len(BODY)}
    proc, endpoint = start_server("sync")
    try:
        result["bare_grpc_1"] = drive(endpoint, seconds, 1, BODY)
        result["bare_grpc_8"] = drive(endpoint, seconds, 8, BODY)
    finally:
        proc.kill()
        proc.wait()
    with tempfile.TemporaryDirectory() as tmp, BrokerProcess(Path(tmp), flush="async") as broker:
        wire = Wire(broker.endpoint)
        topic = f"bench-{uuid.uuid4().hex[:6]}"
        assert wire.send(topic, [BODY]).status.code == pb.OK

        def send() -> None:
            r = wire.send(topic, [BODY])
            assert r.status.code == pb.OK, r.status

        def transaction() -> None:
            r = wire.send(topic, [BODY], mtype=pb.TRANSACTION)
            assert wire.end(topic, r.entries[0].transaction_id).status.code == pb.OK

        for _ in range(100):
            send()
        result["send_1"] = run(send, seconds, 1)
        result["send_8"] = run(send, seconds, 8)
        result["transaction_1"] = run(transaction, seconds, 1)
        result["transaction_8"] = run(transaction, seconds, 8)
        wire.close()
    result["ratios"] = {
        "send_vs_bare_grpc_1": round(result["send_1"]["ops_per_s"] / result["bare_grpc_1"]["calls_per_s"], 3),
        "send_vs_bare_grpc_8": round(result["send_8"]["ops_per_s"] / result["bare_grpc_8"]["calls_per_s"], 3),
        "transaction_vs_bare_grpc_1": round(result["transaction_1"]["ops_per_s"] /
                                            result["bare_grpc_1"]["calls_per_s"], 3),
    }
    emit("rocketmq_send", result)


if __name__ == "__main__":
    main()
