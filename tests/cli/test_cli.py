"""`txmq` subcommands: tables for people, --json for scripts, exit code 2 with a clear message on bad input."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from tests.cli.conftest import TXMQ


@pytest.fixture
def topic(cli) -> str:
    name = f"cli_{uuid.uuid4().hex[:8]}"
    assert cli.run("topic", "create", name, "--queues", "2").returncode == 0
    return name


def test_topic_create_then_list_shows_it_in_a_table(cli, topic):
    out = cli.run("topic", "list")
    assert out.returncode == 0
    assert out.stdout.splitlines()[0].split()[:3] == ["TOPIC", "QUEUES", "PERM"]
    assert any(line.split()[:2] == [topic, "2"] for line in out.stdout.splitlines())


def test_topic_create_with_a_type_lists_the_type(cli):
    name = f"cli_{uuid.uuid4().hex[:8]}"
    assert cli.run("topic", "create", name, "--type", "fifo").returncode == 0
    assert {t["name"]: t["message_type"] for t in cli.json("topic", "list")}[name] == "FIFO"
    row = next(line.split() for line in cli.run("topic", "list").stdout.splitlines() if line.startswith(name))
    assert row[3] == "FIFO"


def test_a_topic_created_without_a_type_is_mixed(cli, topic):
    assert cli.json("topic", "describe", topic)["message_type"] == "MIXED"


def test_an_unknown_topic_type_is_a_usage_error(cli):
    out = cli.run("topic", "create", f"cli_{uuid.uuid4().hex[:8]}", "--type", "PRIORITY")
    assert out.returncode == 2 and "PRIORITY" in out.stderr


def test_topic_describe_json(cli, topic):
    data = cli.json("topic", "describe", topic)
    assert data["name"] == topic and data["queue_count"] == 2
    assert [(q["queue_id"], q["group"]) for q in data["queues"]] == [(0, ""), (1, "")]


def test_topic_delete(cli, topic):
    assert cli.run("topic", "delete", topic).returncode == 0
    assert topic not in [t["name"] for t in cli.json("topic", "list")]


def test_send_then_tail_from_earliest(cli, topic):
    sent = cli.json("send", topic, "hello", "--tag", "greet", "--key", "k1", "--prop", "lang=en")
    assert sent["count"] == 1
    out = cli.run("tail", topic, "--from", "earliest", "--count", "1", "--json")
    row = json.loads(out.stdout.splitlines()[0])
    assert (row["body"], row["tag"], row["keys"], row["properties"]) == ("hello", "greet", ["k1"], {"lang": "en"})
    assert row["id"] == sent["message_ids"][0]


def test_send_stdin_lines_in_a_transaction(cli, topic):
    data = cli.json("send", topic, "--stdin", "--transaction", stdin="a\nb\nc\n")
    assert data["state"] == "COMMITTED" and data["count"] == 3
    out = cli.run("tail", topic, "--from", "earliest", "--count", "3")
    assert sorted(line.rsplit(" ", 1)[1] for line in out.stdout.splitlines()) == ["a", "b", "c"]
    assert all(f"tx={data['transaction_id']}" in line for line in out.stdout.splitlines())


def test_tail_follows_new_messages(cli, topic):
    proc = subprocess.Popen([TXMQ, "tail", topic, "--count", "1", "--json", "--broker", cli.endpoint],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        import time

        time.sleep(1.5)  # tail starts at "latest": the message must come after it started
        assert cli.run("send", topic, "fresh").returncode == 0
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert json.loads(out.splitlines()[0])["body"] == "fresh", err


def test_msg_get_and_query(cli, topic):
    sent = cli.json("send", topic, "findme", "--key", "order-9")
    got = cli.json("msg", "get", sent["message_ids"][0])
    assert got["body"] == "findme" and got["topic"] == topic
    found = cli.json("msg", "query", "--topic", topic, "--key", "order-9")
    assert [m["body"] for m in found] == ["findme"]


def test_tx_list_commit_and_rollback(cli, cli_broker, topic):
    from txmq.broker.client import Message, NativeClient

    with NativeClient(cli_broker.endpoint) as client:
        a = client.prepare("", [Message(topic=topic, body=b"a")], producer_group="g", sender="s").transaction_id
        b = client.prepare("", [Message(topic=topic, body=b"b")], producer_group="g", sender="s").transaction_id
    listed = cli.json("tx", "list", "--topic", topic)
    assert sorted(t["transaction_id"] for t in listed) == sorted([a, b])
    table = cli.run("tx", "list", "--topic", topic)
    assert "TRANSACTION_ID" in table.stdout and a in table.stdout
    assert cli.json("tx", "commit", a)["state"] == "COMMITTED"
    assert cli.json("tx", "rollback", b)["state"] == "ROLLED_BACK"
    assert cli.json("tx", "list", "--topic", topic) == []
    out = cli.run("tail", topic, "--from", "earliest", "--count", "1")
    assert out.stdout.strip().endswith(" a")


def test_group_lag_reports_committed_offsets(cli, cli_broker, topic):
    from txmq.broker.client import NativeClient

    cli.run("send", topic, "--stdin", stdin="1\n2\n3\n")
    with NativeClient(cli_broker.endpoint) as client:
        client.commit_offsets("cli-group", {topic: {0: 0, 1: 0}})
    data = cli.json("group", "lag", "cli-group", "--topic", topic)
    assert data["total_lag"] == 3
    assert "total lag: 3" in cli.run("group", "lag", "cli-group", "--topic", topic).stdout


def test_stats_json_has_store_and_transaction_figures(cli):
    data = cli.json("stats")
    assert {"store", "transactions", "rpc"} <= set(data)
    assert "FIGURE" in cli.run("stats").stdout


def test_unknown_topic_exits_2_naming_it(cli):
    out = cli.run("topic", "describe", "no_such_topic_xyz")
    assert out.returncode == 2
    assert "TopicNotFound" in out.stderr and "no_such_topic_xyz" in out.stderr


def test_unknown_transaction_exits_2(cli):
    out = cli.run("tx", "commit", "no-such-tx")
    assert out.returncode == 2 and "no-such-tx" in out.stderr


def test_bad_property_syntax_exits_2(cli, topic):
    out = cli.run("send", topic, "x", "--prop", "novalue")
    assert out.returncode == 2 and "KEY=VALUE" in out.stderr


def test_send_without_body_exits_2(cli, topic):
    out = cli.run("send", topic)
    assert out.returncode == 2 and "nothing to send" in out.stderr


def test_unknown_subcommand_exits_2(cli):
    assert cli.run("frobnicate", broker=False).returncode == 2


def test_broker_address_from_environment(cli, topic):
    out = cli.run("topic", "describe", topic, broker=False, env={"TXMQ_BROKER": cli.endpoint})
    assert out.returncode == 0 and topic in out.stdout


def test_unreachable_broker_exits_3_quickly(cli):
    out = cli.run("topic", "list", broker=False, env={"TXMQ_BROKER": "127.0.0.1:1"}, timeout=30)
    assert out.returncode == 3 and "127.0.0.1:1" in out.stderr


def test_broker_start_help_is_the_broker_parser(cli):
    out = cli.run("broker", "start", "--help", broker=False)
    assert out.returncode == 0 and "--data-dir" in out.stdout


def test_broker_start_serves_until_sigterm(tmp_path):
    import re
    import signal

    proc = subprocess.Popen([TXMQ, "broker", "start", "--data-dir", str(tmp_path / "d"), "--listen", "127.0.0.1:0",
                             "--flush", "async"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        m = re.search(r"txmq broker ready on (\S+:\d+)", line)
        assert m, line
        listed = subprocess.run([TXMQ, "topic", "list", "--json", "--broker", m.group(1)], capture_output=True,
                                text=True, timeout=60)
        assert listed.returncode == 0 and json.loads(listed.stdout) == []
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    finally:
        proc.kill()
