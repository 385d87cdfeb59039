"""Broker configuration parsing and request-signature verification."""

from __future__ import annotations

import json
import time

import pytest

from txmq.broker.errors import Forbidden, Unauthorized
from txmq.broker.server.auth import Authenticator, authorization_header, format_date_time
from txmq.broker.server.broker import build_arg_parser, config_from_args
from txmq.broker.server.config import BrokerConfig, parse_duration


@pytest.mark.parametrize("text,seconds", [("6s", 6), ("500ms", 0.5), ("2m", 120), ("1h", 3600), (15, 15)])
def test_durations_parse(text, seconds):
    assert parse_duration(text) == seconds


def test_bad_duration_is_refused_with_the_text():
    with pytest.raises(ValueError, match="6x"):
        parse_duration("6x")


def test_toml_file_and_flags_combine(tmp_path):
    f = tmp_path / "broker.toml"
    f.write_text('[broker]\nflush = "sync"\ntransaction-timeout = "2s"\nmax_checks = 3\n')
    args = build_arg_parser().parse_args(["--config", str(f), "--data-dir", str(tmp_path), "--max-checks", "5",
                                          "--no-auto-create-topics"])
    cfg = config_from_args(args)
    assert cfg.flush == "sync" and cfg.transaction_timeout_s == 2.0
    assert cfg.max_checks == 5 and cfg.auto_create_topics is False


def test_defaults_follow_rocketmq():
    cfg = BrokerConfig()
    assert (cfg.transaction_timeout_s, cfg.check_interval_s, cfg.max_checks) == (6.0, 30.0, 15)
    assert cfg.default_queue_count == 4 and cfg.max_body_bytes == 4 << 20


def test_unknown_setting_is_refused():
    with pytest.raises(ValueError, match="colour"):
        BrokerConfig.from_mapping({"colour": "blue"})


def test_the_flight_data_plane_listens_on_the_listen_host_and_a_free_port_by_default():
    assert BrokerConfig(listen="10.1.2.3:9000").flight_host_port == ("10.1.2.3", 0)


def test_the_flight_data_plane_address_comes_from_a_flag(tmp_path):
    args = build_arg_parser().parse_args(["--data-dir", str(tmp_path), "--flight-listen", "0.0.0.0:9443"])
    assert config_from_args(args).flight_host_port == ("0.0.0.0", 9443)


def test_a_flight_address_that_is_not_host_port_is_refused():
    with pytest.raises(ValueError, match="HOST:PORT"):
        BrokerConfig.from_mapping({"flight_listen": "nowhere"})


def test_the_page_cache_window_defaults_to_2_gib_and_comes_from_a_flag(tmp_path):
    assert BrokerConfig().page_cache_keep_bytes == 2 << 30
    args = build_arg_parser().parse_args(["--data-dir", str(tmp_path), "--page-cache-keep-bytes", "0"])
    assert config_from_args(args).page_cache_keep_bytes == 0


def test_a_negative_page_cache_window_is_refused():
    with pytest.raises(ValueError, match="page_cache_keep_bytes"):
        BrokerConfig.from_mapping({"page_cache_keep_bytes": -1})


@pytest.fixture
def auth(tmp_path):
    f = tmp_path / "auth.json"
    f.write_text(json.dumps({"accounts": [
        {"access_key": "ak1", "secret_key": "sk1", "producer_groups": ["pg1"], "publish": ["orders*"],
         "subscribe": ["orders"]}]}))
    return Authenticator.from_file(f)


def meta(ak, sk, when=None):
    date = format_date_time(when)
    return [("x-mq-date-time", date), ("authorization", authorization_header(ak, sk, date))]


def test_right_keys_give_the_accounts_identity(auth):
    ident = auth.authenticate(meta("ak1", "sk1"))
    assert ident.access_key == "ak1" and ident.producer_group == "pg1"
    ident.require_publish("orders-eu")
    with pytest.raises(Forbidden):
        ident.require_subscribe("payments")
    with pytest.raises(Forbidden):
        ident.require_producer_group("pg2")


@pytest.mark.parametrize("metadata,reason", [
    (lambda: meta("ak1", "wrong"), "signature"),
    (lambda: meta("nobody", "sk1"), "unknown access key"),
    (lambda: meta("", ""), "no access key"),
    (lambda: [], "no authorization"),
    (lambda: meta("ak1", "sk1", time.time() - 3600), "15 minutes"),
])
def test_bad_credentials_are_refused(auth, metadata, reason):
    with pytest.raises(Unauthorized, match=reason):
        auth.authenticate(metadata())


def test_auth_off_accepts_the_empty_credential():
    ident = Authenticator.disabled().authenticate(meta("", ""))
    assert not ident.authenticated and ident.may_publish("anything")


def test_answering_same_host_reads_is_on_by_default_and_off_with_a_flag(tmp_path):
    assert BrokerConfig().local_reads is True
    args = build_arg_parser().parse_args(["--data-dir", str(tmp_path), "--no-local-reads"])
    assert config_from_args(args).local_reads is False


def test_a_local_reads_setting_that_is_not_a_boolean_is_refused():
    with pytest.raises(ValueError, match="local_reads"):
        BrokerConfig.from_mapping({"local_reads": "yes"})
