"""Broker config files: the samples in docs/deploy are accepted, and a file the broker does not
understand stops it with one line that names what it did not understand."""

from __future__ import annotations

import configparser
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from txmq.broker.server.broker import build_arg_parser, config_from_args, run_broker
from txmq.broker.server.config import BrokerConfig

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "docs" / "deploy"
SAMPLES = sorted(DEPLOY.glob("*.toml"))
UNIT = DEPLOY / "txmq-broker@.service"
TXMQ = str(Path(sys.executable).parent / "txmq")


def _load(path: Path, *flags: str) -> BrokerConfig:
    return config_from_args(build_arg_parser().parse_args(["--config", str(path), *flags]))


def test_there_are_samples_for_a_single_broker_and_a_group_replica():
    configs = {p.stem: _load(p) for p in SAMPLES}
    assert configs["broker"].etcd is None
    assert configs["replica"].etcd and configs["replica"].group == "g1"


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_a_sample_config_is_accepted_as_written(sample):
    config = _load(sample)
    assert str(config.data_dir).startswith("/var/lib/txmq/")  # the unit's StateDirectory
    assert config.listen_host_port[0] == "0.0.0.0"


def test_the_sample_unit_starts_the_broker_with_flags_it_accepts():
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.optionxform = str  # systemd keys are case-sensitive
    unit.read(UNIT)
    argv = shlex.split(unit["Service"]["ExecStart"])
    assert Path(argv[0]).name == "txmq" and argv[1:3] == ["broker", "start"]
    for sample in SAMPLES:  # instance name = config file name
        args = build_arg_parser().parse_args([a.replace("%i", sample.stem) for a in argv[3:]])
        assert args.config == Path(f"/etc/txmq/{sample.name}")
    assert unit["Service"]["RestartPreventExitStatus"] == "2"  # a refused config: no restart loop


def test_every_broker_flag_can_be_written_in_the_config_file():
    known = {f for f in BrokerConfig.__dataclass_fields__}
    for action in build_arg_parser()._actions:
        if action.dest in ("help", "config", "log_level"):
            continue
        assert action.dest in known or action.dest + "_s" in known, f"--{action.dest} has no config key"


def _refusal(tmp_path: Path, toml: str) -> str:
    """The one-line reason `txmq broker start --config` gives for this file (run_broker prints it)."""
    path = tmp_path / "broker.toml"
    path.write_text(toml)
    with pytest.raises(ValueError) as refused:
        _load(path)
    assert "\n" not in str(refused.value)
    return str(refused.value)


def test_a_config_with_an_unknown_key_stops_txmq_broker_start_with_one_line_naming_it(tmp_path):
    path = tmp_path / "broker.toml"
    path.write_text('[broker]\nlisten = "127.0.0.1:0"\nflush_intervall_ms = 100\n')
    done = subprocess.run([TXMQ, "broker", "start", "--config", str(path), "--data-dir", str(tmp_path / "data")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "txmq broker: bad configuration: unknown broker setting: 'flush_intervall_ms'"]
    assert not (tmp_path / "data").exists()


def test_a_table_beside_broker_is_refused_by_name(tmp_path):
    assert "'brokr'" in _refusal(tmp_path, '[broker]\nflush = "sync"\n\n[brokr]\nmax-checks = 3\n')


def test_a_setting_of_the_wrong_type_is_refused_by_name(tmp_path):
    assert _refusal(tmp_path, '[broker]\nmax-checks = "many"\n') == (
        "broker setting 'max-checks' must be an integer, got 'many'")


def test_a_config_that_is_not_toml_is_refused_in_one_line(tmp_path):
    assert _refusal(tmp_path, '[broker\nflush = "sync"\n')


def test_a_missing_config_file_is_refused_in_one_line(tmp_path, capsys):
    code = run_broker(["--config", str(tmp_path / "nowhere.toml"), "--data-dir", str(tmp_path / "data")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "nowhere.toml" in err[0]


def test_a_duration_is_written_as_its_flag_is_named(tmp_path):
    path = tmp_path / "replica.toml"
    path.write_text('[broker]\netcd = "127.0.0.1:2379"\ngroup = "g"\nlease-ttl = "3s"\nreplica-lag-max = "500ms"\n')
    config = _load(path)
    assert (config.lease_ttl_s, config.replica_lag_max_s) == (3.0, 0.5)
