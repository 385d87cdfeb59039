"""Listing consumer groups: as Kafka's ListGroups, a group is known by its settings, its
committed offsets or its live members, whichever it has."""

from __future__ import annotations


def _names(client) -> set[str]:
    return {g.name for g in client.list_consumer_groups()}


def test_a_group_with_settings_only_is_listed(client, unique):
    client.update_consumer_group(f"set_{unique}", retry_max_times=3)
    assert f"set_{unique}" in _names(client)


def test_a_group_with_committed_offsets_only_is_listed_with_default_settings(client, topic, unique):
    client.commit_offsets(f"off_{unique}", {topic: {0: 0}})
    listed = {g.name: g for g in client.list_consumer_groups()}
    assert f"off_{unique}" in listed
    assert not listed[f"off_{unique}"].fifo


def test_a_group_with_a_live_member_only_is_listed_until_the_member_leaves(client, unique):
    group = f"live_{unique}"
    client.consumer_heartbeat(group, "m-1", 30_000, client="test")
    assert group in _names(client)
    client.consumer_heartbeat(group, "m-1", 30_000, leave=True)
    assert group not in _names(client)
