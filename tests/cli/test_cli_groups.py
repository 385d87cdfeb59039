"""`txmq group create/update/describe/list/delete`: consumer group settings (FIFO, retries) as a user
manages them, against a broker process; the settings survive a kill -9."""

from __future__ import annotations

import uuid

from tests.cli.conftest import Cli
from tests.support.broker_process import BrokerProcess


def group_name() -> str:
    return f"cg-{uuid.uuid4().hex[:8]}"


def test_group_create_fifo_then_describe_shows_it(cli):
    name = group_name()
    created = cli.json("group", "create", name, "--fifo", "--retry-max-times", "3")
    assert created == {"name": name, "fifo": True, "retry_max_times": 3, "max_delivery_attempts": 4}
    assert cli.json("group", "describe", name) == created
    assert "FIFO" in cli.run("group", "create", name, "--fifo").stdout


def test_a_new_group_takes_the_broker_defaults_for_what_is_not_given(cli):
    created = cli.json("group", "create", group_name())
    assert (created["fifo"], created["retry_max_times"], created["max_delivery_attempts"]) == (False, 16, 17)


def test_group_update_changes_only_what_is_given(cli):
    name = group_name()
    cli.json("group", "create", name, "--fifo", "--retry-max-times", "5")
    updated = cli.json("group", "update", name, "--no-fifo")
    assert (updated["fifo"], updated["retry_max_times"]) == (False, 5)


def test_group_update_of_an_unknown_group_exits_2_naming_it(cli):
    name = group_name()
    result = cli.run("group", "update", name, "--fifo")
    assert result.returncode == 2 and name in result.stderr


def test_group_list_shows_the_groups_in_a_table(cli):
    name = group_name()
    cli.json("group", "create", name, "--fifo")
    table = cli.run("group", "list").stdout
    assert "MAX_DELIVERY_ATTEMPTS" in table and name in table
    assert any(g["name"] == name and g["fifo"] for g in cli.json("group", "list"))


def test_group_delete_removes_the_settings(cli):
    name = group_name()
    cli.json("group", "create", name, "--fifo")
    assert cli.run("group", "delete", name).returncode == 0
    assert cli.run("group", "describe", name).returncode == 2


def test_a_negative_retry_count_exits_2(cli):
    assert cli.run("group", "create", group_name(), "--retry-max-times", "-1").returncode == 2


def test_a_bad_group_name_exits_2(cli):
    result = cli.run("group", "create", "bad name!", "--fifo")
    assert result.returncode == 2 and "consumer group" in result.stderr


def test_group_settings_survive_a_broker_kill(tmp_path):
    data = tmp_path / "data"
    with BrokerProcess(data, flush="async") as proc:
        Cli(proc.endpoint).json("group", "create", "durable", "--fifo", "--retry-max-times", "2")
        proc.kill()
    with BrokerProcess(data, flush="async") as proc:
        assert Cli(proc.endpoint).json("group", "describe", "durable")["fifo"] is True
