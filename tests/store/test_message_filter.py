"""Read filters on a real store: a SQL92 filter, a tag filter, or both.

`MessageStore.read_queue` (the object reads behind receives and the RocketMQ
protocol's pulls) and `pull_batch` (the columnar pulls behind Flight DoGet and
Spark) must select the same messages with the same filter.
"""

from __future__ import annotations

import pytest

from txmq.broker.errors import IllegalFilterExpression
from txmq.broker.server.native_pull import build_pull_batch, pull_batch
from txmq.broker.store import Message
from txmq.broker.store.message import PROP_KEYS, PROP_TAGS
from txmq.broker.store.message_filter import MessageFilter
from txmq.broker.store.tag_filter import tag_hash

REGIONS = ["eu", "us", "ap"]


def order(i: int) -> Message:
    return Message("orders", f"order-{i}".encode(), queue_id=0,
                   properties={PROP_TAGS: "paid" if i % 2 else "new", PROP_KEYS: f"k{i} shared",
                               "region": REGIONS[i % 3], "amount": str(i * 10)})


@pytest.fixture
def orders(open_store):
    store = open_store()
    store.append([order(i) for i in range(30)])
    return store


def bodies_read(store, message_filter) -> list[bytes]:
    read = store.read_queue("orders", 0, 0, 100, tag_filter=message_filter)
    return [m.body for m in read.messages]


def bodies_pulled(store, message_filter) -> list[bytes]:
    return pull_batch(store, "orders", 0, 0, 100, message_filter=message_filter).batch.column("body").to_pylist()


def expected(predicate) -> list[bytes]:
    return [f"order-{i}".encode() for i in range(30) if predicate(i)]


def test_a_sql_filter_reads_only_matching_messages(orders):
    f = MessageFilter.parse(sql="region = 'eu' AND amount >= 100")
    assert bodies_read(orders, f) == expected(lambda i: i % 3 == 0 and i * 10 >= 100)


def test_a_columnar_pull_selects_what_the_object_read_selects(orders):
    f = MessageFilter.parse(sql="amount BETWEEN 50 AND 200 OR region IN ('ap')")
    assert bodies_pulled(orders, f) == bodies_read(orders, f) == \
        expected(lambda i: 50 <= i * 10 <= 200 or i % 3 == 2)


def test_a_filtered_pull_batch_equals_the_batch_of_the_selected_messages(orders):
    f = MessageFilter.parse(sql="KEYS CONTAINS 'k1'")
    pulled = pull_batch(orders, "orders", 0, 0, 100, message_filter=f).batch
    reference = build_pull_batch(orders.read_queue("orders", 0, 0, 100, tag_filter=f).messages)
    assert pulled.equals(reference)


def test_a_filtered_pull_moves_on_past_a_range_with_no_match(orders):
    got = pull_batch(orders, "orders", 0, 0, 10, message_filter=MessageFilter.parse(sql="region = 'nowhere'"))
    assert got.batch.num_rows == 0 and got.next_offset == 10


def test_tags_and_sql_together_select_messages_passing_both(orders):
    f = MessageFilter.parse(tags="paid", sql="region = 'eu'")
    assert bodies_pulled(orders, f) == bodies_read(orders, f) == expected(lambda i: i % 2 and i % 3 == 0)


def test_tags_in_sql_reads_the_message_tag(orders):
    assert bodies_read(orders, MessageFilter.parse(sql="TAGS = 'new' AND amount < 40")) == expected(
        lambda i: i % 2 == 0 and i < 4)


def test_a_sql_filter_on_tags_skips_queue_entries_of_other_tags_by_their_hash():
    f = MessageFilter.parse(sql="TAGS IN ('a', 'b') AND x > 1")
    assert f.may_match(tag_hash("a")) and f.may_match(tag_hash("b"))
    assert not f.may_match(tag_hash("c")) and not f.may_match(tag_hash(None))


def test_a_sql_filter_not_bound_to_tags_reads_every_entry():
    f = MessageFilter.parse(sql="TAGS = 'a' OR x > 1")
    assert f.may_match(tag_hash("c")) and f.may_match(tag_hash(None))


def test_system_properties_other_than_tags_and_keys_are_invisible_to_sql(orders):
    assert len(bodies_read(orders, MessageFilter.parse(sql="UNIQ_KEY IS NULL"))) == 30


def test_an_empty_sql92_expression_from_the_wire_is_refused():
    with pytest.raises(IllegalFilterExpression):
        MessageFilter.of("SQL92", " ")


def test_no_filter_matches_everything():
    assert MessageFilter.parse().matches_all and MessageFilter.parse(tags="*", sql="").matches_all
