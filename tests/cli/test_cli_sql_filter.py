"""`txmq tail --sql`: a SQL92 filter applied by the broker; a bad one exits 2 naming the position."""

from __future__ import annotations

import json
import uuid

import pytest


@pytest.fixture
def topic(cli) -> str:
    name = f"cli_sql_{uuid.uuid4().hex[:8]}"
    assert cli.run("topic", "create", name, "--queues", "1").returncode == 0
    return name


def test_tail_with_sql_shows_only_matching_messages(cli, topic):
    for i in range(6):
        assert cli.run("send", topic, f"m{i}", "--prop", f"n={i}").returncode == 0
    out = cli.run("tail", topic, "--from", "earliest", "--sql", "n BETWEEN 2 AND 3", "--count", "2", "--json")
    assert out.returncode == 0, out.stderr
    assert [json.loads(line)["body"] for line in out.stdout.splitlines()] == ["m2", "m3"]


def test_tail_with_a_bad_sql_expression_exits_2_naming_the_position(cli, topic):
    out = cli.run("tail", topic, "--from", "earliest", "--sql", "n BETWEEN 3 AND 2", "--count", "1")
    assert out.returncode == 2
    assert "position 11" in out.stderr
