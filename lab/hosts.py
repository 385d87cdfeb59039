"""Hosts on one machine: network namespaces joined by a bridge that lives in a namespace of its own.

Addresses exist only inside the lab's namespaces (never in the root namespace, never routed anywhere),
so a lab cannot reach or be reached from any real network. Every namespace, veth, mount and process a
`Lab` makes is removed when it exits, also on an exception or KeyboardInterrupt; `cleanup_stale()`
removes what a lab whose process died (kill -9 of the test runner) left behind.

Names carry the owning process id (`txl<pid>-<lab>-<host>`), so parallel labs never collide and a
leftover is recognisable as stale once that process is gone.
"""

from __future__ import annotations

import atexit
import hashlib
import ipaddress
import itertools
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

PREFIX = "txl"
NETNS_DIR = Path("/run/netns")
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
_NAME_RE = re.compile(r"^[a-z][a-z0-9]{0,11}$")
_lab_serial = itertools.count(1)
_open_labs: weakref.WeakSet[Lab] = weakref.WeakSet()


class LabError(RuntimeError):
    """A lab could not be built or a lab command failed."""


def available() -> str | None:
    """None when labs can run here, else the reason they cannot (for pytest.skip)."""
    if os.geteuid() != 0:
        return "the lab needs root (network and mount namespaces)"
    for tool in ("ip", "unshare", "mount"):
        if shutil.which(tool) is None:
            return f"the lab needs `{tool}`"
    probe = f"{PREFIX}{os.getpid()}-probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` fails here: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = ["ip", *(["-n", ns] if ns else []), *args]
    done = subprocess.run(argv, capture_output=True, text=True)
    if check and done.returncode != 0:
        raise LabError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done


def _netns_pids(ns: str) -> list[int]:
    done = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True)
    return [int(p) for p in done.stdout.split()] if done.returncode == 0 else []


def _signal_pids(pids: Sequence[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _kill_netns(ns: str, deadline_s: float = 5.0) -> None:
    """SIGKILL every process in `ns` until none is left (a child may fork while we kill)."""
    end = time.monotonic() + deadline_s
    while pids := _netns_pids(ns):
        _signal_pids(pids, signal.SIGCONT)  # a stopped process dies on SIGKILL anyway; this keeps ptrace-free
        _signal_pids(pids, signal.SIGKILL)
        if time.monotonic() > end:
            raise LabError(f"processes {pids} in {ns} survive SIGKILL")
        time.sleep(0.02)


def _tagged_mounts(prefix: str) -> list[tuple[str, str]]:
    """(source, target) of the root namespace's mounts whose source starts with `prefix` (a lab's disks
    are tmpfs mounts named after their host's namespace)."""
    found = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        source, target = line.split()[:2]
        if source.startswith(prefix):
            found.append((source, target.replace("\\040", " ")))
    return found


def _umount_tagged(tag: str) -> None:
    for _, target in _tagged_mounts(tag + "-"):
        subprocess.run(["umount", "-l", target], capture_output=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def lab_root() -> Path:
    """Where labs keep their working directories (host disks, logs, faketime files)."""
    return Path(tempfile.gettempdir()) / "txmq-lab"


def cleanup_stale() -> list[str]:
    """Remove the namespaces, mounts and directories of labs whose owning process is dead.

    Returns the names removed. Labs of live processes (another test run) are left alone."""
    removed: list[str] = []
    owner_re = re.compile(rf"^{PREFIX}(\d+)-")
    names = sorted(p.name for p in NETNS_DIR.iterdir()) if NETNS_DIR.exists() else []
    for ns in names:
        m = owner_re.match(ns)
        if m is None or _pid_alive(int(m.group(1))):
            continue
        _kill_netns(ns)
        _ip("netns", "del", ns, check=False)
        removed.append(ns)
    for source, target in _tagged_mounts(PREFIX):
        m = owner_re.match(source)
        if m is not None and not _pid_alive(int(m.group(1))):
            subprocess.run(["umount", "-l", target], capture_output=True)
            removed.append(target)
    root = lab_root()
    if root.exists():
        for d in root.iterdir():
            m = owner_re.match(d.name)
            if m is None or _pid_alive(int(m.group(1))):
                continue
            shutil.rmtree(d, ignore_errors=True)
            removed.append(str(d))
    return removed


def _monotonic_sleep_shim() -> Path:
    """The compiled lab/native/monotonic_sleep.c (built once per source version): it keeps monotonic
    sleeps working under libfaketime after a jump (see the C file for the bug it works around)."""
    source = Path(__file__).with_name("native") / "monotonic_sleep.c"
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    target = lab_root() / "native" / f"monotonic_sleep-{digest}.so"
    if not target.exists():
        if shutil.which("cc") is None:
            raise LabError("clock jumps need a C compiler (cc) to build lab/native/monotonic_sleep.c")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".{os.getpid()}.tmp")
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(tmp), str(source), "-ldl"], check=True)
        os.replace(tmp, target)
    return target


class Host:
    """One machine of the lab: a network namespace with one interface on the lab's bridge.

    Made by `Lab.host`; its processes run inside the namespace (and a private mount namespace
    hiding `hide` paths, if any)."""

    def __init__(self, lab: Lab, name: str, index: int, addr: str, *, hide: Sequence[str], disk_mb: int | None):
        self.lab = lab
        self.name = name
        self.index = index
        self.addr = addr
        self.ns = f"{lab.tag}-{name}"
        self.hide = tuple(str(Path(p).resolve()) for p in hide)
        self.dir = lab.workdir / name
        self.disk = self.dir / "disk"
        self.disk_mb = disk_mb
        self.log_dir = self.dir / "logs"
        self.faketime_file = self.dir / "faketime"
        self.clock_offset_s = 0.0
        self.switch_port = f"p{index}"
        self.procs: list[subprocess.Popen[Any]] = []
        self._serial = itertools.count(1)

    def __repr__(self) -> str:
        return f"Host({self.name}, {self.addr})"

    def _build(self) -> None:
        self.dir.mkdir(parents=True)
        self.disk.mkdir()
        self.log_dir.mkdir()
        if self.disk_mb is not None:
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", f"size={self.disk_mb}m,mode=0755", f"{self.ns}-disk", str(self.disk)],
                check=True,
                capture_output=True,
            )
        self.faketime_file.write_text("+0\n")
        _ip("netns", "add", self.ns)
        # The veth pair is made in the switch's namespace and its other end moved straight into the host's:
        # no interface of the lab ever exists in the root namespace.
        _ip("link", "add", self.switch_port, "type", "veth", "peer", "name", "eth0", "netns", self.ns, ns=self.lab.switch_ns)
        _ip("link", "set", self.switch_port, "master", "br0", "up", ns=self.lab.switch_ns)
        _ip("link", "set", "lo", "up", ns=self.ns)
        _ip("addr", "add", f"{self.addr}/{self.lab.network.prefixlen}", "dev", "eth0", ns=self.ns)
        _ip("link", "set", "eth0", "up", ns=self.ns)

    def _argv(self, argv: Sequence[str]) -> list[str]:
        argv = [str(a) for a in argv]
        inner = ["ip", "netns", "exec", self.ns]
        if not self.hide:
            return inner + argv
        # A private mount namespace: the tmpfs over each hidden path exists only for this process tree.
        mounts = []
        for path in self.hide:
            if Path(path).is_dir():
                mounts.append(f"mount -t tmpfs -o size=1m,mode=0755 hidden {_sh(path)}")
            else:
                mounts.append(f"mount --bind /dev/null {_sh(path)}")
        script = " && ".join(mounts) + ' && exec "$@"'
        return inner + ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh", *argv]

    def _env(self, env: Mapping[str, str] | None, faketime: str | None) -> dict[str, str]:
        full = dict(os.environ if env is None else env)
        if faketime is not None:
            if not LIBFAKETIME.exists():
                raise LabError(f"libfaketime is not installed ({LIBFAKETIME})")
            self.faketime_file.write_text(f"{faketime}\n")
            full["LD_PRELOAD"] = f"{_monotonic_sleep_shim()}:{LIBFAKETIME}"
            full["FAKETIME_TIMESTAMP_FILE"] = str(self.faketime_file)
            full["FAKETIME_CACHE_DURATION"] = "1"  # re-read the file each second: a jump lands within 1 s
            full["FAKETIME_DONT_FAKE_MONOTONIC"] = "1"  # a real clock jump moves the wall clock only
            full["FAKETIME_DONT_RESET"] = "1"
        return full

    def popen(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = subprocess.STDOUT,
        stdin: int | IO[Any] | None = subprocess.DEVNULL,
        faketime: str | None = None,
        text: bool = False,
    ) -> subprocess.Popen[Any]:
        """Start `argv` on this host. Its output goes to a log file under `host.log_dir` unless
        `stdout` says otherwise. `faketime` ("+0", "-30s", ...) preloads libfaketime with a file
        `faults.clock_jump` rewrites."""
        if not self.lab.alive:
            raise LabError("the lab has been torn down")
        log = None
        if stdout is None:
            stem = Path(str(argv[0])).name
            log = open(self.log_dir / f"{next(self._serial):02d}-{stem}.log", "ab")
            stdout = log
        try:
            proc = subprocess.Popen(
                self._argv(argv),
                env=self._env(env, faketime),
                cwd=cwd,
                stdout=stdout,
                stderr=stderr,
                stdin=stdin,
                start_new_session=True,  # a Ctrl-C at the driver's terminal reaches the driver only
                text=text,
            )
        finally:
            if log is not None:
                log.close()
        self.procs.append(proc)
        return proc

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: str | os.PathLike[str] | None = None,
        timeout: float = 60.0,
        check: bool = False,
        faketime: str | None = None,
        input: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run `argv` on this host to completion, capturing its output as text."""
        if not self.lab.alive:
            raise LabError("the lab has been torn down")
        return subprocess.run(
            self._argv(argv),
            env=self._env(env, faketime),
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=check,
            input=input,
        )

    def pids(self) -> list[int]:
        """Every process in this host's network namespace (children of children too)."""
        return _netns_pids(self.ns)

    def kill_all(self, sig: int = signal.SIGKILL) -> None:
        """Send `sig` to every process on the host; with SIGKILL, wait until all are gone."""
        if sig == signal.SIGKILL:
            _kill_netns(self.ns)
        else:
            _signal_pids(self.pids(), sig)
        if sig in (signal.SIGKILL, signal.SIGTERM):
            for proc in self.procs:
                try:
                    proc.wait(timeout=5 if sig == signal.SIGKILL else 0.01)
                except subprocess.TimeoutExpired:
                    pass
            self.procs = [p for p in self.procs if p.poll() is None]

    def _teardown(self) -> None:
        _kill_netns(self.ns)
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.procs = []
        _ip("netns", "del", self.ns, check=False)


def _sh(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


class Lab:
    """A bridge in a namespace of its own and the hosts on it; a context manager that removes it all."""

    def __init__(self, name: str, subnet: str | None = None, *, workdir: str | os.PathLike[str] | None = None):
        if not _NAME_RE.match(name):
            raise ValueError(f"lab name {name!r}: lowercase letters and digits, at most 12, starting with a letter")
        serial = next(_lab_serial)
        self.name = name
        self.tag = f"{PREFIX}{os.getpid()}-{name}{serial}"
        if subnet is None:
            # Any subnet would do (each lab's bridge is a separate L2 network); distinct ones keep logs readable.
            subnet = f"10.213.{(os.getpid() * 7 + serial) % 250 + 1}.0/24"
        self.network = ipaddress.ip_network(subnet)
        self.switch_ns = f"{self.tag}-sw"
        self._own_workdir = workdir is None
        # A caller's workdir (a campaign's run directory) is kept after the lab, with the hosts' logs.
        self.workdir = lab_root() / self.tag if workdir is None else Path(workdir)
        self.hosts: dict[str, Host] = {}
        self._cuts: set[tuple[str, str]] = set()  # (sender, receiver) host names faults.partition cut
        self.alive = False
        self._addrs = iter(self.network.hosts())
        next(self._addrs)  # .1 stays unused: there is no gateway, nothing is routed

    def __enter__(self) -> Lab:
        self.workdir.mkdir(parents=True, exist_ok=not self._own_workdir)
        self.alive = True
        _open_labs.add(self)
        try:
            _ip("netns", "add", self.switch_ns)
            _ip("link", "add", "br0", "type", "bridge", ns=self.switch_ns)
            _ip("link", "set", "br0", "up", ns=self.switch_ns)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def host(self, name: str, *, hide: Sequence[str] = (), tmpfs_mb: int | None = None) -> Host:
        """A new host on the bridge with the next address of the subnet."""
        if not self.alive:
            raise LabError("enter the lab (`with Lab(...) as lab`) before adding hosts")
        if not _NAME_RE.match(name) or name == "sw" or name in self.hosts:
            raise ValueError(f"host name {name!r}: unique, lowercase letters and digits, at most 12")
        index = len(self.hosts) + 1
        host = Host(self, name, index, str(next(self._addrs)), hide=hide, disk_mb=tmpfs_mb)
        self.hosts[name] = host
        host._build()
        return host

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def close(self) -> None:
        """Kill every process and delete every namespace and mount of this lab (idempotent)."""
        if not self.alive:
            return
        self.alive = False
        errors = []
        for host in self.hosts.values():
            try:
                host._teardown()
            except Exception as exc:  # keep tearing down the rest; report at the end
                errors.append(exc)
        _kill_netns(self.switch_ns)
        _ip("netns", "del", self.switch_ns, check=False)
        _umount_tagged(self.tag)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        _open_labs.discard(self)
        if errors:
            raise LabError(f"lab {self.tag} teardown: {errors}")


@atexit.register
def _close_open_labs() -> None:
    for lab in list(_open_labs):
        try:
            lab.close()
        except Exception:
            pass
