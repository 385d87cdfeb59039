"""Issue 38 item 7: a replica that wins an election but cannot read etcd as it takes over must not
be left unable to take over at every later win (the election storm the lab saw: `only a replica is
promoted`, the epoch climbing by one per tick while the group had no leader)."""

from __future__ import annotations

import time

from txmq.broker.cluster import coordination
from txmq.broker.cluster.coordination import CoordinationUnavailable, EtcdGroup
from txmq.broker.cluster.node import ReplicaNode
from txmq.broker.server.config import BrokerConfig


def test_a_winner_cut_from_etcd_as_it_takes_over_leads_at_its_next_win_without_an_election_storm(
        etcd, tmp_path, monkeypatch):
    etcd.clear()
    won = {"n": 0}
    real_campaign, real_in_sync = EtcdGroup.campaign, EtcdGroup.in_sync

    def campaign(self, *args, **kw):
        result = real_campaign(self, *args, **kw)
        if isinstance(result, coordination.LeaderRecord):
            won["n"] += 1
        return result

    def in_sync(self):
        if won["n"] == 1 and not won.get("failed"):
            won["failed"] = True  # etcd goes away right after the first win, once
            raise CoordinationUnavailable("no etcd endpoint answered: cut off (injected)")
        return real_in_sync(self)

    monkeypatch.setattr(EtcdGroup, "campaign", campaign)
    monkeypatch.setattr(EtcdGroup, "in_sync", in_sync)
    node = ReplicaNode(BrokerConfig(data_dir=tmp_path / "r1", listen="127.0.0.1:0", etcd=etcd.endpoint,
                                    group="storm", replicas=1))
    node.start()
    try:
        deadline = time.monotonic() + 20
        while node.broker is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert node.broker is not None, f"it never took over (elections won {node.elections_won}, tries {won['n']})"
        view = EtcdGroup([("127.0.0.1", etcd.client_port)], "storm", 2)
        epoch_then, _ = view.epoch()
        time.sleep(2)
        epoch_now, _ = view.epoch()
        assert won.get("failed"), "the injected etcd failure never happened"
        assert epoch_now == epoch_then <= 3, f"elections went on: epoch {epoch_then} -> {epoch_now}"
        assert node.elections_won == 1 and node.lead is not None and not node.lead.fenced
    finally:
        node.stop()
