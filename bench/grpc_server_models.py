"""Which gRPC server model for the broker: the thread-pool server or grpc.aio?

    .venv/bin/python bench/grpc_server_models.py [--quick]

Serves a trivial echo unary RPC (bytes in, bytes out: the floor of per-call
cost) from a separate process with (a) `grpc.server` + ThreadPoolExecutor and
(b) `grpc.aio.server`, and drives each from this process with one sequential
client and with 8 concurrent client threads. Prints calls/s, p50/p99
latency and the server's CPU per call (from /proc: on a shared 2-core machine
CPU per call is steadier than calls/s), and the ratios aio/sync. txmq chose the thread-pool server: its
handlers are blocking (store, fsync, engine locks), so aio would need an
executor hop per call anyway. Writes bench/results/grpc_server_models.json.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.load import closed_loop  # noqa: E402
from bench.results_io import emit  # noqa: E402

SERVER_CODE = r'''
import sys, asyncio, grpc
from concurrent import futures
mode = sys.argv[1]
ident = lambda b: b
def echo(request, context):
    return request
if mode == "sync":
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Echo", {
        "Call": grpc.unary_unary_rpc_method_handler(echo, request_deserializer=ident, response_serializer=ident)}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()
else:
    async def aecho(request, context):
        return request
    async def main():
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("bench.Echo", {
            "Call": grpc.unary_unary_rpc_method_handler(aecho, request_deserializer=ident, response_serializer=ident)}),))
        port = server.add_insecure_port("127.0.0.1:0")
        await server.start()
        print(port, flush=True)
        await server.wait_for_termination()
    asyncio.run(main())
'''


def start_server(mode: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", SERVER_CODE, mode], stdout=subprocess.PIPE, text=True)
    port = proc.stdout.readline().strip()
    return proc, f"127.0.0.1:{port}"


def server_cpu_s(pid: int) -> float:
    """User+system CPU seconds the server process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def echo_stub(channel: grpc.Channel):
    """The echo server's one method (bytes in, the same bytes out) on `channel`."""
    return channel.unary_unary("/bench.Echo/Call", request_serializer=lambda b: b, response_deserializer=lambda b: b)


def drive(endpoint: str, seconds: float, threads: int, payload: bytes = b"x" * 256,
          server_pid: int | None = None) -> dict:
    channel = grpc.insecure_channel(endpoint)
    call = echo_stub(channel)
    for _ in range(200):  # warm up
        call(payload)
    cpu_before = server_cpu_s(server_pid) if server_pid else 0.0
    figures = closed_loop(lambda: call(payload), seconds, threads)
    result = {"calls_per_s": figures["per_s"], "p50_ms": figures["p50_ms"], "p99_ms": figures["p99_ms"]}
    if server_pid:
        calls = figures["per_s"] * seconds
        result["server_cpu_us_per_call"] = round((server_cpu_s(server_pid) - cpu_before) / calls * 1e6, 1)
    channel.close()
    return result


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    seconds = 2.0 if args.quick else 5.0
    result: dict = {"quick": args.quick}
    for mode in ("sync", "aio"):
        proc, endpoint = start_server(mode)
        try:
            result[f"{mode}_1_client"] = drive(endpoint, seconds, 1, server_pid=proc.pid)
            result[f"{mode}_8_clients"] = drive(endpoint, seconds, 8, server_pid=proc.pid)
        finally:
            proc.kill()
            proc.wait()
    result["ratios"] = {
        "aio_vs_sync_calls_1_client": round(result["aio_1_client"]["calls_per_s"] / result["sync_1_client"]["calls_per_s"], 3),
        "aio_vs_sync_calls_8_clients": round(result["aio_8_clients"]["calls_per_s"] / result["sync_8_clients"]["calls_per_s"], 3),
        "aio_vs_sync_server_cpu_per_call_1_client": round(result["aio_1_client"]["server_cpu_us_per_call"]
                                                          / result["sync_1_client"]["server_cpu_us_per_call"], 3),
        "aio_vs_sync_server_cpu_per_call_8_clients": round(result["aio_8_clients"]["server_cpu_us_per_call"]
                                                           / result["sync_8_clients"]["server_cpu_us_per_call"], 3),
    }
    emit("grpc_server_models", result)


if __name__ == "__main__":
    main()
