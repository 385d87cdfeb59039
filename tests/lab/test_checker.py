"""The checker on synthetic histories: a clean one passes, and each anomaly is found and named."""

from __future__ import annotations

import random
from collections import defaultdict

from hypothesis import given, settings
from hypothesis import strategies as st

from lab import checker


def _clean_history(seed: int, producers: int = 3, ops_each: int = 30) -> list[dict]:
    """Producers send plain messages and transactions with every outcome; a log holds what committed
    (and, all or nothing, some indeterminate writes); consumers poll it in order, and a drain reads it all."""
    rng = random.Random(seed)
    ops: list[dict] = []
    log: dict[str, list[str]] = defaultdict(list)
    t = 0.0
    for p in range(producers):
        proc = f"p{p}"
        for i in range(ops_each):
            t += 1
            queue = f"T/{rng.randrange(2)}"
            if rng.random() < 0.6:
                value, kind = f"{proc}-{i}", rng.choice(["ok", "ok", "ok", "fail", "info"])
                lands = kind == "ok" or (kind == "info" and rng.random() < 0.5)
                if lands:
                    log[queue].append(value)
                ops.append({"f": "send", "type": kind, "process": proc, "queue": queue, "value": value, "seq": i, "txn": None, "time": t})
            else:
                txn = f"{proc}-t{i}"
                values = [f"{proc}-{i}.{k}" for k in range(rng.randrange(1, 4))]
                for v in values:
                    ops.append({"f": "send", "type": "ok", "process": proc, "queue": queue, "value": v, "seq": i, "txn": txn, "time": t})
                end = rng.choice(["commit-ok", "commit-ok", "rollback-ok", "commit-info", "none"])
                lands = end == "commit-ok" or (end in ("commit-info", "none") and rng.random() < 0.5)
                if end != "none":
                    f, kind = end.split("-")
                    ops.append({"f": f, "type": kind, "process": proc, "txn": txn, "time": t})
                if lands:
                    log[queue].extend(values)
    for c in range(2):
        for queue, values in log.items():
            upto = rng.randrange(len(values) + 1)
            msgs = [[queue, off, v] for off, v in enumerate(values[:upto])]
            t += 1
            ops.append({"f": "poll", "type": "ok", "process": f"c{c}", "session": 0, "msgs": msgs, "time": t})
    drain = [[q, off, v] for q, values in log.items() for off, v in enumerate(values)]
    ops.append({"f": "drain", "type": "ok", "process": "drain", "msgs": drain, "time": t + 1})
    return ops


def _drain(ops):
    return next(op for op in ops if op["f"] == "drain")


def _committed_plain(ops):
    result = checker.check(ops)
    assert result.ok
    return [op for op in ops if op["f"] == "send" and op["type"] == "ok" and not op["txn"]]


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 10**6))
def test_a_clean_history_passes(seed):
    result = checker.check(_clean_history(seed))
    assert result.ok, result.summary()
    assert result.committed > 0


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6))
def test_a_committed_send_never_read_is_lost(seed):
    ops = _clean_history(seed)
    victim = _committed_plain(ops)[0]["value"]
    for op in ops:
        if op["f"] in ("poll", "drain"):
            op["msgs"] = [m for m in op["msgs"] if m[2] != victim]
    assert checker.check(ops).anomalies["lost"] == [victim]


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 10**6))
def test_a_value_read_at_two_offsets_is_a_duplicate(seed):
    ops = _clean_history(seed)
    victim = _committed_plain(ops)[0]
    drain = _drain(ops)
    end = max(o for q, o, _ in drain["msgs"] if q == victim["queue"]) + 1
    drain["msgs"].append([victim["queue"], end, victim["value"]])
    found = checker.check(ops).anomalies
    assert [d["value"] for d in found["duplicate"]] == [victim["value"]]


def test_a_failed_send_read_is_an_aborted_read():
    ops = _clean_history(1)
    failed = next(op for op in ops if op["f"] == "send" and op["type"] == "fail")
    _drain(ops)["msgs"].append([failed["queue"], 10**6, failed["value"]])
    assert [a["value"] for a in checker.check(ops).anomalies["aborted_read"]] == [failed["value"]]


def test_a_rolled_back_transaction_read_is_an_aborted_read():
    ops = [
        {"f": "send", "type": "ok", "process": "p", "queue": "T/0", "value": "a", "seq": 0, "txn": "t1", "time": 1},
        {"f": "rollback", "type": "ok", "process": "p", "txn": "t1", "time": 2},
        {"f": "drain", "type": "ok", "process": "d", "msgs": [["T/0", 0, "a"]], "time": 3},
    ]
    assert [a["value"] for a in checker.check(ops).anomalies["aborted_read"]] == ["a"]


def test_part_of_a_committed_transaction_read_is_torn():
    ops = [
        {"f": "send", "type": "ok", "process": "p", "queue": "T/0", "value": v, "seq": 0, "txn": "t1", "time": 1}
        for v in ("a", "b", "c")
    ] + [
        {"f": "commit", "type": "ok", "process": "p", "txn": "t1", "time": 2},
        {"f": "drain", "type": "ok", "process": "d", "msgs": [["T/0", 0, "a"], ["T/0", 1, "c"]], "time": 3},
    ]
    result = checker.check(ops)
    assert result.anomalies["torn"] == [{"txn": "t1", "read": 2, "of": 3}]


def test_part_of_an_indeterminate_transaction_read_is_torn_too():
    ops = [
        {"f": "send", "type": "ok", "process": "p", "queue": "T/0", "value": v, "seq": 0, "txn": "t1", "time": 1}
        for v in ("a", "b")
    ] + [
        {"f": "commit", "type": "info", "process": "p", "txn": "t1", "time": 2},
        {"f": "drain", "type": "ok", "process": "d", "msgs": [["T/0", 0, "a"]], "time": 3},
    ]
    assert len(checker.check(ops).anomalies["torn"]) == 1


def test_a_committed_transaction_read_not_at_all_is_lost():
    ops = [
        {"f": "send", "type": "ok", "process": "p", "queue": "T/0", "value": "a", "seq": 0, "txn": "t1", "time": 1},
        {"f": "commit", "type": "fail", "process": "p", "txn": "t1", "time": 2},  # a retry then succeeded
        {"f": "commit", "type": "ok", "process": "p", "txn": "t1", "time": 3},
        {"f": "drain", "type": "ok", "process": "d", "msgs": [], "time": 4},
    ]
    assert checker.check(ops).anomalies["lost"] == ["a"]


def test_a_value_nobody_wrote_is_unexpected():
    ops = _clean_history(2)
    _drain(ops)["msgs"].append(["T/0", 10**6, "ghost"])
    assert checker.check(ops).anomalies["unexpected"] == ["ghost"]


def test_a_producers_later_send_at_a_lower_offset_is_out_of_order():
    ops = [
        {"f": "send", "type": "ok", "process": "p", "queue": "T/0", "value": "a", "seq": 0, "txn": None, "time": 1},
        {"f": "send", "type": "ok", "process": "p", "queue": "T/0", "value": "b", "seq": 1, "txn": None, "time": 2},
        {"f": "drain", "type": "ok", "process": "d", "msgs": [["T/0", 0, "b"], ["T/0", 1, "a"]], "time": 3},
    ]
    assert len(checker.check(ops).anomalies["nonmonotonic_send"]) == 1


def test_a_consumer_going_back_within_a_session_is_a_nonmonotonic_poll():
    ops = [
        {"f": "send", "type": "ok", "process": "p", "queue": "T/0", "value": v, "seq": i, "txn": None, "time": 1}
        for i, v in enumerate("ab")
    ] + [
        {"f": "poll", "type": "ok", "process": "c", "session": 0, "msgs": [["T/0", 1, "b"]], "time": 2},
        {"f": "poll", "type": "ok", "process": "c", "session": 0, "msgs": [["T/0", 0, "a"]], "time": 3},
        {"f": "poll", "type": "ok", "process": "c", "session": 1, "msgs": [["T/0", 0, "a"]], "time": 4},  # a new session may
    ]
    assert len(checker.check(ops).anomalies["nonmonotonic_poll"]) == 1


def test_one_offset_with_two_values_is_inconsistent():
    ops = [
        {"f": "send", "type": "ok", "process": "p", "queue": "T/0", "value": "a", "seq": 0, "txn": None, "offset": 0, "time": 1},
        {"f": "send", "type": "ok", "process": "q", "queue": "T/0", "value": "b", "seq": 0, "txn": None, "time": 1},
        {"f": "poll", "type": "ok", "process": "c", "session": 0, "msgs": [["T/0", 0, "b"]], "time": 2},
        {"f": "drain", "type": "ok", "process": "d", "msgs": [["T/0", 0, "a"], ["T/0", 1, "b"]], "time": 3},
    ]
    found = checker.check(ops).anomalies["inconsistent_offset"]
    assert found == [{"queue": "T/0", "offset": 0, "values": ["a", "b"]}]


def test_indeterminate_writes_are_classified_by_whether_they_were_read():
    ops = [
        {"f": "send", "type": "info", "process": "p", "queue": "T/0", "value": v, "seq": i, "txn": None, "time": 1}
        for i, v in enumerate("abc")
    ] + [{"f": "drain", "type": "ok", "process": "d", "msgs": [["T/0", 0, "a"]], "time": 2}]
    result = checker.check(ops)
    assert result.ok and (result.indeterminate_read, result.indeterminate_unread) == (1, 2)


def test_histories_are_saved_as_json_lines_and_a_run_is_checked_from_its_directory(tmp_path):
    with checker.History(tmp_path / "p.jsonl", "p") as h:
        h.record("send", "ok", queue="T/0", value="a", seq=0, txn=None)
    with checker.History(tmp_path / "d.jsonl", "d") as h:
        h.record("drain", "ok", msgs=[["T/0", 0, "a"]])
    (tmp_path / "d.jsonl").open("a").write('{"f": "po')  # a client killed mid-line
    result = checker.check_run(tmp_path)
    assert result.ok and result.committed == 1
    assert (tmp_path / "checker.json").exists()
    assert result.verdict_line().endswith("VERDICT ok")


def test_a_check_back_about_another_producers_transaction_is_misrouted():
    ops = [
        {"f": "send", "type": "ok", "process": "p", "queue": None, "value": "a", "seq": 0, "txn": "t1", "time": 1},
        {"f": "commit", "type": "ok", "process": "p", "txn": "t1", "time": 2},
        {"f": "check", "type": "ok", "process": "p", "txn": "t1", "known": True, "time": 3},
        {"f": "check", "type": "ok", "process": "q", "txn": "t1", "known": False, "time": 3},
        {"f": "drain", "type": "ok", "process": "d", "msgs": [["T/0", 0, "a"]], "time": 4},
    ]
    assert checker.check(ops).anomalies["misrouted_check"] == [{"asked": "q", "txn": "t1", "owner": "p"}]


def test_a_duplicate_of_a_client_that_retries_on_its_own_is_counted_apart():
    ops = [
        {"f": "send", "type": "ok", "process": "o", "queue": None, "value": "a", "seq": 0, "txn": None,
         "retrying_client": True, "time": 1},
        {"f": "drain", "type": "ok", "process": "d", "msgs": [["T/0", 0, "a"], ["T/0", 1, "a"]], "time": 2},
    ]
    result = checker.check(ops)
    assert result.ok and result.duplicates_by_retry == 1


def test_an_official_clients_check_back_about_another_producers_message_is_misrouted():
    # the official client's TransactionChecker is given the message, not a transaction id
    ops = [
        {"f": "send", "type": "ok", "process": "native", "queue": None, "value": "a", "seq": 0, "txn": "t1", "time": 1},
        {"f": "check", "type": "ok", "process": "official", "txn": None, "value": "a", "known": False, "time": 2},
        {"f": "commit", "type": "ok", "process": "native", "txn": "t1", "time": 3},
        {"f": "drain", "type": "ok", "process": "d", "msgs": [["T/0", 0, "a"]], "time": 4},
    ]
    assert checker.check(ops).anomalies["misrouted_check"] == [{"asked": "official", "txn": "a", "owner": "native"}]


def test_a_native_producer_asked_about_an_official_clients_transaction_is_misrouted():
    # the native check names the broker's transaction id, which the official client's send recorded
    ops = [
        {"f": "send", "type": "ok", "process": "official-tx", "queue": None, "value": "o-1", "seq": 1,
         "txn": "official-tx-t1", "broker_txn": "7F00000100002A9F0000001B", "retrying_client": True, "time": 1},
        {"f": "commit", "type": "ok", "process": "official-tx", "txn": "official-tx-t1", "time": 2},
        {"f": "check", "type": "ok", "process": "w1", "txn": "7F00000100002A9F0000001B", "known": False, "time": 3},
        {"f": "drain", "type": "ok", "process": "d", "msgs": [["T/0", 0, "o-1"]], "time": 4},
    ]
    assert checker.check(ops).anomalies["misrouted_check"] == [
        {"asked": "w1", "txn": "7F00000100002A9F0000001B", "owner": "official-tx"}]


def test_a_check_back_for_another_producer_group_is_misrouted_even_when_its_transaction_is_unknown():
    # a half whose send's outcome never reached its client (no id recorded): the broker still names the group
    ops = [
        {"f": "check", "type": "ok", "process": "w1", "txn": "7F00000100002A9F0000002C", "known": False,
         "value": None, "group": "", "own_group": "lab-w1", "time": 1},
        {"f": "check", "type": "ok", "process": "w2", "txn": "7F00000100002A9F0000002D", "known": False,
         "value": None, "group": "lab-w2", "own_group": "lab-w2", "time": 1},
    ]
    assert checker.check(ops).anomalies["misrouted_check"] == [
        {"asked": "w1", "txn": "7F00000100002A9F0000002C", "group": "", "own_group": "lab-w1"}]


def _query_history(out: list[str], *, caught_up: bool = True, cut: int = 4) -> list[dict]:
    """p's plain sends a, b and transaction t1 (c, d) committed, transaction t2 (e) rolled back; the
    drain reads a, b, c, d at offsets 0-3; a query with cut `cut` copied `out` to the output topic."""
    ops = [{"f": "send", "type": "ok", "process": "p", "queue": "T/0", "value": v, "seq": i, "txn": None, "time": 1}
           for i, v in enumerate("ab")]
    ops += [{"f": "send", "type": "ok", "process": "p", "queue": None, "value": v, "seq": 2, "txn": "t1", "time": 2}
            for v in "cd"]
    ops += [{"f": "send", "type": "ok", "process": "p", "queue": None, "value": "e", "seq": 3, "txn": "t2", "time": 2},
            {"f": "commit", "type": "ok", "process": "p", "txn": "t1", "time": 3},
            {"f": "rollback", "type": "ok", "process": "p", "txn": "t2", "time": 3},
            {"f": "drain", "type": "ok", "process": "d", "msgs": [["T/0", i, v] for i, v in enumerate("abcd")], "time": 9},
            {"f": "query-progress", "type": "ok", "process": "query", "batch": 0, "rows": len(out), "time": 4},
            {"f": "query-stop", "type": "ok", "process": "query", "caught_up": caught_up, "restarts": 0,
             "cut": {"T/0": cut}, "time": 5},
            {"f": "query-read", "type": "ok", "process": "query", "msgs": [["O/0", i, v] for i, v in enumerate(out)],
             "time": 6}]
    return ops


def test_a_query_that_copied_every_committed_message_once_passes():
    result = checker.check(_query_history(list("abcd")))
    assert result.ok, result.summary()
    assert result.query == {"batches": 1, "rows": 4, "restarts": 0, "output": 4, "caught_up": True}
    assert "query: 0 lost" in result.verdict_line()


def test_a_committed_message_below_the_querys_cut_missing_from_its_output_is_lost_by_the_query():
    found = checker.check(_query_history(list("acd"))).anomalies
    assert found["query_lost"] == [{"value": "b", "copies": 0, "in_input": 1}]


def test_a_message_above_the_querys_cut_may_be_missing_from_its_output():
    assert checker.check(_query_history(list("abc"), cut=3)).anomalies["query_torn"] == [
        {"txn": "t1", "written": 1, "of": 2}]  # but never half a transaction
    assert checker.check(_query_history(list("ab"), cut=2)).ok


def test_a_message_the_query_wrote_twice_is_duplicated_by_the_query():
    found = checker.check(_query_history(list("abcdb"))).anomalies
    assert found["query_duplicate"] == [{"value": "b", "copies": 2, "in_input": 1}]


def test_a_rolled_back_message_in_the_querys_output_is_an_aborted_read():
    found = checker.check(_query_history(list("abcde"))).anomalies
    assert found["query_aborted_read"] == [{"value": "e", "txn": "t2"}]


def test_a_value_nobody_wrote_in_the_querys_output_is_unexpected():
    assert checker.check(_query_history(list("abcdz"))).anomalies["query_unexpected"] == ["z"]


def test_a_query_that_did_not_catch_up_with_its_cut_is_stalled_not_lossy():
    found = checker.check(_query_history(list("ab"), caught_up=False)).anomalies
    assert found["query_stalled"] == ["the query did not reach its input cut"] and not found["query_lost"]


def test_a_query_that_never_stopped_or_read_a_row_is_stalled():
    ops = [op for op in _query_history([]) if op["f"] not in ("query-stop", "query-read")]
    assert checker.check(ops).anomalies["query_stalled"] == ["no micro-batch read a row", "the query never stopped"]
