"""A checker over what clients saw, after the anomalies of Jepsen's Kafka workload.

A history is a list of completed operations, one JSON object per line in a run directory (one file per
client process). Values are unique per write attempt, so every anomaly can be named by value:

    {"f": "send",     "type": "ok"|"fail"|"info", "process": "p1", "queue": "T/0", "value": "p1-17",
     "seq": 17, "txn": null | "p1-t4", "offset": 12 | null, "time": 1.25}
    {"f": "commit" | "rollback", "type": "ok"|"fail"|"info", "process": "p1", "txn": "p1-t4", "time": ...}
    {"f": "poll",     "type": "ok", "process": "c1", "msgs": [["T/0", 12, "p1-17"], ...], "time": ...}
    {"f": "drain", ...same as poll...}   the final read of everything, after the faults healed

Outcome of a write: a plain send is committed when its send is ok; a transactional send is committed
when its transaction's commit is ok, aborted when the rollback is ok (or the send failed), and
indeterminate otherwise (a send or an end answered `info`: it may or may not have happened).

Anomalies (names as in Jepsen's kafka.clj where one exists):
- lost: a committed value that no read (the drain included) ever saw.
- duplicate: one value read at two or more (queue, offset) positions. A value sent by a client that
  retries on its own (marked `retrying_client`, the official clients) is counted apart, as issue 38's
  target allows "duplicates beyond client retries" only.
- aborted_read: a value read whose write failed or whose transaction was rolled back.
- torn: a committed transaction of which some values were read and others never were; or a
  rolled-back/failed transaction of which any value was read is an aborted read instead.
- unexpected: a value read that no client ever tried to write.
- nonmonotonic_send: two committed plain sends of one producer to one queue, the later one (by seq)
  at a lower offset than the earlier.
- nonmonotonic_poll: one consumer reading a queue at an offset not above the one it read before in
  the same session (a session restarts at "session" in the op).
- inconsistent_offset: one (queue, offset) with two different values (in reads or acknowledgements).
- misrouted_check: a producer asked by check-back about a transaction another producer (another
  producer group) began: a "check" op naming a value (the message asked about), a txn (the client's
  label, or the broker's transaction id a send recorded as `broker_txn`) of another process's sends,
  or a producer group (`group`, what the broker asked for) other than the asked one's (`own_group`).
Indeterminate writes are classified: read (they happened) or never read (they did not, or were lost).

A Spark query's ops, when there are any (lab.workloads `query`: a txmq -> txmq streaming query copying
bodies from the input topic to an output topic):

    {"f": "query-progress", "type": "ok", "batch": 7, "rows": 120, "time": ...}   a finished micro-batch
    {"f": "query-restart", "type": "info", "error": "...", "time": ...}           it died and was restarted
    {"f": "query-stop", "type": "ok", "caught_up": true, "cut": {"T/0": 812, ...}} the input cut it reached
    {"f": "query-read", "type": "ok", "msgs": [["O/0", 0, "p1-17"], ...]}          the whole output topic

are judged against the input's reads: every value read in the input below the query's cut is in the
output exactly once per input position (query_lost, query_duplicate); nothing in the output was
rolled back, failed or never written (query_aborted_read, query_unexpected); a transaction is in the
output whole or not at all (query_torn); and the query made progress and caught up with its cut
(query_stalled).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

OK, FAIL, INFO = "ok", "fail", "info"
ANOMALIES = (
    "lost",
    "duplicate",
    "aborted_read",
    "torn",
    "unexpected",
    "nonmonotonic_send",
    "nonmonotonic_poll",
    "inconsistent_offset",
    "misrouted_check",
    "query_lost",
    "query_duplicate",
    "query_aborted_read",
    "query_torn",
    "query_unexpected",
    "query_stalled",
)
QUERY_OPS = ("query-progress", "query-restart", "query-stop", "query-read")


class History:
    """An append-only JSON-lines history file, safe to append to from several threads."""

    def __init__(self, path: str | Path, process: str):
        self.path = Path(path)
        self.process = process
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", buffering=1)

    def record(self, f: str, type: str, **fields: Any) -> dict[str, Any]:
        assert type in (OK, FAIL, INFO), type
        op = {"f": f, "type": type, "process": self.process, "time": round(time.time(), 6), **fields}
        with self._lock:
            self._file.write(json.dumps(op, separators=(",", ":")) + "\n")
        return op

    def close(self) -> None:
        with self._lock:
            self._file.close()

    def __enter__(self) -> History:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load(run_dir: str | Path) -> list[dict[str, Any]]:
    """Every op of every history file (*.jsonl) under `run_dir`; a torn last line (a killed client) is skipped."""
    ops: list[dict[str, Any]] = []
    for path in sorted(Path(run_dir).rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                ops.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return ops


@dataclass
class Result:
    """What the checker found: anomalies by name (each a list of examples), and figures."""

    anomalies: dict[str, list[Any]] = field(default_factory=lambda: {name: [] for name in ANOMALIES})
    committed: int = 0
    aborted: int = 0
    indeterminate: int = 0
    indeterminate_read: int = 0
    indeterminate_unread: int = 0
    reads: int = 0
    duplicates_by_retry: int = 0
    query: dict[str, Any] | None = None  # the Spark query's figures, when the history has one

    @property
    def ok(self) -> bool:
        return not any(self.anomalies.values())

    def count(self, name: str) -> int:
        return len(self.anomalies[name])

    def verdict_line(self, label: str = "lab") -> str:
        parts = [
            f"{self.count('lost')} lost",
            f"{self.count('duplicate')} duplicated",
            f"{self.count('aborted_read')} aborted reads",
            f"{self.count('torn')} torn",
            f"{self.count('unexpected')} unexpected",
            f"{self.count('nonmonotonic_send') + self.count('nonmonotonic_poll')} out of order",
            f"{self.count('inconsistent_offset')} inconsistent offsets",
            f"{self.count('misrouted_check')} misrouted check-backs",
            f"{self.duplicates_by_retry} duplicated by client retries",
        ]
        figures = (
            f"({self.committed} committed, {self.aborted} aborted, {self.indeterminate} indeterminate: "
            f"{self.indeterminate_read} read, {self.indeterminate_unread} not)"
        )
        if self.query is not None:
            q = self.query
            figures += (
                f"; query: {self.count('query_lost')} lost, {self.count('query_duplicate')} duplicated, "
                f"{self.count('query_aborted_read')} aborted reads, {self.count('query_torn')} torn, "
                f"{self.count('query_unexpected')} unexpected, {'caught up' if q['caught_up'] else 'STALLED'} "
                f"({q['batches']} batches, {q['rows']} rows in, {q['output']} out, {q['restarts']} restarts)"
            )
        return f"{label}: {', '.join(parts)} {figures} VERDICT {'ok' if self.ok else 'FAIL'}"

    def summary(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "counts": {name: len(v) for name, v in self.anomalies.items()},
            "examples": {name: v[:10] for name, v in self.anomalies.items() if v},
            "committed": self.committed,
            "aborted": self.aborted,
            "indeterminate": self.indeterminate,
            "indeterminate_read": self.indeterminate_read,
            "indeterminate_unread": self.indeterminate_unread,
            "reads": self.reads,
            "duplicates_by_retry": self.duplicates_by_retry,
            "query": self.query,
        }


def _reads(ops: Iterable[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], str, int, str]]:
    for op in ops:
        if op["f"] in ("poll", "drain") and op["type"] == OK:
            for queue, offset, value in op["msgs"]:
                yield op, queue, int(offset), value


def check(ops: list[dict[str, Any]]) -> Result:
    """Every anomaly of the module docstring in `ops` (any order; completion times order a session)."""
    result = Result()
    found = result.anomalies

    sends: dict[str, dict[str, Any]] = {}  # value -> its send op (the last word on it)
    txn_values: dict[str, list[str]] = defaultdict(list)
    txn_end: dict[str, tuple[str, str]] = {}  # txn -> (f, type) of its decisive end
    for op in ops:
        if op["f"] == "send":
            sends[op["value"]] = op
            if op.get("txn"):
                txn_values[op["txn"]].append(op["value"])
        elif op["f"] in ("commit", "rollback"):
            prior = txn_end.get(op["txn"])
            # An ok end is decisive; a fail of a commit says nothing if a later retry was ok.
            if prior is None or prior[1] != OK:
                txn_end[op["txn"]] = (op["f"], op["type"])

    def outcome(value: str) -> str:
        op = sends[value]
        txn = op.get("txn")
        if op["type"] == FAIL:
            return "aborted"
        if not txn:
            return "committed" if op["type"] == OK else "indeterminate"
        if op["type"] == INFO and txn not in txn_end:
            return "indeterminate"
        end = txn_end.get(txn)
        if end is None:
            return "indeterminate"  # never ended by the client: check-back decides
        f, t = end
        if f == "commit":
            return {"ok": "committed", "fail": "aborted", "info": "indeterminate"}[t]
        return {"ok": "aborted", "fail": "indeterminate", "info": "indeterminate"}[t]

    outcomes = {value: outcome(value) for value in sends}

    positions: dict[str, set[tuple[str, int]]] = defaultdict(set)
    at_offset: dict[tuple[str, int], set[str]] = defaultdict(set)
    read_count = 0
    for _, queue, offset, value in _reads(ops):
        read_count += 1
        positions[value].add((queue, offset))
        at_offset[(queue, offset)].add(value)
    for value, op in sends.items():
        if op["type"] == OK and op.get("offset") is not None:
            at_offset[(op["queue"], int(op["offset"]))].add(value)
    result.reads = read_count

    for value, where in sorted(positions.items()):
        if value not in sends:
            found["unexpected"].append(value)
            continue
        if len(where) > 1:
            if sends[value].get("retrying_client"):
                result.duplicates_by_retry += 1  # a client that resends on its own (the official ones) may
            else:
                found["duplicate"].append({"value": value, "at": sorted(where)})
        if outcomes[value] == "aborted":
            found["aborted_read"].append({"value": value, "txn": sends[value].get("txn")})
    for pos, values in sorted(at_offset.items()):
        if len(values) > 1:
            found["inconsistent_offset"].append({"queue": pos[0], "offset": pos[1], "values": sorted(values)})

    for value, kind in sorted(outcomes.items()):
        if kind == "committed":
            result.committed += 1
            if value not in positions and not sends[value].get("txn"):
                found["lost"].append(value)
        elif kind == "aborted":
            result.aborted += 1
        else:
            result.indeterminate += 1
            if value in positions:
                result.indeterminate_read += 1
            else:
                result.indeterminate_unread += 1

    # Transactions: a committed one is read whole or not at all (not at all is a lost transaction).
    for txn, values in sorted(txn_values.items()):
        kinds = {outcomes[v] for v in values}
        seen = [v for v in values if v in positions]
        if kinds == {"committed"}:
            if not seen:
                found["lost"].extend(values)
            elif len(seen) < len(values):
                found["torn"].append({"txn": txn, "read": len(seen), "of": len(values)})
        elif "indeterminate" in kinds and seen and len(seen) < len(values):
            # An indeterminate transaction may have committed or not, but never in part.
            found["torn"].append({"txn": txn, "read": len(seen), "of": len(values), "indeterminate": True})

    # Order: one producer's committed plain sends to one queue land in the order it sent them.
    by_producer: dict[tuple[str, str], list[tuple[int, int, str]]] = defaultdict(list)
    for value, op in sends.items():
        if outcomes[value] == "committed" and not op.get("txn") and value in positions and op.get("seq") is not None:
            offsets = [o for q, o in positions[value] if q == op["queue"]]
            if offsets:
                by_producer[(op["process"], op["queue"])].append((int(op["seq"]), min(offsets), value))
    for (process, queue), items in sorted(by_producer.items()):
        items.sort()
        for (s1, o1, v1), (s2, o2, v2) in zip(items, items[1:]):
            if o2 <= o1:
                found["nonmonotonic_send"].append({"producer": process, "queue": queue, "earlier": [v1, o1], "later": [v2, o2]})

    # Check-back: a producer is asked only about its own transactions.
    owner = {op["txn"]: op["process"] for op in sends.values() if op.get("txn")}
    owner.update({op["broker_txn"]: op["process"] for op in sends.values() if op.get("broker_txn")})
    for op in ops:
        if op["f"] != "check":
            continue
        if op.get("value") in sends:  # the check names the message it was asked about
            asked_owner = sends[op["value"]]["process"]
        else:
            asked_owner = owner.get(op.get("txn"), op["process"])
        if asked_owner != op["process"]:
            found["misrouted_check"].append({"asked": op["process"], "txn": op.get("txn") or op.get("value"),
                                             "owner": asked_owner})
        elif op.get("group") is not None and op.get("own_group") is not None and op["group"] != op["own_group"]:
            # the broker itself said the transaction is another producer group's
            found["misrouted_check"].append({"asked": op["process"], "txn": op.get("txn") or op.get("value"),
                                             "group": op["group"], "own_group": op["own_group"]})

    if any(op["f"] in QUERY_OPS for op in ops):
        _check_query(ops, sends, outcomes, txn_values, positions, result)

    # Polls: one consumer session reads each queue at rising offsets.
    last: dict[tuple[str, Any, str], tuple[int, str]] = {}
    for op in sorted((o for o in ops if o["f"] == "poll" and o["type"] == OK), key=lambda o: o["time"]):
        session = (op["process"], op.get("session"))
        for queue, offset, value in op["msgs"]:
            key = (*session, queue)
            prior = last.get(key)
            if prior is not None and int(offset) <= prior[0]:
                found["nonmonotonic_poll"].append({"consumer": op["process"], "queue": queue, "after": list(prior), "read": [int(offset), value]})
            last[key] = (int(offset), value)
    return result


def _check_query(ops: list[dict[str, Any]], sends: dict[str, dict[str, Any]], outcomes: dict[str, str],
                 txn_values: dict[str, list[str]], positions: dict[str, set[tuple[str, int]]], result: Result) -> None:
    """The Spark query's anomalies (module doc): its output against what was read of its input."""
    found = result.anomalies
    progress = [op for op in ops if op["f"] == "query-progress" and op["type"] == OK]
    stops = [op for op in ops if op["f"] == "query-stop"]
    reads = [op for op in ops if op["f"] == "query-read" and op["type"] == OK]
    stop = stops[-1] if stops else None
    out: Counter[str] = Counter(value for op in reads for _, _, value in op["msgs"])
    caught_up = bool(stop and stop.get("caught_up") and reads)
    result.query = {
        "batches": len(progress), "rows": sum(int(op.get("rows") or 0) for op in progress),
        "restarts": sum(1 for op in ops if op["f"] == "query-restart"), "output": sum(out.values()),
        "caught_up": caught_up,
    }
    if not any(int(op.get("rows") or 0) > 0 for op in progress):
        found["query_stalled"].append("no micro-batch read a row")
    if not caught_up:
        found["query_stalled"].append("the query did not reach its input cut" if stop else "the query never stopped")
    cut = {q: int(end) for q, end in (stop or {}).get("cut", {}).items()}
    # Each input position below the cut is one copy the output must hold.
    expected = Counter({v: n for v, where in positions.items() if (n := sum(o < cut.get(q, 0) for q, o in where))})
    for value, n in sorted(out.items()):
        if value not in sends:
            found["query_unexpected"].append(value)
            continue
        if outcomes[value] == "aborted":
            found["query_aborted_read"].append({"value": value, "txn": sends[value].get("txn")})
        if n > max(1, expected[value]):
            found["query_duplicate"].append({"value": value, "copies": n, "in_input": expected[value]})
    if caught_up:  # a query that did not catch up is reported stalled, not as losing what it never reached
        for value, n in sorted(expected.items()):
            if out[value] < n:
                found["query_lost"].append({"value": value, "copies": out[value], "in_input": n})
    for txn, values in sorted(txn_values.items()):
        written = [v for v in values if out[v]]
        if written and len(written) < len(values):
            found["query_torn"].append({"txn": txn, "written": len(written), "of": len(values)})


def check_run(run_dir: str | Path) -> Result:
    """Check every history of a run directory and write its verdict next to them (checker.json)."""
    result = check(load(run_dir))
    (Path(run_dir) / "checker.json").write_text(json.dumps(result.summary(), indent=1, default=str) + "\n")
    return result
