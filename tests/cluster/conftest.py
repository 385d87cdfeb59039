import shutil

import pytest

from txmq.broker.cluster.etcd_process import EtcdProcess
from tests.support.cluster import Group


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

    def make(name: str | None = None, **kw) -> Group:
        g = Group(tmp_path, etcd, name or f"{request.node.name[:40]}-{len(made)}".replace("[", "-").replace("]", ""),
                  **kw)
        made.append(g)
        return g.start()

    yield make
    for g in made:
        g.stop()
