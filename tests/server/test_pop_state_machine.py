"""Pop consumption as a state machine (hypothesis): the rules a consumer group relies on.

Model: every sent message is either acked (retired for good) or will be
delivered again once its invisibility ends; a message is never handed out while
it is invisible; an acked message never comes back; a stale or superseded
receipt handle is refused; the persisted committed offset never passes an
unacked message.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

from hypothesis import settings
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule
from hypothesis import strategies as hs

from txmq.broker.errors import InvalidReceiptHandle
from txmq.broker.server.consumer_groups import ConsumerGroups
from txmq.broker.server.pop import PopService
from txmq.broker.store.config import StoreConfig
from txmq.broker.store.message import Message
from txmq.broker.store.message_store import MessageStore

TOPIC, GROUP, QUEUES = "pop-sm", "g1", 2


class Clock:
    """A test clock in whole milliseconds, the broker's deadline resolution."""

    def __init__(self) -> None:
        self.now_ms = 1_000_000_000

    def __call__(self) -> float:
        return self.now_ms / 1000


class PopMachine(RuleBasedStateMachine):
    handles = Bundle("handles")

    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp())
        self.store = MessageStore(StoreConfig(data_dir=self.dir, flush_mode="async"))
        self.store.topics.create(TOPIC, QUEUES)
        self.clock = Clock()
        core = SimpleNamespace(store=self.store, routes=None, topic_queue_count=lambda t, create=None: QUEUES,
                               consumer_groups=ConsumerGroups(self.dir / "consumer_groups.json",
                                                              default_max_attempts=1000))
        self.pop = PopService(core, clock=self.clock)
        self.sent: set[bytes] = set()
        self.acked: set[bytes] = set()
        self.invisible_until: dict[bytes, int] = {}  # body -> deadline (ms) of its current delivery
        self.current_handle: dict[bytes, str] = {}
        self.n = 0

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @rule(queue=hs.integers(0, QUEUES - 1))
    def send(self, queue):
        body = f"m{self.n}".encode()
        self.n += 1
        self.store.append([Message(topic=TOPIC, body=body, queue_id=queue)])
        self.sent.add(body)

    @rule(target=handles, batch=hs.integers(1, 4), invisible_s=hs.integers(1, 5))
    def receive(self, batch, invisible_s):
        got = self.pop.receive(GROUP, TOPIC, QUEUES, start_queue=-1, batch=batch, invisible_ms=invisible_s * 1000,
                               message_filter=None)
        visible_before = {b for b in self.sent - self.acked if self.invisible_until.get(b, 0) <= self.clock.now_ms}
        for d in got:
            body = d.message.body
            assert body not in self.acked, "an acked message was delivered again"
            assert self.invisible_until.get(body, 0) <= self.clock.now_ms, "delivered while invisible"
            self.invisible_until[body] = self.clock.now_ms + invisible_s * 1000
            self.current_handle[body] = d.receipt_handle
        assert len(got) == min(batch, len(visible_before)), "a visible message was held back"
        return [(d.message.body, d.receipt_handle) for d in got] or [(b"", "none")]

    @rule(picked=handles, index=hs.integers(0, 3))
    def ack(self, picked, index):
        body, handle = picked[index % len(picked)]
        valid = (body in self.current_handle and self.current_handle[body] == handle and body not in self.acked
                 and self.invisible_until[body] > self.clock.now_ms)  # an expired handle is refused
        try:
            self.pop.ack(GROUP, TOPIC, handle)
            assert valid, "a stale, superseded, expired or acked handle was accepted"
            self.acked.add(body)
        except InvalidReceiptHandle:
            assert not valid, "a current handle was refused"

    @rule(picked=handles, index=hs.integers(0, 3), seconds=hs.integers(0, 4))
    def change_invisible(self, picked, index, seconds):
        body, handle = picked[index % len(picked)]
        valid = (body in self.current_handle and self.current_handle[body] == handle and body not in self.acked
                 and self.invisible_until[body] > self.clock.now_ms)  # an expired handle is refused
        try:
            new = self.pop.change_invisible(GROUP, TOPIC, handle, seconds * 1000)
            assert valid
            self.current_handle[body] = new
            self.invisible_until[body] = self.clock.now_ms + seconds * 1000
        except InvalidReceiptHandle:
            assert not valid

    @rule(ms=hs.integers(500, 6000))
    def wait(self, ms):
        self.clock.now_ms += ms

    @invariant()
    def committed_offsets_never_pass_an_unacked_message(self):
        self.pop.flush_offsets()
        for qid in range(QUEUES):
            try:
                committed = self.store.offsets.get(GROUP, TOPIC, qid)
            except Exception:
                continue
            read = self.store.read_queue(TOPIC, qid, 0, 10_000)
            for m in read.messages[:committed]:
                assert m.body in self.acked, f"offset {m.queue_offset} committed but not acked"


PopMachine.TestCase.settings = settings(max_examples=25, stateful_step_count=30, deadline=None)
test_pop_state_machine = PopMachine.TestCase
