"""Check-backs go to a live session of the right producer: sender first, then group, then topic."""

from __future__ import annotations

from dataclasses import dataclass, field

from txmq.broker.server.checkback_router import CheckbackRouter


@dataclass(eq=False)
class FakeSession:
    client_id: str
    producer_group: str = ""
    topics: set = field(default_factory=set)
    alive: bool = True
    pushed: list = field(default_factory=list)

    def push(self, tx, half) -> bool:
        self.pushed.append(tx.transaction_id)
        return True


@dataclass
class Tx:
    transaction_id: str
    producer_group: str = ""
    topics: tuple = ()


def test_the_client_that_sent_the_halves_is_asked_first():
    router = CheckbackRouter()
    other = FakeSession("other", topics={"orders"})
    sender = FakeSession("sender")
    router.register(other)
    router.register(sender)
    router.note_half("tx1", "sender", "orders")
    assert router.request_check(Tx("tx1", topics=("orders",)), half=None)
    assert sender.pushed == ["tx1"] and other.pushed == []
    assert "orders" in sender.topics


def test_a_publisher_of_the_topic_answers_when_the_sender_is_gone():
    router = CheckbackRouter()
    gone = FakeSession("sender", alive=False)
    publisher = FakeSession("p2", topics={"orders"})
    unrelated = FakeSession("p3", topics={"payments"})
    for s in (gone, publisher, unrelated):
        router.register(s)
    router.note_half("tx1", "sender", "orders")
    assert router.request_check(Tx("tx1", topics=("orders",)), half=None)
    assert publisher.pushed == ["tx1"] and unrelated.pushed == [] and gone.pushed == []


def test_sessions_of_another_producer_group_are_never_asked():
    router = CheckbackRouter()
    foreign = FakeSession("f", producer_group="pg-b", topics={"orders"})
    router.register(foreign)
    assert not router.request_check(Tx("tx1", producer_group="pg-a", topics=("orders",)), half=None)
    assert foreign.pushed == []
    own = FakeSession("o", producer_group="pg-a")
    router.register(own)
    assert router.request_check(Tx("tx1", producer_group="pg-a", topics=("orders",)), half=None)
    assert own.pushed == ["tx1"]


def test_nobody_to_ask_reports_undelivered():
    router = CheckbackRouter()
    assert not router.request_check(Tx("tx1", topics=("orders",)), half=None)
    assert router.undeliverable == 1


def test_a_session_of_a_producer_group_is_never_asked_about_a_transaction_without_one():
    """An official RocketMQ 5 client's transaction (no producer group on a broker without auth) goes
    only to sessions that declared none: a native producer of the same topic, in its own group, cannot know it."""
    router = CheckbackRouter()
    native = FakeSession("native", producer_group="pg-native", topics={"orders"})
    router.register(native)
    assert not router.request_check(Tx("tx1", topics=("orders",)), half=None)
    official = FakeSession("official", topics={"orders"})
    router.register(official)
    assert router.request_check(Tx("tx1", topics=("orders",)), half=None)
    assert official.pushed == ["tx1"] and native.pushed == []


def test_a_sender_in_another_producer_group_is_not_asked():
    router = CheckbackRouter()
    sender = FakeSession("sender", producer_group="pg-b")
    router.register(sender)
    router.note_half("tx1", "sender", "orders")
    assert not router.request_check(Tx("tx1", producer_group="pg-a", topics=("orders",)), half=None)
    assert sender.pushed == []
