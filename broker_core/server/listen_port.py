"""The broker's gRPC port: TLS and plaintext on one port, as RocketMQ's proxy serves them.

RocketMQ 5 clients disagree on TLS: the Java and Go clients dial TLS unless told otherwise (and
trust any certificate), the Python and Node.js clients dial plaintext. Apache's proxy accepts both
on its one gRPC port (its "permissive" TLS mode, with a self-signed certificate when none is
configured), so a default txmq broker does the same (`--tls-mode`):

- `permissive` (default): a small forwarder process owns the port. It reads the first byte of each
  connection without consuming it: 0x16 (a TLS handshake record) goes to the gRPC server's TLS port,
  anything else to its plaintext port, both on loopback; it then only moves bytes (splice(2), in
  the kernel). A process of its own, so the forwarding never waits for the broker's GIL.
- `enforcing`: the gRPC server listens with TLS alone, directly.
- `disabled`: the gRPC server listens in plaintext alone, directly (no forwarding hop).

The certificate is `--tls-cert`/`--tls-key` when given, else one generated at the first start into
`<data-dir>/tls/` (self-signed, for localhost, 127.0.0.1 and the advertised host) and reused after.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # the forwarder process imports this module too, and needs no gRPC
    import grpc

log = logging.getLogger("txmq.broker.listen")

TLS_MODES = ("permissive", "enforcing", "disabled")
TLS_HANDSHAKE = 0x16  # the content type of a TLS record that opens a handshake (a ClientHello)
_CHUNK = 1 << 20


class Listener(Protocol):
    """The bound gRPC port of a broker or replica."""

    port: int

    def close(self) -> None: ...


class DirectListener:
    """The gRPC server itself on the port (TLS mode `enforcing` or `disabled`): nothing to close."""

    def __init__(self, port: int) -> None:
        self.port = port

    def close(self) -> None:
        pass


def generated_certificate(directory: Path, hosts: list[str]) -> tuple[Path, Path]:
    """(cert, key) under `directory`, made with the openssl CLI the first time and reused after."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    if cert.exists() and key.exists():
        return cert, key
    if shutil.which("openssl") is None:
        raise OSError("TLS needs a certificate: give --tls-cert and --tls-key, install the openssl CLI "
                      "(one is then generated), or serve plaintext only with --tls-mode disabled")
    directory.mkdir(parents=True, exist_ok=True)
    names = sorted({"localhost", "127.0.0.1", *(h for h in hosts if h)})
    alt = ",".join(f"IP:{h}" if _is_ip(h) else f"DNS:{h}" for h in names)
    tmp_cert, tmp_key = cert.with_suffix(".tmp"), key.with_suffix(".tmp")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                    "-nodes", "-days", "3650", "-subj", "/CN=txmq broker", "-addext", f"subjectAltName={alt}",
                    "-keyout", str(tmp_key), "-out", str(tmp_cert)], check=True, capture_output=True)
    os.chmod(tmp_key, 0o600)
    os.replace(tmp_key, key)  # the key first: a certificate present means both are
    os.replace(tmp_cert, cert)
    return cert, key


def _is_ip(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
        return True
    except OSError:
        return False


def _address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def bind_grpc(server: grpc.Server, host: str, port: int, *, mode: str,
              credentials: grpc.ServerCredentials | None) -> Listener:
    """Bind `server` to host:port in TLS `mode` (credentials needed unless `disabled`); the server
    is started by the caller. Raises OSError when the port cannot be had."""
    assert mode in TLS_MODES, mode
    assert credentials is not None or mode == "disabled"
    if mode == "disabled" or mode == "enforcing":
        address = _address(host, port)
        bound = (server.add_insecure_port(address) if mode == "disabled"
                 else server.add_secure_port(address, credentials))
        if bound == 0:
            raise OSError(f"cannot listen on {address}")
        return DirectListener(bound)
    plain = server.add_insecure_port("127.0.0.1:0")
    secure = server.add_secure_port("127.0.0.1:0", credentials)
    if plain == 0 or secure == 0:
        raise OSError("cannot listen on loopback for the TLS forwarder")
    return ForwarderProcess(host, port, plain, secure)


class ForwarderProcess:
    """The forwarder (this module run as a program) owning the public port, as a child process;
    it exits when this process closes it or dies (its stdin then ends)."""

    def __init__(self, host: str, port: int, plain_port: int, tls_port: int) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "txmq.broker.server.listen_port", host, str(port), str(plain_port), str(tls_port)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=None, close_fds=True)
        line = self._proc.stdout.readline().decode().strip()
        if not line.startswith("port "):
            self._proc.kill()
            self._proc.wait()
            raise OSError(f"cannot listen on {_address(host, port)}: {line or 'the TLS forwarder exited'}")
        self.port = int(line.split()[1])

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()  # the forwarder's signal to stop
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        self._proc.stdout.close()


# --- the forwarder program ----------------------------------------------------------------


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Move bytes src -> dst until src ends, then end dst's sending side."""
    try:
        if sys.platform == "linux":  # splice(2) moves the bytes in the kernel; elsewhere a copy loop
            r, w = os.pipe()
            try:
                while True:
                    n = os.splice(src.fileno(), w, _CHUNK)
                    if n == 0:
                        break
                    while n:
                        n -= os.splice(r, dst.fileno(), n)
            finally:
                os.close(r)
                os.close(w)
        else:
            buf = bytearray(_CHUNK)
            view = memoryview(buf)
            while n := src.recv_into(buf):
                dst.sendall(view[:n])
        dst.shutdown(socket.SHUT_WR)
    except OSError:  # either side went away: end both
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _serve_connection(conn: socket.socket, plain_port: int, tls_port: int) -> None:
    backend = None
    try:
        conn.settimeout(30)  # a client that connects and says nothing is dropped
        first = conn.recv(1, socket.MSG_PEEK)
        if not first:
            return
        conn.settimeout(None)
        port = tls_port if first[0] == TLS_HANDSHAKE else plain_port
        backend = socket.create_connection(("127.0.0.1", port))
        for s in (conn, backend):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        other = threading.Thread(target=_pump, args=(backend, conn), daemon=True)
        other.start()
        _pump(conn, backend)
        other.join()
    except OSError:
        pass
    finally:
        conn.close()
        if backend is not None:
            backend.close()


def _listen(host: str, port: int) -> socket.socket:
    if host in ("", "0.0.0.0"):
        return socket.create_server(("0.0.0.0", port), backlog=1024)
    if host == "::":
        return socket.create_server(("::", port), family=socket.AF_INET6, backlog=1024,
                                    dualstack_ipv6=socket.has_dualstack_ipv6())
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    if not _is_ip(host):
        family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    return socket.create_server((host, port), family=family, backlog=1024)


def main(argv: list[str]) -> int:
    host, port, plain_port, tls_port = argv[0], int(argv[1]), int(argv[2]), int(argv[3])
    deadline = time.monotonic() + 5
    while True:
        try:
            server = _listen(host, port)
            break
        except OSError as exc:
            # a killed broker's forwarder may hold the port a moment longer (it ends on its stdin's end)
            if exc.errno != errno.EADDRINUSE or port == 0 or time.monotonic() > deadline:
                print(f"error {exc}", flush=True)
                return 1
            time.sleep(0.05)
    print(f"port {server.getsockname()[1]}", flush=True)

    def accept_loop() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=_serve_connection, args=(conn, plain_port, tls_port), daemon=True).start()

    threading.Thread(target=accept_loop, daemon=True).start()
    sys.stdin.buffer.read()  # until the broker closes it, or dies
    server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
