"""A replica stopping after its lease expired (paused, cut from etcd) stops cleanly: revoking a
lease etcd no longer has is not an error."""

from __future__ import annotations

import time

from txmq.broker.cluster.coordination import EtcdGroup


def test_closing_after_the_lease_expired_raises_nothing_and_forgets_the_lease(etcd):
    view = EtcdGroup([("127.0.0.1", etcd.client_port)], "closing", 1)
    assert view.keepalive()
    time.sleep(2.5)  # a 1 s lease, never renewed: etcd drops it
    view.close()
    assert view.lease_id is None


def test_closing_revokes_a_live_lease(etcd):
    view = EtcdGroup([("127.0.0.1", etcd.client_port)], "closing", 5)
    assert view.keepalive()
    lease = view.lease_id
    view.close()
    checker = EtcdGroup([("127.0.0.1", etcd.client_port)], "closing", 5)
    checker.lease_id = lease
    assert not checker.keepalive()  # revoked: a renewal finds no lease
