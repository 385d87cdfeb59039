"""The membership store: pop members are listed for operators but take no share of an allocation."""

from __future__ import annotations

from txmq.broker.server.membership import LocalMembership, MemberInfo


def test_a_pop_member_is_listed_but_left_out_of_the_members_a_heartbeat_answers():
    store = LocalMembership()
    store.heartbeat("g", "pop-1", 30_000, info=MemberInfo(client="JAVA 5.0.7 SIMPLE_CONSUMER", pop=True))
    answered = store.heartbeat("g", "native-1", 30_000, info=MemberInfo(queues=(("t", "", 0),)))
    assert answered == ["native-1"]
    listed = store.members("g")
    assert sorted(listed) == ["native-1", "pop-1"]
    assert listed["pop-1"].pop and listed["native-1"].queues == (("t", "", 0),)


def test_a_member_whose_heartbeat_ran_out_is_no_longer_listed():
    now = [100.0]
    store = LocalMembership(clock=lambda: now[0])
    store.heartbeat("g", "m", 1_000)
    now[0] += 1.5
    assert store.members("g") == {}


def test_groups_lists_those_with_a_live_member_only():
    now = [100.0]
    store = LocalMembership(clock=lambda: now[0])
    store.heartbeat("short", "m", 1_000)
    store.heartbeat("long", "m", 10_000)
    assert store.groups() == ["long", "short"]
    now[0] += 1.5
    assert store.groups() == ["long"]
