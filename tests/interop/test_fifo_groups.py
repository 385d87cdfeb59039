"""FIFO consumer groups with the official clients (Python 5.1.2; Java 5.0.8 for the PushConsumer), as against
Apache RocketMQ's proxy: a group marked FIFO (`txmq group create G --fifo`, RocketMQ's
consumeMessageOrderly) keeps each message group's order across nacks, retries and the
dead-letter topic, while the other message groups go on.

Each message group is picked to land on its own queue: FIFO consumption is ordered per queue,
as Apache's broker pops it, and a message group lives on one queue.
"""

from __future__ import annotations

import uuid
import zlib

import pytest

from tests.interop.conftest import run_client
from tests.support.broker_process import BrokerProcess

pytestmark = pytest.mark.interop

QUEUES = 4


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def groups_on_distinct_queues(n: int, queues: int = QUEUES) -> list[str]:
    """n message group names that SendMessage puts on n different queues (crc32 of the group)."""
    picked: dict[int, str] = {}
    i = 0
    while len(picked) < n:
        candidate = f"mg{i}"
        picked.setdefault(zlib.crc32(candidate.encode()) % queues, candidate)
        i += 1
    return list(picked.values())


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("fifo-broker"), flush="async") as proc:
        yield proc.endpoint


@pytest.fixture(scope="module")
def admin(endpoint):
    from txmq.broker.client.native_client import NativeClient
    with NativeClient(endpoint) as c:
        yield c


def fifo_setup(admin, *, retry_max_times: int = 16, queues: int = QUEUES) -> tuple[str, str]:
    topic, group = name("fifo"), name("cg")
    admin.create_topic(topic, queues, message_type="FIFO")
    admin.update_consumer_group(group, fifo=True, retry_max_times=retry_max_times)
    return topic, group


def per_group(bodies: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for b in bodies:
        out.setdefault(b.rsplit("-", 1)[0], []).append(b)
    return out


def dead_letters(admin, group: str) -> list[str]:
    dlq = f"%DLQ%{group}"
    end = admin.snapshot_offsets([dlq])[dlq][0]
    return [b.decode() for r in admin.read_queue(dlq, 0, 0, end) for b in r.batch.column("body").to_pylist()]


def test_a_nacked_message_comes_back_before_its_group_s_later_messages(endpoint, admin):
    topic, group = fifo_setup(admin, queues=3)
    a, b, c = groups_on_distinct_queues(3, queues=3)
    got = run_client(endpoint, "fifo-simple", "--topic", topic, "--group", group, "--message-groups", f"{a},{b},{c}",
                     "--count", "5", "--split", "3", "--fail", f"{a}-1", "--expect", "15")
    assert "fatal" not in got and got["errors"] == [], got
    acked = per_group(got["acked"])
    assert acked == {g: [f"{g}-{i}" for i in range(5)] for g in (a, b, c)}, "each group's order holds"
    retried = [r for r in got["received"] if r["body"] == f"{a}-1"]
    assert [r["attempt"] for r in retried] == [1, 2]


def test_a_group_s_later_messages_wait_for_the_retry_while_other_groups_proceed(endpoint, admin):
    # a 10 s nack: on a loaded host (CI at load 7) b's last receives came after a 5 s one
    # two queues, no empty one: the client's receives (one queue at a time, round robin) reach b's
    # queue again well within the nack
    topic, group = fifo_setup(admin, queues=2)
    a, b = groups_on_distinct_queues(2, queues=2)
    got = run_client(endpoint, "fifo-simple", "--topic", topic, "--group", group, "--message-groups", f"{a},{b}",
                     "--count", "6", "--split", "2", "--fail", f"{a}-0", "--nack-s", "10", "--expect", "12")
    assert "fatal" not in got and got["errors"] == [], got
    retry_at = next(r["at"] for r in got["received"] if r["body"] == f"{a}-0" and r["attempt"] == 2)
    # a-2.. were sent while a-0 was nacked: none of them comes before the retry
    assert all(r["at"] >= retry_at for r in got["received"] if r["body"] in {f"{a}-{i}" for i in range(2, 6)})
    # b's messages sent at the same moment are consumed meanwhile
    assert all(r["at"] < retry_at for r in got["received"] if r["body"].startswith(f"{b}-"))
    assert per_group(got["acked"])[a] == [f"{a}-{i}" for i in range(6)]


def test_after_its_last_attempt_a_message_goes_to_the_dead_letter_topic_and_its_group_continues(endpoint, admin):
    # one message a receive: a message handed out again behind a retried one counts an attempt too
    # (as in Apache), so a consumer that wants each message's own count takes them one by one
    topic, group = fifo_setup(admin, retry_max_times=1, queues=2)
    a, b = groups_on_distinct_queues(2, queues=2)
    got = run_client(endpoint, "fifo-simple", "--topic", topic, "--group", group, "--message-groups", f"{a},{b}",
                     "--count", "4", "--split", "4", "--fail", f"{a}-1", "--fail-times", "99", "--nack-s", "1",
                     "--batch", "1", "--expect", "7")
    assert "fatal" not in got and got["errors"] == [], got
    assert per_group(got["acked"]) == {a: [f"{a}-0", f"{a}-2", f"{a}-3"], b: [f"{b}-{i}" for i in range(4)]}
    assert [r["attempt"] for r in got["received"] if r["body"] == f"{a}-1"] == [1, 2]
    assert dead_letters(admin, group) == [f"{a}-1"]


@pytest.fixture(params=["python", "java"])
def push_client(request, drivers):
    """The official clients whose PushConsumer this suite drives in FIFO groups (rmq.py, Interop.java).
    Not Go's (v5.1.4): its FIFO consume service goes on to the next message of a batch while a failed
    one waits for its local retry (consumeIteratively does not wait for eraseFifoMessage), so it
    breaks a group's order after a failure against any broker, Apache's proxy included."""
    driver = drivers(request.param)
    if driver.skip_reason:
        pytest.skip(driver.skip_reason)
    return driver


def test_a_push_consumer_of_a_fifo_group_retries_in_order(push_client, endpoint, admin):
    topic, group = fifo_setup(admin)
    a, b = groups_on_distinct_queues(2)
    got = push_client.run(endpoint, "fifo-push", "--topic", topic, "--group", group, "--message-groups", f"{a},{b}",
                          "--count", "5", "--fail", f"{a}-1", "--expect", "10")
    assert "fatal" not in got, got
    assert got.get("fifo", True) is True, "the Telemetry settings answer says the group is FIFO"
    calls = per_group([c["body"] for c in got["calls"]])
    assert calls[a] == [f"{a}-0", f"{a}-1", f"{a}-1", f"{a}-2", f"{a}-3", f"{a}-4"]
    assert calls[b] == [f"{b}-{i}" for i in range(5)]


def test_a_push_consumer_forwards_a_message_that_keeps_failing_to_the_dead_letter_topic_then_goes_on(
        push_client, endpoint, admin):
    topic, group = fifo_setup(admin, retry_max_times=1)
    a, = groups_on_distinct_queues(1)
    got = push_client.run(endpoint, "fifo-push", "--topic", topic, "--group", group, "--message-groups", a,
                     "--count", "3", "--fail", f"{a}-1", "--fail-times", "99", "--expect", "3")
    assert "fatal" not in got, got
    assert [c["body"] for c in got["calls"]] == [f"{a}-0", f"{a}-1", f"{a}-1", f"{a}-2"]
    assert dead_letters(admin, group) == [f"{a}-1"]


def test_a_consumer_group_without_settings_is_not_fifo(endpoint, admin):
    topic = name("fifo")
    admin.create_topic(topic, QUEUES, message_type="FIFO")
    got = run_client(endpoint, "fifo-push", "--topic", topic, "--group", name("plain"), "--message-groups", "x",
                     "--count", "1", "--expect", "1", "--linger", "0")
    assert got["fifo"] is False
