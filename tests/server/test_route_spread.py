"""How a group's replicas are listed per queue in a route (messaging_service.spread)."""

from __future__ import annotations

import pytest

from txmq.broker.protocol import rocketmq_v2_pb2 as pb
from txmq.broker.server.messaging_service import spread


def endpoints(*hosts: str) -> pb.Endpoints:
    return pb.Endpoints(scheme=pb.IPv4, addresses=[pb.Address(host=h, port=8081) for h in hosts])


def listed(e: pb.Endpoints) -> list[str]:
    return [f"{a.host}:{a.port}" for a in e.addresses]


@pytest.mark.parametrize("n", [3, 4, 5])
def test_queues_list_address_sets_that_differ_each_with_an_address_to_fall_back_on(n):
    group = endpoints(*[f"10.0.0.{9 - i}" for i in range(n)])  # dialled in any order
    lists = [listed(spread(group, k)) for k in range(2 * n)]
    assert all(len(lst) >= 2 and lst == sorted(lst) for lst in lists)
    # a client that sorts a list's addresses and takes the lowest reaches n-1 replicas across the queues
    assert len({min(lst) for lst in lists}) == n - 1
    assert len({frozenset(lst) for lst in lists}) == n - 1


def test_a_group_of_one_or_two_is_listed_whole_for_every_queue():
    for group in (endpoints("10.0.0.1"), endpoints("10.0.0.2", "10.0.0.1")):
        assert all(listed(spread(group, k)) == listed(group) for k in range(4))
