"""Shared pytest fixtures: a real broker process on loopback."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.support importable
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

from tests.support.broker_process import BrokerProcess  # noqa: E402


def _own_port_slice() -> None:
    """Under pytest-xdist each worker draws free ports from its own slice of the range, so that two
    workers never pick the same port between one's pick and its broker's bind."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER"), os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not worker or not count or "TXMQ_FREE_PORTS" in os.environ:
        return
    from txmq.broker.ports import free_port_range

    low, high = free_port_range()
    index, slices = int(worker.removeprefix("gw")), int(count)
    width = (high - low) // slices
    os.environ["TXMQ_FREE_PORTS"] = f"{low + index * width}-{low + (index + 1) * width}"


_own_port_slice()


@pytest.fixture
def broker(tmp_path: Path):
    """A broker process (sync flush) on a free port, stopped cleanly at the end."""
    with BrokerProcess(tmp_path / "broker") as proc:
        yield proc


@pytest.fixture(params=["compiled", "numpy"])
def decode_path(request, monkeypatch):
    """Which decode builds this process's pulls (store/pull_decode.py): the compiled one wherever
    it can, or the numpy one it leaves errors and rare cases to, always. Use it as
    `usefixtures("decode_path")`."""
    if request.param == "numpy":
        from txmq.broker.store import pull_decode

        monkeypatch.setattr(pull_decode, "pull_batch_compiled", lambda *args: None)
    return request.param


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    """A single-member etcd on free loopback ports (Debian's etcd-server: `make etcd`)."""
    import shutil

    from txmq.broker.cluster.etcd_process import EtcdProcess

    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (make etcd installs Debian's etcd-server)")
    proc = EtcdProcess(tmp_path_factory.mktemp("etcd")).start()
    yield proc
    proc.kill()


@pytest.fixture
def group_factory(tmp_path, etcd, request):
    """Starts broker groups (3 replica processes each by default) around `etcd`; stops them after."""
    from txmq.broker.cluster.local_group import LocalGroup

    made: list[LocalGroup] = []
    etcd.clear()  # the groups and topics of earlier tests are gone with them

    def make(name: str | None = None, *, args: list[str] | None = None, **kw) -> LocalGroup:
        g = LocalGroup(tmp_path, etcd, name or f"{request.node.name[:40]}-{len(made)}".replace("[", "-")
                       .replace("]", ""), args=["--transaction-timeout", "1s", "--check-interval", "1s",
                                                *(args or [])], **kw)
        made.append(g)
        return g.start()

    yield make
    for g in made:
        g.stop()


def _heaviest_files() -> dict[str, int]:
    lines = (ROOT / "tests" / "heaviest_files.txt").read_text().splitlines()
    names = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    return {name: rank for rank, name in enumerate(names)}


def pytest_collection_modifyitems(config, items) -> None:
    """Longest files first: xdist's loadfile hands out files in collection order (make test turns
    off its own reorder by test count), so a long file left for last would hold the run alone."""
    heaviest = _heaviest_files()
    last = len(heaviest)
    items.sort(key=lambda item: heaviest.get(item.nodeid.split("::", 1)[0], last))  # stable: files stay whole
