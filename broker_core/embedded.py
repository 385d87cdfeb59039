"""An embedded txmq broker: the broker as its own OS process, started from Python.

The quickstart, the examples and the crash tests all need a broker they can
start, crash and restart without installing a server.

The broker is started with `python -m txmq.broker.server`; it prints
`txmq broker ready on HOST:PORT` once it serves. `kill()` sends SIGKILL (a
crash: no clean shutdown, abort marker left); `stop()` sends SIGTERM (a clean
stop). `restart()` starts a new process on the same data directory and port.

`hidden=True` runs the broker as from another host: in a mount namespace of its
own (`unshare -m`, root only) with its data directory and /dev/shm on private
tmpfs mounts, so no other process can read its files. Its data lives as long as
the process does.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Sequence

from txmq.broker.ports import free_port

READY = re.compile(r"txmq (?:broker|replica) ready on (\S+):(\d+)")


class EmbeddedBroker:
    """A broker subprocess bound to one data directory."""

    def __init__(self, data_dir: Path, *, flush: str = "sync", extra_args: list[str] | None = None,
                 env: dict[str, str] | None = None, start_timeout_s: float = 60.0, hidden: bool = False,
                 program: Sequence[str] | None = None, listen_host: str = "127.0.0.1") -> None:
        """`program`: the argv that takes `txmq broker start`'s flags (default: this Python's
        `-m txmq.broker.server`; e.g. an installed `txmq broker start`, or one under `ip netns exec`)."""
        self.data_dir = Path(data_dir)
        self.program = list(program) if program is not None else [sys.executable, "-m", "txmq.broker.server"]
        self.flush = flush
        self.extra_args = list(extra_args or [])
        self.env = env
        self.start_timeout_s = start_timeout_s
        self.hidden = hidden
        self.proc: subprocess.Popen[str] | None = None
        self.host = listen_host
        self.port = 0
        self.output: deque[str] = deque(maxlen=400)

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> "EmbeddedBroker":
        """Start the broker and wait until it prints its ready line."""
        if not self.port:  # a port of its own below the ephemeral range, so that restart() can have it back
            self.port = free_port()
        cmd = [*self.program, "--data-dir", str(self.data_dir),
               "--listen", f"{self.host}:{self.port}", "--flush", self.flush, *self.extra_args]
        if self.hidden:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                   'mount -t tmpfs txmq-data "$0" && mount -t tmpfs txmq-shm /dev/shm && exec "$@"',
                   str(self.data_dir), *cmd]
        env = dict(os.environ)
        env.update(self.env or {})
        env.setdefault("PYTHONUNBUFFERED", "1")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        ready = threading.Event()
        threading.Thread(target=self._pump, args=(self.proc, ready), daemon=True).start()
        deadline = time.monotonic() + self.start_timeout_s
        while not ready.wait(0.05):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.kill()
                raise RuntimeError("broker did not start:\n" + "\n".join(self.output))
        return self

    def _pump(self, proc: subprocess.Popen[str], ready: threading.Event) -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            self.output.append(line.rstrip())
            m = READY.search(line)
            if m and not ready.is_set():
                self.host, self.port = m.group(1), int(m.group(2))
                ready.set()

    def kill(self) -> None:
        """SIGKILL: a crash."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(30)

    def pause(self) -> None:
        """SIGSTOP: the process freezes (a long GC pause, a stalled VM) until resume()."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after pause()."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)

    def stop(self, timeout_s: float = 30.0) -> int:
        """SIGTERM: a clean stop. Returns the exit code."""
        if not self.proc or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise

    def restart(self) -> "EmbeddedBroker":
        """Start again on the same data directory and port (after kill or stop)."""
        return self.start()

    def __enter__(self) -> "EmbeddedBroker":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self.kill()
