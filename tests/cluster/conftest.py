import shutil

import pytest

from txmq.broker.cluster.etcd_process import EtcdProcess
from txmq.broker.cluster.local_group import LocalGroup as Group


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    if shutil.which("etcd") is None:
        pytest.skip("etcd is not installed (make etcd installs Debian's etcd-server)")
    proc = EtcdProcess(tmp_path_factory.mktemp("etcd")).start()
    yield proc
    proc.kill()


@pytest.fixture
def group_factory(tmp_path, etcd, request):
    made: list[Group] = []

    def make(name: str | None = None, *, args: list[str] | None = None, **kw) -> Group:
        g = Group(tmp_path, etcd, name or f"{request.node.name[:40]}-{len(made)}".replace("[", "-").replace("]", ""),
                  args=["--transaction-timeout", "1s", "--check-interval", "1s", *(args or [])], **kw)
        made.append(g)
        return g.start()

    yield make
    for g in made:
        g.stop()
