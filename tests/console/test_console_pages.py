"""The console's pages against one real broker: what they show is what the CLI says."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from tests.console.conftest import Console, cli_json, wait_for
from tests.support.broker_process import BrokerProcess
from txmq.broker.client import Message, NativeClient

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("console") / "data", flush="async") as proc:
        yield proc


@pytest.fixture(scope="module")
def console(broker):
    c = Console(broker.endpoint)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def client(broker):
    with NativeClient(broker.endpoint) as c:
        yield c


def test_the_cluster_page_shows_a_lone_broker_as_one_group_whose_one_replica_leads(page, console, broker):
    b = page(console.url + "/cluster")
    rows = wait_for(lambda: [(r.get_attribute("data-replica"), r.get_attribute("data-role"))
                             for r in b.find_elements(By.CSS_SELECTOR, "tr[data-replica]")], what="replicas")
    assert rows == [(broker.endpoint, "leader")]
    assert "(single broker)" in b.find_element(By.CSS_SELECTOR, "section.group h2").text


def test_the_topics_page_shows_each_queues_offsets_as_the_cli_describes_them(page, console, client, broker):
    client.create_topic("console-orders", 3)
    client.send([Message("console-orders", f"o-{i}".encode()) for i in range(10)])
    described = cli_json("topic", "describe", "console-orders", "--broker", broker.endpoint)
    b = page(console.url + "/topics")
    shown = wait_for(lambda: {s.get_attribute("data-queue"): int(s.get_attribute("data-max"))
                              for s in b.find_elements(By.CSS_SELECTOR, "tr[data-topic='console-orders'] span.q")},
                     what="the topic's queues")
    assert shown == {f"/{q['queue_id']}": q["max_offset"] for q in described["queues"]}
    assert sum(shown.values()) == 10


def test_a_pending_transaction_appears_and_disappears_when_it_commits(page, console, client):
    prepared = client.prepare("", [Message("console-payments", b"p-1"), Message("console-payments", b"p-2")],
                              producer_group="billing")
    b = page(console.url + "/transactions")
    selector = f"tr[data-transaction='{prepared.transaction_id}']"
    wait_for(lambda: b.find_elements(By.CSS_SELECTOR, selector), what="the pending transaction")
    text = wait_for(lambda: b.find_element(By.CSS_SELECTOR, selector).text, what="the transaction's row")
    assert "billing" in text and "console-payments" in text
    counted = wait_for(lambda: b.find_element(
        By.CSS_SELECTOR, "tr[data-producer-group='billing'][data-topic='console-payments'] .count").text, what="count")
    assert counted == "1"
    next_check = b.find_element(By.CSS_SELECTOR, f"{selector} .next-check").text
    assert next_check.startswith("in ") or next_check == "due", next_check  # the broker's check-back schedule
    client.end_transaction(prepared.transaction_id, "COMMIT")
    wait_for(lambda: not b.find_elements(By.CSS_SELECTOR, selector), what="the committed transaction to go")
    assert not b.find_elements(By.CSS_SELECTOR, "tr[data-producer-group='billing']")


def test_the_transactions_chart_draws_commits_rollbacks_and_check_backs(page, console, client):
    b = page(console.url + "/transactions")
    for i in range(3):
        p = client.prepare("", [Message("console-chart", b"c")], producer_group="charted")
        client.end_transaction(p.transaction_id, "COMMIT")
    labels = wait_for(lambda: [e.text for e in b.find_elements(By.CSS_SELECTOR, "#tx-chart .u-legend .u-label")],
                      what="the chart")
    assert labels[1:] == ["commits/s", "rollbacks/s", "check-backs/s"]
    drawn = wait_for(lambda: b.execute_script(
        "var p = document.getElementById('tx-chart')._plot; return p && p.data[1].some(function (v) { return v > 0; });"),
        what="commits drawn on the chart")
    assert drawn


def test_a_consumer_groups_lag_is_what_the_cli_reports(page, console, client, broker):
    client.create_topic("console-lag", 2)
    client.send([Message("console-lag", b"x") for _ in range(8)])
    client.commit_offsets("console-readers", {"console-lag": {0: 1, 1: 2}})
    cli = cli_json("group", "lag", "console-readers", "--broker", broker.endpoint)
    b = page(console.url + "/groups/console-readers")
    shown = wait_for(lambda: {r.get_attribute("data-queue"): int(r.find_element(By.CSS_SELECTOR, ".lag").text)
                              for r in b.find_elements(By.CSS_SELECTOR, "#group-lag tr[data-queue]")}, what="lag")
    assert shown == {f"{q['topic']}//{q['queue']}": q["lag"] for q in cli["queues"]}
    assert wait_for(lambda: int(b.find_element(By.ID, "total-lag").text), what="total") == cli["total_lag"]


def test_a_consumer_groups_page_lists_its_members_and_the_queues_each_holds(page, console, client):
    from txmq.broker.client import PullConsumer

    client.create_topic("console-members", 4)
    a = PullConsumer(client, ["console-members"], group="console-pair", allocation="average", member_id="pair-a",
                     heartbeat_ttl_ms=3000)
    b_ = PullConsumer(client, ["console-members"], group="console-pair", allocation="average", member_id="pair-b",
                      heartbeat_ttl_ms=3000)
    for _ in range(50):  # each heartbeats until both see both
        a.poll(timeout_ms=0)
        b_.poll(timeout_ms=0)
        if a.members == b_.members == ["pair-a", "pair-b"]:
            break
        time.sleep(0.1)
    try:
        b = page(console.url + "/groups/console-pair")
        rows = wait_for(lambda: {r.get_attribute("data-member"): r.find_element(By.CSS_SELECTOR, ".holds").text
                                 for r in b.find_elements(By.CSS_SELECTOR, "#group-members tr[data-member]")},
                        what="the members")
        assert rows == {"pair-a": "console-members 0, console-members 1",
                        "pair-b": "console-members 2, console-members 3"}
        assert "PullConsumer" in b.find_element(By.CSS_SELECTOR, "tr[data-member='pair-a']").text
    finally:
        a.close()
        b_.close()


def test_an_admin_resets_a_consumer_groups_offsets_to_the_end(page, console, client):
    client.create_topic("console-reset", 1)
    client.send([Message("console-reset", b"r") for _ in range(5)])
    client.commit_offsets("console-resetters", {"console-reset": {0: 0}})
    b = page(console.url + "/groups/console-resetters")
    b.find_element(By.CSS_SELECTOR, "#reset-form select[name=topic] option[value='console-reset']").click()
    b.find_element(By.ID, "reset").click()
    wait_for(lambda: b.find_elements(By.ID, "done"), what="the reset's confirmation")
    assert client.group_lag("console-resetters", ["console-reset"])["console-reset"][0].lag == 0


def test_a_message_is_found_by_id_with_its_path_and_body(page, console, client):
    sent = client.send([Message("console-find", b'{"order": 7}', keys=["order-7"])])
    b = page(console.url + f"/messages?id={sent.message_ids[0]}")
    section = b.find_element(By.CSS_SELECTOR, f"section[data-message='{sent.message_ids[0]}']")
    assert "stored in console-find queue" in section.find_element(By.CSS_SELECTOR, "ol.path").text
    assert '"order": 7' in section.find_element(By.CSS_SELECTOR, "pre.body").text
    by_key = page(console.url + "/messages?topic=console-find&key=order-7")
    assert by_key.find_elements(By.CSS_SELECTOR, f"section[data-message='{sent.message_ids[0]}']")


def test_the_timers_page_draws_scheduled_messages_by_due_time_and_recalls_one(page, console, client):
    now_ms = int(time.time() * 1000)
    client.create_topic("console-timed", 1)
    kept, recalled = client.send([Message("console-timed", b"later", deliver_at_ms=now_ms + 3_600_000),
                                  Message("console-timed", b"sooner", deliver_at_ms=now_ms + 1_800_000)]).message_ids
    b = page(console.url + "/timers")
    row = f"#scheduled-messages tr[data-message='{recalled}']"
    wait_for(lambda: b.find_elements(By.CSS_SELECTOR, row), what="the scheduled message's row")
    listed = [r.get_attribute("data-message") for r in b.find_elements(By.CSS_SELECTOR, "#scheduled-messages tr[data-message]")]
    assert listed.index(recalled) < listed.index(kept)  # soonest first
    bars = wait_for(lambda: b.execute_script(
        "var p = document.getElementById('timer-chart')._plot; return p && p.data[1].reduce(function (a, v) { return a + v; }, 0);"),
        what="the histogram")
    assert bars == int(b.find_element(By.ID, "scheduled-total").text) >= 2
    b.find_element(By.CSS_SELECTOR, f"{row} form.recall button").click()
    assert recalled in wait_for(lambda: b.find_element(By.ID, "done").text, what="the recall's confirmation")
    wait_for(lambda: not b.find_elements(By.CSS_SELECTOR, row), what="the recalled message to leave the list")
    assert b.find_elements(By.CSS_SELECTOR, f"#scheduled-messages tr[data-message='{kept}']")
    assert client.list_scheduled(limit=1000).pending == int(b.find_element(By.ID, "scheduled-total").text)


def test_messages_are_found_by_the_time_they_were_stored(page, console, client):
    client.create_topic("console-when", 2)
    (before,) = client.send([Message("console-when", b"before")]).message_ids
    time.sleep(0.05)
    since_ms = int(time.time() * 1000)
    time.sleep(0.05)
    after = client.send([Message("console-when", f"after-{i}".encode()) for i in range(3)]).message_ids
    b = page(console.url + f"/messages?topic=console-when&from={since_ms}")
    shown = [s.get_attribute("data-message") for s in b.find_elements(By.CSS_SELECTOR, "section[data-message]")]
    assert sorted(shown) == sorted(after) and before not in shown
    until = page(console.url + f"/messages?topic=console-when&from={since_ms - 60_000}&to={since_ms}")
    assert [s.get_attribute("data-message") for s in until.find_elements(By.CSS_SELECTOR, "section[data-message]")] == [before]


def test_an_admin_resets_a_consumer_groups_offsets_to_a_time(page, console, client):
    client.create_topic("console-rewind", 1)
    client.send([Message("console-rewind", b"old") for _ in range(3)])
    at = int(time.time()) + 1  # the form takes whole seconds
    time.sleep(at - time.time() + 0.05)
    client.send([Message("console-rewind", b"new") for _ in range(2)])
    client.commit_offsets("console-rewinders", {"console-rewind": {0: 5}})
    b = page(console.url + "/groups/console-rewinders")
    b.find_element(By.CSS_SELECTOR, "#reset-form select[name=topic] option[value='console-rewind']").click()
    b.find_element(By.CSS_SELECTOR, "#reset-form select[name=to] option[value='time']").click()
    b.execute_script("document.getElementById('reset-at').value = arguments[0];",
                     time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(at)))
    b.find_element(By.ID, "reset").click()
    wait_for(lambda: b.find_elements(By.ID, "done"), what="the reset's confirmation")
    assert client.group_lag("console-rewinders", ["console-rewind"])["console-rewind"][0].committed == 3
