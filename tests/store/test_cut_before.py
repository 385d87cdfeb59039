"""The cut just before an entry became visible (MessageStore.cut_before), from the queues' publish
histories: what a cluster-wide cut lowers a group to, to leave a transaction out."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.store._helpers import msg
from txmq.broker.store import consume_queue
from txmq.broker.store.consume_queue import PublishHistory

QUEUES = [("A", 0), ("A", 1), ("B", 0)]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(st.sampled_from(QUEUES), min_size=1, max_size=4), min_size=1, max_size=12),
       st.data())
def test_the_cut_before_an_entry_is_the_snapshot_taken_just_before_its_append(tmp_path_factory, appends, data):
    from txmq.broker.store import MessageStore
    from tests.store._helpers import small_config

    store = MessageStore(small_config(tmp_path_factory.mktemp("cut") / "store"))
    try:
        befores, entries = [], []
        for keys in appends:
            befores.append(store.max_offsets_snapshot(["A", "B"]))
            results = store.append_group([msg(topic=t, queue_id=q) for t, q in keys])
            entries.append(results[data.draw(st.integers(0, len(keys) - 1))])
        i = data.draw(st.integers(0, len(appends) - 1))
        e = entries[i]
        cut = store.cut_before(e.topic, e.queue_id, e.queue_offset, ["A", "B"])
        expected = {k: v for k, v in befores[i].items()}
        assert cut == {k: expected.get(k, 0) for k in cut} and set(expected) <= set(cut)
    finally:
        store.close()


def test_an_entry_not_yet_visible_or_not_in_the_store_has_no_cut(open_store):
    store = open_store()
    store.append([msg(topic="A")])
    assert store.cut_before("A", 0, 1, ["A"]) is None
    assert store.cut_before("Z", 0, 0, ["A"]) is None


def test_a_restarted_store_knows_no_cut_before_what_it_published_earlier(open_store, tmp_path):
    store = open_store()
    store.append([msg(topic="A")])
    store.close()
    reopened = open_store()
    assert reopened.cut_before("A", 0, 0, ["A"]) is None
    reopened.append([msg(topic="A")])
    assert reopened.cut_before("A", 0, 1, ["A"]) == {("A", 0): 1}


def test_a_history_that_dropped_a_publication_answers_unknown_for_the_moments_before_it(monkeypatch):
    monkeypatch.setattr(consume_queue, "PUBLISH_HISTORY", 3)
    history = PublishHistory()
    for seq, before in [(1, 0), (2, 1), (5, 2), (9, 3)]:  # 4 publications, 3 held
        history.record(seq, before)
    assert history.before(1, 4) is None and history.before(2, 4) == 1
    assert history.before(3, 4) == 2 and history.before(9, 4) == 3 and history.before(10, 4) == 4
    assert history.seq_of(0, 4) is None and history.seq_of(2, 4) == 5 and history.seq_of(3, 4) == 9
