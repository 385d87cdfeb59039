"""bench/vs_peers.py and bench/peers_jvm.py: the peers' configs and the result arithmetic (no peer started)."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import time
from pathlib import Path

from bench import peers_jvm, run_all, vs_peers


def test_kafka_cluster_id_is_22_chars_of_url_safe_base64_of_16_bytes():
    cid = peers_jvm.kafka_cluster_id(bytes(range(16)))
    assert len(cid) == 22 and "=" not in cid
    assert base64.urlsafe_b64decode(cid + "==") == bytes(range(16))


def test_kafka_broker_and_controller_configs_point_at_one_quorum_and_state_the_flush_defaults(tmp_path):
    ctl = peers_jvm.kafka_controller_config(1, 9093, tmp_path / "c")
    brk = peers_jvm.kafka_broker_config(2, 9092, 1, 9093, tmp_path / "b")
    assert ctl["process.roles"] == "controller" and brk["process.roles"] == "broker"
    assert ctl["controller.quorum.voters"] == brk["controller.quorum.voters"] == "1@127.0.0.1:9093"
    assert brk["advertised.listeners"] == "PLAINTEXT://127.0.0.1:9092"
    assert brk["log.flush.interval.messages"] == str(2**63 - 1)  # Kafka's default: no fsync per write
    assert brk["transaction.state.log.replication.factor"] == "1"


def test_properties_text_writes_one_line_per_key_and_refuses_newlines():
    assert peers_jvm.properties_text({"a": "1", "b.c": "x y"}) == "a=1\nb.c=x y\n"
    try:
        peers_jvm.properties_text({"a": "1\nb=2"})
    except ValueError:
        pass
    else:
        raise AssertionError("a newline would inject a property")


def test_rocketmq_configs_keep_the_default_async_flush_and_name_the_name_server(tmp_path):
    broker = peers_jvm.rocketmq_broker_config(port=10911, namesrv="127.0.0.1:9876", store=tmp_path)
    assert broker["flushDiskType"] == "ASYNC_FLUSH" and broker["namesrvAddr"] == "127.0.0.1:9876"
    assert broker["storePathCommitLog"] == str(tmp_path / "commitlog")
    proxy = peers_jvm.rocketmq_proxy_config(grpc_port=8081, remoting_port=8080, namesrv="127.0.0.1:9876")
    assert proxy["grpcServerPort"] == 8081 and proxy["namesrvAddr"] == "127.0.0.1:9876"


def test_pom_versions_reads_the_pinned_peer_versions():
    versions = peers_jvm.pom_versions()
    assert versions["kafka"].startswith("4.") and versions["rocketmq"].startswith("5.")


def test_ratio_is_above_one_when_txmq_is_ahead_for_throughput_and_latency():
    assert vs_peers.ratio(200, 100) == 2.0
    assert vs_peers.ratio(2.0, 8.0, lower_is_better=True) == 4.0
    assert vs_peers.ratio(None, 1.0) is None and vs_peers.ratio(1.0, 0) is None


def test_parse_result_line_takes_the_last_result_and_reports_a_missing_one():
    assert vs_peers.parse_result_line('noise\nRESULT {"a": 1}\nRESULT {"a": 2}\n') == {"a": 2}
    assert "error" in vs_peers.parse_result_line("Traceback ...\n")
    assert "error" in vs_peers.parse_result_line("RESULT {not json\n")


def test_percentiles_ms():
    fig = vs_peers.percentiles_ms([0.001 * i for i in range(1, 101)])
    assert fig["count"] == 100 and fig["p50_ms"] == 50.5 and fig["p99_ms"] == 100.0
    assert vs_peers.percentiles_ms([]) == {"count": 0}


def test_compute_ratios_and_goals_from_a_result():
    result = {"spark": {"read_rows_per_s": {"txmq": 300, "kafka": 200}, "write_rows_per_s": {"txmq": 50, "kafka": 100}},
              "tx100": {"txmq": {"per_s": 400}, "kafka": {"per_s": 100}},
              "e2e": {"txmq": {"p50_ms": 2.0, "p99_ms": 4.0}, "kafka": {"p50_ms": 4.0, "p99_ms": 4.0}},
              "rocketmq": {"tx1_p1": {"txmq": {"per_s": 300, "p99_ms": 2}, "rocketmq": {"per_s": 200, "p99_ms": 4}},
                           "send_p1": {"txmq": {"per_s": 100}, "rocketmq": {"error": "x"}}}}
    r = vs_peers.compute_ratios(result)
    assert r["spark_read_vs_kafka"] == 1.5 and r["spark_write_vs_kafka"] == 0.5 and r["tx100_vs_kafka"] == 4.0
    assert r["rmq_tx1_p1_vs_rocketmq"] == 1.5 and r["rmq_tx1_p1_p99_vs_rocketmq"] == 2.0
    assert r["e2e_p50_vs_kafka"] == 2.0 and "rmq_send_p1_vs_rocketmq" not in r
    g = vs_peers.goals({"ratios": r})
    assert not g["spark_read_vs_kafka"]["met"] and not g["spark_write_vs_kafka"]["met"]  # 1.5 < 2.0, 0.5 < 1.2
    assert g["tx100_vs_kafka"]["met"] and g["rmq_tx1_p1_vs_rocketmq"]["met"] and g["e2e_p50_vs_kafka"]["met"]
    assert g["rmq_send_p1_vs_rocketmq"]["measured"] is None and g["rmq_tx1_p8_vs_rocketmq"]["measured"] is None


def test_the_runner_knows_vs_peers_and_skips_its_helper_modules():
    names = [b.name for b in run_all.all_benchmarks()]
    assert "vs_peers" in names and "peers_jvm" not in names and "vs_peers_rmq_client" not in names


def test_the_pom_lists_both_profiles():
    pom = Path(peers_jvm.POM).read_text()
    assert "<id>kafka</id>" in pom and "<id>rocketmq</id>" in pom and "kafka_2.13" in pom


def test_a_random_kafka_cluster_id_never_starts_with_a_dash():
    assert not any(peers_jvm.kafka_cluster_id().startswith("-") for _ in range(500))


def test_a_peer_whose_start_fails_leaves_no_temporary_dir():
    class Broken(peers_jvm._JvmInstance):
        name = "broken"

        def start(self) -> None:
            (self.dir / "half-written.properties").write_text("x=1\n")
            raise peers_jvm.PeerUnavailable("no")

    broken = Broken()
    try:
        with broken:
            raise AssertionError("start() should have failed")
    except peers_jvm.PeerUnavailable:
        pass
    assert not broken.dir.exists()


def test_kafka_brokers_of_a_three_replica_cluster_replicate_every_topic_and_need_two_in_sync(tmp_path):
    brk = peers_jvm.kafka_broker_config(3, 9094, 1, 9093, tmp_path / "b", replicas=3, min_insync=2)
    assert brk["default.replication.factor"] == brk["transaction.state.log.replication.factor"] == "3"
    assert brk["min.insync.replicas"] == brk["transaction.state.log.min.isr"] == "2"
    assert brk["log.flush.interval.messages"] == str(2**63 - 1)  # replicated, still no fsync per write


def test_replication_cost_spread_is_the_median_with_its_range():
    from bench import replication_cost

    assert replication_cost.spread([0.5, 0.7, 0.6]) == {"median": 0.6, "min": 0.5, "max": 0.7,
                                                        "runs": [0.5, 0.7, 0.6]}


def test_the_reports_goal_table_ends_with_the_price_of_replication_against_kafkas():
    from bench import report

    runs = [{"ratios": {"txmq_group_vs_single": {"median": 0.56}, "kafka_rf3_vs_rf1": {"median": 0.117},
                        "txmq_over_kafka": 4.786}}]
    summary = {"benchmarks": {"vs_peers": {"status": "ok", "runs": [{"goals": vs_peers.goals({"ratios": {}})}]},
                              "replication_cost": {"status": "ok", "runs": runs}}}
    table = report.peers_section(report.Results(summary))
    row = next(line for line in table if "replication_txmq_over_kafka" in line)
    assert "4.786" in row and "0.56" in row and "0.117" in row and row.endswith("| ≥ 1.0 | yes |")
    missing = report.peers_section(report.Results({"benchmarks": summary["benchmarks"] | {"replication_cost": {}}}))
    assert any("replication_txmq_over_kafka" in line and "**no**" in line for line in missing)


def test_the_report_lists_each_official_client_load_with_both_sides_cpu_per_call():
    from bench import report

    side = {"per_s": 219.3, "client_cpu_ms_per_call": 1.667, "broker_cpu_ms_per_call": 2.926}
    rocketmq = {"tx1_p1": {"txmq": side, "rocketmq": {**side, "per_s": 245.3, "broker_cpu_ms_per_call": 4.613}},
                "send_p1": {"txmq": side, "rocketmq": {"error": "no route"}},  # a side that failed: no row
                "e2e_official_client_txmq": {"p50_ms": 5.9}}
    rows = [line for line in report.official_client_cpu(rocketmq) if line.startswith("| `")]
    assert rows == ["| `tx1_p1` | 219.3 / 1.667 / 2.926 | 245.3 / 1.667 / 4.613 |"]
    assert report.official_client_cpu({}) == []


def test_a_process_trees_cpu_counts_the_children_below_it():
    """What the official client's loads charge a broker with: every process under the given pids."""
    from bench.load import process_cpu_s, tree_cpu_s

    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\ntime.sleep(30)"
    child = subprocess.Popen([sys.executable, "-c", burn])
    try:
        deadline = time.monotonic() + 20
        while process_cpu_s(child.pid) < 0.25 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert tree_cpu_s([os.getpid()]) - process_cpu_s(os.getpid()) >= 0.25
    finally:
        child.kill()
        child.wait()
    assert process_cpu_s(child.pid) == 0.0  # gone: nothing to read


def test_each_timed_spark_run_starts_with_no_dirty_pages_left_by_the_side_before(monkeypatch):
    """Kafka never fsyncs: without a write-back between runs its pages would be written during txmq's run."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    import spark_sink

    events = []
    monkeypatch.setattr(spark_sink, "settle_page_cache", lambda: events.append("settle"))
    spark_sink.interleaved_best_rates({"a": lambda: events.append("a"), "b": lambda: events.append("b")}, 10, 2)
    assert events == ["settle", "a", "settle", "b"] * 2


def test_spark_write_rounds_give_a_median_ratio_without_the_warm_up_round():
    runs = {"txmq": [{"s": 20.0}, {"s": 5.0}, {"s": 10.0}, {"s": 8.0}],
            "kafka": [{"s": 18.0}, {"s": 7.5}, {"s": 11.0}, {"s": 8.0}]}
    assert vs_peers.round_ratios(runs) == {"median": 1.1, "min": 1.0, "max": 1.5, "rounds": 3}
    assert vs_peers.round_ratios({"txmq": [{"s": 5.0}], "kafka": [{"s": 6.0}]}) is None
    result = {"spark": {"write_rows_per_s": {"txmq": 2, "kafka": 1}, "write_runs": runs}}
    assert vs_peers.compute_ratios(result)["spark_write_rounds_median_vs_kafka"] == 1.1
