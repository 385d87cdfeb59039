"""Orderly pop of a FIFO consumer group as a state machine (hypothesis): the bookkeeping rules.

Model, per queue: the messages sent, in offset order; each is pending, in flight (with its
deadline and attempt), acked or dead (moved to the dead-letter topic). The rules:
- nothing of a queue is handed out while one of its messages is in flight and invisible;
- a batch of a queue holds its unacked messages in offset order, earliest first: no message is
  handed out while an earlier one of its queue is neither acked nor dead nor in the same batch;
- a message comes back with its attempt + 1, and after its last attempt goes to the dead-letter
  topic instead, never again to the group;
- a queue that is free and holds unacked messages hands out its earliest one (no stall);
- a receive retried with its attempt id (its answer lost) gets its range again, same attempts;
- the persisted committed offset never passes a message that is neither acked nor dead.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

from hypothesis import settings
from hypothesis import strategies as hs
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from txmq.broker.errors import InvalidReceiptHandle
from txmq.broker.server.consumer_groups import ConsumerGroups
from txmq.broker.server.pop import DLQ_PREFIX, PopService
from txmq.broker.store.config import StoreConfig
from txmq.broker.store.message import Message
from txmq.broker.store.message_store import MessageStore

TOPIC, GROUP, QUEUES, MAX_ATTEMPTS = "fifo-sm", "ordered", 2, 3


class Clock:
    def __init__(self) -> None:
        self.now_ms = 1_000_000_000

    def __call__(self) -> float:
        return self.now_ms / 1000


class OrderlyPopMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp())
        self.store = MessageStore(StoreConfig(data_dir=self.dir, flush_mode="async"))
        self.store.topics.create(TOPIC, QUEUES)
        groups = ConsumerGroups(self.dir / "consumer_groups.json", default_max_attempts=17)
        groups.update(GROUP, fifo=True, retry_max_times=MAX_ATTEMPTS - 1)
        self.clock = Clock()

        def topic_queue_count(topic, create=None):
            if not self.store.topics.exists(topic):
                self.store.topics.create(topic, 1)
            return self.store.topics.get(topic).queue_count

        core = SimpleNamespace(store=self.store, routes=None, consumer_groups=groups, topic_queue_count=topic_queue_count)
        self.pop = PopService(core, clock=self.clock)
        self.queues: list[list[str]] = [[] for _ in range(QUEUES)]  # bodies in offset order
        self.state: dict[str, str] = {}  # body -> pending | flight | acked | dead
        self.deadline: dict[str, int] = {}
        self.attempt: dict[str, int] = {}
        self.handle: dict[str, str] = {}
        self.range_attempt: dict[int, str] = {}  # queue -> attempt id of the receive that took its range
        self.receives = 0
        self.n = 0

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def queue_of(self, body: str) -> int:
        return next(q for q in range(QUEUES) if body in self.queues[q])

    def unfinished(self, q: int) -> list[str]:
        return [b for b in self.queues[q] if self.state[b] in ("pending", "flight")]

    def blocked(self, q: int) -> bool:
        return any(self.state[b] == "flight" and self.deadline[b] > self.clock.now_ms for b in self.queues[q])

    @rule(queue=hs.integers(0, QUEUES - 1), count=hs.integers(1, 3))
    def send(self, queue, count):
        bodies = [f"m{self.n + i}" for i in range(count)]
        self.n += count
        self.store.append([Message(topic=TOPIC, body=b.encode(), queue_id=queue) for b in bodies])
        for b in bodies:
            self.queues[queue].append(b)
            self.state[b] = "pending"

    def dead_letters(self) -> set[str]:
        dlq = DLQ_PREFIX + GROUP
        if not self.store.topics.exists(dlq):
            return set()
        return {m.body.decode() for m in self.store.read_queue(dlq, 0, 0, 10_000).messages}

    @rule(batch=hs.integers(1, 4), invisible_s=hs.integers(1, 5), queue=hs.integers(-1, QUEUES - 1),
          retry=hs.booleans())
    def receive(self, batch, invisible_s, queue, retry):
        """`retry`: the client asks again for the receive that took the named queue's range."""
        now = self.clock.now_ms
        retried = queue >= 0 and retry and queue in self.range_attempt
        self.receives += 1
        attempt_id = self.range_attempt[queue] if retried else f"r{self.receives}"
        blocked_before = {q for q in range(QUEUES) if self.blocked(q)}
        again: set[str] = set()  # a retried receive gets its range again, with the attempts it had
        if retried and queue in blocked_before:
            blocked_before.discard(queue)
            again = {b for b in self.queues[queue] if self.state[b] == "flight"}
        got = self.pop.receive(GROUP, TOPIC, QUEUES, start_queue=queue, batch=batch,
                               invisible_ms=invisible_s * 1000, message_filter=None, attempt_id=attempt_id)
        assert len(got) <= batch
        for body in self.dead_letters() - {b for b, s in self.state.items() if s == "dead"}:
            assert self.state[body] == "flight" and self.deadline[body] <= now, f"{body} went dead in flight"
            assert self.attempt[body] == MAX_ATTEMPTS, f"{body} went dead after {self.attempt[body]} attempts"
            assert self.queue_of(body) not in blocked_before
            self.state[body] = "dead"
        per_queue: dict[int, list[str]] = {}
        for d in got:
            body = d.message.body.decode()
            q = self.queue_of(body)
            assert queue < 0 or q == queue, "a receive naming a queue took another"
            assert q not in blocked_before, "handed out while a message of its queue was in flight"
            assert self.state[body] in ("pending", "flight"), f"{body} was {self.state[body]}"
            per_queue.setdefault(q, []).append(body)
            if body in again:
                expected_attempt = self.attempt[body]
            else:
                expected_attempt = 1 if self.state[body] == "pending" else self.attempt[body] + 1
            assert d.attempt == expected_attempt <= MAX_ATTEMPTS
            self.state[body], self.attempt[body] = "flight", d.attempt
            self.deadline[body], self.handle[body] = now + invisible_s * 1000, d.receipt_handle
        for q, bodies in per_queue.items():
            assert self.unfinished(q)[:len(bodies)] == bodies, \
                f"queue {q} handed out {bodies} while its earliest unfinished are {self.unfinished(q)}"
            self.range_attempt[q] = attempt_id
        if not got:
            for q in ([queue] if queue >= 0 else range(QUEUES)):
                if q not in blocked_before:
                    assert not self.unfinished(q), f"queue {q} is free but stalled on {self.unfinished(q)}"

    @precondition(lambda self: any(s == "flight" for s in self.state.values()))
    @rule(data=hs.data())
    def ack(self, data):
        body = data.draw(hs.sampled_from(sorted(b for b, s in self.state.items() if s == "flight")))
        try:
            self.pop.ack(GROUP, TOPIC, self.handle[body])
            self.state[body] = "acked"
        except InvalidReceiptHandle:  # the proxy refuses a handle whose invisible time is over
            assert self.deadline[body] <= self.clock.now_ms, f"the live handle of {body} was refused"

    @precondition(lambda self: any(s == "flight" for s in self.state.values()))
    @rule(data=hs.data(), seconds=hs.integers(0, 3))
    def nack(self, data, seconds):
        body = data.draw(hs.sampled_from(sorted(b for b, s in self.state.items() if s == "flight")))
        try:
            self.handle[body] = self.pop.change_invisible(GROUP, TOPIC, self.handle[body], seconds * 1000)
            self.deadline[body] = self.clock.now_ms + seconds * 1000
        except InvalidReceiptHandle:
            assert self.deadline[body] <= self.clock.now_ms, f"the live handle of {body} was refused"

    @rule(ms=hs.integers(500, 6000))
    def wait(self, ms):
        self.clock.now_ms += ms

    @invariant()
    def committed_offsets_never_pass_an_unfinished_message(self):
        self.pop.flush_offsets()
        for q in range(QUEUES):
            try:
                committed = self.store.offsets.get(GROUP, TOPIC, q)
            except Exception:
                continue
            for body in self.queues[q][:committed]:
                assert self.state[body] in ("acked", "dead"), f"{body} is below the committed offset"

    @invariant()
    def the_dead_letter_topic_holds_exactly_the_dead(self):
        assert self.dead_letters() == {b for b, s in self.state.items() if s == "dead"}


OrderlyPopMachine.TestCase.settings = settings(max_examples=40, stateful_step_count=40, deadline=None)
test_orderly_pop_state_machine = OrderlyPopMachine.TestCase
