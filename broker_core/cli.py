"""The `txmq` command: run a broker, manage topics, send and tail messages, resolve transactions.

Output is a table for people and one JSON document with `--json` for
scripts. Every command talks to the broker through the client library
(`--broker HOST:PORT`, default $TXMQ_BROKER or 127.0.0.1:8081). Exit codes:
0 success, 1 broker-side failure, 2 bad input (bad arguments, unknown
topic/transaction/message: the message names the problem), 3 broker unreachable.
"""

from __future__ import annotations

import argparse
import base64
import dataclasses
import json
import os
import sys
import time
from datetime import datetime, timezone
from typing import Any, Callable, Sequence

from txmq.broker import __version__, errors

DEFAULT_BROKER = "127.0.0.1:8081"
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNREACHABLE = 0, 1, 2, 3


class UsageError(Exception):
    """Bad command-line input that argparse cannot see (exit code 2)."""


# ---- output -----------------------------------------------------------------

def _table(rows: list[dict[str, Any]], columns: Sequence[str]) -> str:
    if not rows:
        return "(none)"
    cells = [[str(c).upper() for c in columns]] + [["" if r.get(c) is None else str(r.get(c)) for c in columns]
                                                  for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in cells)


def _emit(args: argparse.Namespace, data: Any, rows: list[dict] | None = None,
          columns: Sequence[str] | None = None, text: str | None = None) -> None:
    if args.json:
        print(json.dumps(data, default=_json_default, sort_keys=True))
    elif rows is not None and columns is not None:
        print(_table(rows, columns))
    elif text is not None:
        print(text)
    else:
        print(json.dumps(data, default=_json_default, indent=2, sort_keys=True))


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return _body_text(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def _body_text(body: bytes) -> str:
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        return "base64:" + base64.b64encode(body).decode()


def _ms_iso(ms: int | None) -> str:
    if not ms:
        return ""
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat(timespec="milliseconds")


# ---- commands -----------------------------------------------------------------

def _client(args: argparse.Namespace):
    from txmq.broker.client import NativeClient

    return NativeClient(args.broker, timeout_s=args.timeout, retry_unavailable_s=min(args.timeout, 3.0))


def _topic_rows(topics) -> list[dict]:
    rows = []
    for t in topics:
        total = sum(q.max_offset - q.min_offset for q in t.queues.values())
        rows.append({"topic": t.name, "queues": t.queue_count, "perm": t.permission, "type": t.message_type,
                     "messages": total,
                     "max_offsets": ",".join(str(t.queues[q].max_offset) for q in sorted(t.queues))})
    return rows


def _topic_dict(t) -> dict:
    return {"name": t.name, "message_type": t.message_type, "queue_count": t.queue_count, "permission": t.permission,
            "queues": {str(q): {"min_offset": r.min_offset, "max_offset": r.max_offset} for q, r in t.queues.items()}}


def cmd_topic_create(args) -> None:
    if args.queues <= 0:
        raise UsageError(f"--queues must be positive, got {args.queues}")
    with _client(args) as c:
        t = c.create_topic(args.name, args.queues, args.type)
    _emit(args, _topic_dict(t), text=f"created topic {t.name} ({t.message_type}) with {t.queue_count} queues")


def cmd_topic_list(args) -> None:
    with _client(args) as c:
        topics = c.list_topics(include_system=args.system)
    _emit(args, [_topic_dict(t) for t in topics], _topic_rows(topics), ["topic", "queues", "perm", "type", "messages", "max_offsets"])


def cmd_topic_describe(args) -> None:
    """The topic's queues in their global order, each with its group and the group's leader
    (a cluster spreads them over groups; a lone broker is one group named "")."""
    from txmq.broker.client.cluster_client import ClusterClient

    with ClusterClient(args.broker, timeout_s=args.timeout, retry_unavailable_s=min(args.timeout, 3.0)) as c:
        routes = c.routes([args.name])
        views = {}
        for g in dict.fromkeys(s.group for q in routes.queues(args.name) for s in q.segments):
            try:
                views[g] = c.group(g).describe_topic(args.name)
            except errors.BrokerUnavailable:
                if any(q.current.group == g for q in routes.queues(args.name)):
                    raise  # only a group holding nothing but history may be gone
    first = next(iter(views.values()))
    rows = []
    for q in routes.queues(args.name):
        # a moved queue (docs/cluster.md, "Moving queues"): its offsets are logical, its end on the group it is on now
        parts = [(s, views[s.group].queues.get(s.queue_id)) for s in q.segments if s.group in views]
        low = next(((s, r) for s, r in parts if r is not None), (None, None))
        now = views[q.current.group].queues.get(q.current.queue_id)
        min_offset = low[0].base + low[1].min_offset if low[1] is not None else q.current.base
        max_offset = q.current.base + (now.max_offset if now else 0)
        row = {"queue_id": q.queue_id, "group": q.group, "leader": routes.leaders.get(q.group) or "",
               "min_offset": min_offset, "max_offset": max_offset, "messages": max_offset - min_offset}
        if q.moves or q.sealing:
            row.update(on=q.current.group, leader=routes.leaders.get(q.current.group) or "",
                       segments=[[s.group, s.queue_id, s.base] for s in q.segments], moving_to=q.sealing)
        rows.append(row)
    data = {"name": args.name, "message_type": routes.message_types.get(args.name) or first.message_type,
            "queue_count": len(rows), "permission": first.permission, "cluster": routes.cluster, "queues": rows}
    if args.json:
        _emit(args, data)
    else:
        print(f"topic {args.name}: {data['message_type']} messages, {len(rows)} queues, permission {first.permission}")
        columns = ["queue_id", "group", "leader", "min_offset", "max_offset", "messages"]
        print(_table(rows, columns + (["on", "moving_to"] if any("on" in r for r in rows) else [])))


def cmd_topic_move(args) -> None:
    """Move one queue to another group, or even a topic out over the groups (cluster/moves.py)."""
    if args.even == bool(args.queue or args.to):
        raise UsageError("give --queue GROUP:ID and --to GROUP, or --even")
    if args.queue and not args.to:
        raise UsageError("--queue needs --to GROUP")
    with _client(args) as c:
        result = c.move_queues(topic=args.name, queue=args.queue or "", to=args.to or "", even=args.even,
                               dry_run=args.dry_run, wait_s=args.wait, rate=_rate(args.rate),
                               keep_history=args.keep_history, copy_wait_s=args.copy_wait)
    _emit_moves(args, result)


def cmd_group_drain(args) -> None:
    """Move every queue off a broker group, then retire it (no new queue, no transaction goes there)."""
    with _client(args) as c:
        result = c.move_queues(drain=args.group, dry_run=args.dry_run, wait_s=args.wait, rate=_rate(args.rate),
                               keep_history=args.keep_history, copy_wait_s=args.copy_wait)
    _emit_moves(args, result)


def _rate(text: str) -> int:
    """A byte rate: 32MiB, 500KiB, 1000000 (per second); 0: unlimited."""
    units = {"kib": 1024, "mib": 1024 ** 2, "gib": 1024 ** 3, "kb": 1000, "mb": 1000 ** 2, "gb": 1000 ** 3, "b": 1}
    raw = text.strip().lower().removesuffix("/s")
    for unit, factor in units.items():
        if raw.endswith(unit) and raw[:-len(unit)].strip().replace(".", "", 1).isdigit():
            return int(float(raw[:-len(unit)]) * factor)
    if raw.isdigit():
        return int(raw)
    raise UsageError(f"--rate takes bytes per second (e.g. 32MiB, 500KiB, 1000000; 0: unlimited), not {text!r}")


def _emit_moves(args, result: dict) -> None:
    if args.json:
        _emit(args, result)
        return
    rows = [{"topic": m["topic"], "queue": m["queue"], "from": m.get("from", ""), "to": m["to"],
             "state": m.get("state", "planned"), "at_offset": m.get("base", ""), "error": m.get("error", "")}
            for m in result.get("moves", [])]
    print(_table(rows, ["topic", "queue", "from", "to", "state", "at_offset", "error"]) if rows else "nothing to move")
    if result.get("copies_left"):
        print(f"{result['copies_left']} history copies still running: `txmq cluster status` shows their progress")
    if result.get("retired"):
        group = result["retired"]
        if result.get("safe_to_stop"):
            print(f"group {group} retired and safe to stop for good: its queues and their history are on other "
                  "groups, its timer holds nothing")
        else:
            print(f"group {group} retired, NOT safe to stop yet (run the drain again later):")
            for reason in result.get("waiting_for", []):
                print(f"  - {reason}")


def cmd_topic_delete(args) -> None:
    with _client(args) as c:
        c.delete_topic(args.name)
    _emit(args, {"deleted": args.name}, text=f"deleted topic {args.name}")


def _parse_props(items: Sequence[str]) -> dict[str, str]:
    props = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"--prop {item!r} is not KEY=VALUE")
        props[key] = value
    return props


def _deliver_at_ms(deliver_at: str | None, delay: str | None) -> int | None:
    """Epoch ms from --deliver-at (ISO 8601, UTC unless it names a zone, or epoch ms) or --delay (a duration)."""
    import datetime as dt
    from txmq.broker.server.config import parse_duration

    if deliver_at is not None and delay is not None:
        raise UsageError("give --deliver-at or --delay, not both")
    if delay is not None:
        try:
            return int(time.time() * 1000 + parse_duration(delay) * 1000)
        except ValueError as exc:
            raise UsageError(f"--delay: {exc}") from None
    if deliver_at is None:
        return None
    if deliver_at.strip().isdigit():
        return int(deliver_at)
    try:
        when = dt.datetime.fromisoformat(deliver_at.strip().replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"--deliver-at {deliver_at!r} is neither an ISO time (2026-11-26T10:00:00Z) "
                         "nor epoch milliseconds") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.timezone.utc)
    return int(when.timestamp() * 1000)


def cmd_send(args) -> None:
    from txmq.broker.client import Message

    if args.body is not None and args.stdin:
        raise UsageError("give a BODY argument or --stdin, not both")
    if args.body is not None:
        bodies = [args.body.encode()]
    elif args.stdin:
        bodies = [line.rstrip("\n").encode() for line in sys.stdin if line.strip()]
    else:
        raise UsageError("nothing to send: give a BODY argument or --stdin (one message per line)")
    if not bodies:
        raise UsageError("--stdin gave no non-empty lines to send")
    props = _parse_props(args.prop)
    deliver_at_ms = _deliver_at_ms(args.deliver_at, args.delay)  # with --transaction: scheduled by its COMMIT
    messages = [Message(topic=args.topic, body=b, tag=args.tag, keys=args.key or (), properties=props,
                        sharding_key=args.sharding_key, deliver_at_ms=deliver_at_ms) for b in bodies]
    with _client(args) as c:
        if args.transaction:  # the messages go over the Flight data plane, as one batch of halves
            prep = c.prepare_arrow("", messages, producer_group=args.producer_group, sender="cli",
                                   return_message_ids=True)
            end = c.end_transaction(prep.transaction_id, "COMMIT", producer_group=args.producer_group)
            data = {"transaction_id": prep.transaction_id, "state": end.state, "count": prep.count,
                    "message_ids": prep.message_ids}
            text = f"committed transaction {prep.transaction_id} with {prep.count} message(s)"
        else:
            summary = c.send_arrow(messages, return_message_ids=True)
            data = {"count": summary.count, "message_ids": summary.message_ids,
                    "queues": [{"topic": s.topic, "queue": s.queue_id, "first_offset": s.first_offset,
                                "count": s.count} for s in summary.slices]}
            text = "\n".join(f"sent {mid}" for mid in summary.message_ids)
    _emit(args, data, text=text)


def _batch_rows(batch) -> list[dict]:
    rows = []
    for r in batch.to_pylist():
        rows.append({"topic": r["topic"], "queue": r["queueId"], "offset": r["queueOffset"], "id": r["messageId"],
                     "tag": r["tag"], "keys": r["keys"] or [], "body": _body_text(r["body"]),
                     "properties": dict(r["properties"] or []),
                     "born": r["bornTimestamp"].isoformat() if r["bornTimestamp"] else None,
                     "stored": r["storeTimestamp"].isoformat() if r["storeTimestamp"] else None,
                     "transaction_id": r["transactionId"]})
    return rows


def cmd_tail(args) -> None:
    from txmq.broker.client import PullConsumer

    if args.count is not None and args.count <= 0:
        raise UsageError(f"--count must be positive, got {args.count}")
    start: Any = args.start
    if start not in ("earliest", "latest"):
        raise UsageError(f"--from must be 'earliest' or 'latest', got {start!r}")
    deadline = time.monotonic() + args.for_s if args.for_s else None
    shown = 0
    with _client(args) as c:
        c.describe_topic(args.topic)  # a typo'd topic is an error, not an endless wait
        consumer = PullConsumer(c, [args.topic], start=start, tags=args.tags, sql=args.sql)
        try:
            while True:
                for batch in consumer.poll(timeout_ms=1000):
                    for row in _batch_rows(batch):
                        if args.json:
                            print(json.dumps(row, sort_keys=True), flush=True)
                        else:
                            tx = f" tx={row['transaction_id']}" if row["transaction_id"] else ""
                            tag = f" tag={row['tag']}" if row["tag"] else ""
                            print(f"{row['topic']}:{row['queue']}@{row['offset']} {row['id']}{tag}{tx} "
                                  f"{row['body']}", flush=True)
                        shown += 1
                        if args.count is not None and shown >= args.count:
                            return
                if deadline is not None and time.monotonic() >= deadline:
                    return
        except KeyboardInterrupt:
            return


def _message_dict(m) -> dict:
    return {"topic": m.topic, "queue": m.queue_id, "offset": m.queue_offset, "message_id": m.message_id,
            "offset_msg_id": m.offset_msg_id, "tag": m.tag, "keys": list(m.keys), "body": _body_text(m.body),
            "properties": m.properties, "born": _ms_iso(m.born_timestamp_ms), "stored": _ms_iso(m.store_timestamp_ms),
            "transaction_id": m.transaction_id}


_MESSAGE_COLUMNS = ["message_id", "topic", "queue", "offset", "tag", "keys", "stored", "transaction_id", "body"]


def cmd_msg_get(args) -> None:
    with _client(args) as c:
        m = _message_dict(c.get_message(args.id))
    if args.json:
        _emit(args, m)
    else:
        for key in ("message_id", "offset_msg_id", "topic", "queue", "offset", "tag", "keys", "properties",
                    "born", "stored", "transaction_id", "body"):
            print(f"{key:>15}: {m[key] if m[key] is not None else ''}")


def cmd_msg_query(args) -> None:
    with _client(args) as c:
        found = [_message_dict(m) for m in c.query_messages(args.topic, args.key, max_count=args.limit)]
    _emit(args, found, found, _MESSAGE_COLUMNS)


def _tx_dict(t) -> dict:
    return {"transaction_id": t.transaction_id, "state": t.state, "topics": list(t.topics), "halves": t.half_count,
            "age_s": round(t.age_ms / 1000, 1), "checks": t.check_times, "producer_group": t.producer_group,
            "senders": list(t.senders)}


def cmd_tx_list(args) -> None:
    with _client(args) as c:
        txs = [_tx_dict(t) for t in c.list_transactions(state=args.state.upper(), topic=args.topic, limit=args.limit)]
    rows = [{**t, "topics": ",".join(t["topics"])} for t in txs]
    _emit(args, txs, rows, ["transaction_id", "state", "topics", "halves", "age_s", "checks", "producer_group"])


def cmd_tx_get(args) -> None:
    with _client(args) as c:
        t = _tx_dict(c.get_transaction(args.id))
    _emit(args, t, [{**t, "topics": ",".join(t["topics"])}],
          ["transaction_id", "state", "topics", "halves", "age_s", "checks", "producer_group"])


def _cmd_tx_end(resolution: str) -> Callable:
    def run(args) -> None:
        with _client(args) as c:
            end = c.end_transaction(args.id, resolution, source="admin")
        verb = "committed" if resolution == "COMMIT" else "rolled back"
        note = "" if end.newly_ended else " (already was)"
        _emit(args, {"transaction_id": args.id, "state": end.state, "newly_ended": end.newly_ended},
              text=f"{verb} transaction {args.id}{note}")
    return run


def cmd_tx_resume(args) -> None:
    with _client(args) as c:
        c.resume_transaction(args.id)
    _emit(args, {"transaction_id": args.id, "state": "PENDING"}, text=f"resumed transaction {args.id}")


def cmd_group_lag(args) -> None:
    with _client(args) as c:
        lag = c.group_lag(args.group, args.topic or ())
    rows = [{"topic": t, "queue": q, "committed": e.committed, "max_offset": e.max_offset, "lag": e.lag}
            for t, qs in sorted(lag.items()) for q, e in sorted(qs.items())]
    data = {"group": args.group, "total_lag": sum(r["lag"] for r in rows), "queues": rows}
    if args.json:
        _emit(args, data)
    else:
        print(_table(rows, ["topic", "queue", "committed", "max_offset", "lag"]))
        print(f"total lag: {data['total_lag']}")


def _group_dict(g) -> dict:
    return {"name": g.name, "fifo": g.fifo, "retry_max_times": g.retry_max_times,
            "max_delivery_attempts": g.max_delivery_attempts}


def _cluster_client(args):
    from txmq.broker.client.cluster_client import ClusterClient

    return ClusterClient(args.broker, timeout_s=args.timeout, retry_unavailable_s=min(args.timeout, 3.0))


def _cmd_group_update(must_exist: bool) -> Callable:
    """create / update: on every broker group's leader (ClusterClient), a lone broker being one."""
    def run(args) -> None:
        if args.retry_max_times is not None and args.retry_max_times < 0:
            raise UsageError(f"--retry-max-times must be 0 or more, got {args.retry_max_times}")
        with _cluster_client(args) as c:
            g = c.update_consumer_group(args.name, fifo=args.fifo, retry_max_times=args.retry_max_times,
                                        must_exist=must_exist)
        _emit(args, _group_dict(g), text=f"{'updated' if must_exist else 'created'} consumer group {g.name}: "
              f"{'FIFO' if g.fifo else 'not FIFO'}, at most {g.max_delivery_attempts} deliveries "
              f"({g.retry_max_times} retries) before %DLQ%{g.name}")
    return run


def cmd_group_describe(args) -> None:
    with _client(args) as c:
        g = c.describe_consumer_group(args.name)
    _emit(args, _group_dict(g), [_group_dict(g)], ["name", "fifo", "retry_max_times", "max_delivery_attempts"])


def cmd_group_list(args) -> None:
    with _client(args) as c:
        groups = [_group_dict(g) for g in c.list_consumer_groups()]
    _emit(args, groups, groups, ["name", "fifo", "retry_max_times", "max_delivery_attempts"])


def cmd_group_delete(args) -> None:
    with _cluster_client(args) as c:
        c.delete_consumer_group(args.name)
    _emit(args, {"name": args.name, "deleted": True}, text=f"deleted consumer group {args.name}'s settings")


def cmd_stats(args) -> None:
    with _client(args) as c:
        stats = c.stats()
    if args.json:
        _emit(args, stats)
        return
    tx = stats.get("transactions", {})
    rows = [{"figure": f"transactions.{k}", "value": v} for k, v in sorted(tx.items())
            if isinstance(v, (int, float)) or k == "pending_halves"]
    rows += [{"figure": f"store.{k}", "value": v} for k, v in sorted(stats.get("store", {}).items())
             if isinstance(v, (int, float, str))]
    rows += [{"figure": f"rpc.{op}", "value": f"{d['calls']} calls, {d['messages']} messages"}
             for op, d in sorted(stats.get("rpc", {}).items())]
    print(_table(rows, ["figure", "value"]))


def cmd_cluster_status(args) -> None:
    from txmq.broker.cluster.coordination import CoordinationUnavailable, cluster_status
    from txmq.broker.server.config import parse_host_port

    try:
        endpoints = [parse_host_port(e.strip()) for e in args.etcd.split(",") if e.strip()]
    except ValueError as exc:
        raise UsageError(f"--etcd: {exc}") from None
    try:
        data = cluster_status(endpoints, args.group)
    except CoordinationUnavailable as exc:
        raise errors.BrokerUnavailable(str(exc)) from None
    if args.json:
        _emit(args, data)
        return
    rows = [{"group": name, "endpoint": m["endpoint"], "role": m["role"], "in_sync": m["in_sync"],
             "epoch": g["epoch"], "lag_bytes": m["lag_bytes"], "lag_seconds": m["lag_seconds"],
             "may_not_lead": m.get("may_not_lead", "")}
            for name, g in sorted(data["groups"].items()) for m in g["members"]]
    print(_table(rows, ["group", "endpoint", "role", "in_sync", "epoch", "lag_bytes", "lag_seconds", "may_not_lead"]))
    for m in data.get("moving", []):
        print(f"moving: {m['topic']} {m['queue']} from {m['from']} to {m['to']}")
    for m in data.get("moved", []):
        where = " -> ".join(f"{s['group']}:{s['queue_id']}@{s['from_offset']}" for s in m["segments"])
        print(f"moved: {m['topic']} {m['queue']} now on {m['on']} ({where})")
    for c in data.get("copies", []):
        if c.get("state") != "done":
            print(f"copying: {c['topic']} {c['queue']} history {c['from']} -> {c['to']}: {c['copied']}/{c['total']} "
                  f"messages, {c['bytes']} bytes at {c['bytes_per_s']} B/s (limit {c['rate_limit'] or 'none'})"
                  f"{', ' + c['state'] if c['state'] != 'copying' else ''}")
    if data.get("retired"):
        print(f"retired (drained) groups: {', '.join(data['retired'])}")


def _copy_arguments(p) -> None:
    p.add_argument("--rate", default="32MiB",
                   help="bytes per second at which a moved queue's history is copied to its new group "
                        "(e.g. 32MiB, 500KiB; 0: unlimited; default 32MiB)")
    p.add_argument("--keep-history", action="store_true",
                   help="copy nothing: the history stays readable on the old group only while it runs")
    p.add_argument("--copy-wait", type=float, default=600.0,
                   help="seconds to wait for the history copies (they go on after; run again to wait more)")


def cmd_console(args) -> None:
    try:
        from txmq.broker.console.app import serve
    except ModuleNotFoundError as exc:
        raise UsageError(f"the console needs its extra: pip install 'txmq[console]' ({exc.name} is missing)") from None
    from txmq.broker.server.config import parse_host_port

    try:
        parse_host_port(args.listen)
    except ValueError as exc:
        raise UsageError(f"--listen: {exc}") from None
    if args.refresh <= 0:
        raise UsageError(f"--refresh must be positive, got {args.refresh}")
    serve(args.broker, args.listen, refresh_s=args.refresh, timeout_s=args.timeout)


# ---- parser ---------------------------------------------------------------------

def _common() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--broker", default=argparse.SUPPRESS,
                   help="broker HOST:PORT (default $TXMQ_BROKER or 127.0.0.1:8081)")
    p.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print JSON for scripts")
    p.add_argument("--timeout", type=float, default=argparse.SUPPRESS, help="per-call timeout in seconds (default 10)")
    return p


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(prog="txmq", parents=[common],
                                     description="txmq: a transactional message broker (RocketMQ design).")
    parser.add_argument("--version", action="version", version=f"txmq {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    broker = sub.add_parser("broker", help="run a broker")
    bsub = broker.add_subparsers(dest="action", metavar="ACTION", required=True)
    bsub.add_parser("start", help="start a broker in the foreground (see `txmq broker start --help`)")

    topic = sub.add_parser("topic", help="manage topics")
    tsub = topic.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = tsub.add_parser("create", parents=[common], help="create a topic")
    p.add_argument("name")
    p.add_argument("--queues", type=int, default=4, help="number of queues (default 4)")
    p.add_argument("--type", type=str.upper, choices=["NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED"],
                   help="the RocketMQ 5 message type the topic accepts (default: MIXED for a new topic, "
                        "an existing topic keeps its type)")
    p.set_defaults(func=cmd_topic_create)
    p = tsub.add_parser("list", parents=[common], help="list topics")
    p.add_argument("--system", action="store_true", help="include system topics")
    p.set_defaults(func=cmd_topic_list)
    p = tsub.add_parser("describe", parents=[common], help="queues and offsets of a topic")
    p.add_argument("name")
    p.set_defaults(func=cmd_topic_describe)
    p = tsub.add_parser("move", parents=[common], help="move a queue to another broker group (or even a topic out)")
    p.add_argument("name")
    p.add_argument("--queue", help="the queue, GROUP:ID as `topic describe` names it")
    p.add_argument("--to", help="the broker group to move it to")
    p.add_argument("--even", action="store_true", help="move queues until every live group holds as many (±1)")
    p.add_argument("--dry-run", action="store_true", help="only print what would move")
    p.add_argument("--wait", type=float, default=30.0,
                   help="seconds the queue's pending transactions may take to end before the move rolls back")
    _copy_arguments(p)
    p.set_defaults(func=cmd_topic_move)
    p = tsub.add_parser("delete", parents=[common], help="delete a topic")
    p.add_argument("name")
    p.set_defaults(func=cmd_topic_delete)

    p = sub.add_parser("send", parents=[common], help="send a message (or one per stdin line)")
    p.add_argument("topic")
    p.add_argument("body", nargs="?", help="message body (UTF-8 text)")
    p.add_argument("--stdin", action="store_true", help="send one message per line of standard input")
    p.add_argument("--tag")
    p.add_argument("--key", action="append", help="message key (repeatable)")
    p.add_argument("--prop", action="append", help="user property KEY=VALUE (repeatable)")
    p.add_argument("--sharding-key", help="messages with the same key keep their order in one queue")
    p.add_argument("--transaction", action="store_true", help="send all messages in one committed transaction")
    p.add_argument("--deliver-at", help="a timer message: deliver at this time (ISO 8601, UTC by default, "
                                        "or epoch ms)")
    p.add_argument("--delay", help="a timer message: deliver after this long (e.g. 30s, 5m, 2h)")
    p.add_argument("--producer-group", default="txmq-cli")
    p.set_defaults(func=cmd_send)

    p = sub.add_parser("tail", parents=[common], help="follow a topic's committed messages")
    p.add_argument("topic")
    p.add_argument("--from", dest="start", default="latest", help="earliest | latest (default latest)")
    p.add_argument("--tags", help="tag filter, e.g. 'a||b'")
    p.add_argument("--sql", help="SQL92 filter over user properties, TAGS and KEYS, "
                                 "e.g. \"region = 'eu' AND amount > 100\"")
    p.add_argument("--count", type=int, help="stop after N messages")
    p.add_argument("--for", dest="for_s", type=float, help="stop after this many seconds")
    p.set_defaults(func=cmd_tail)

    msg = sub.add_parser("msg", help="look up messages")
    msub = msg.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = msub.add_parser("get", parents=[common], help="a message by id (client id or offset id)")
    p.add_argument("id")
    p.set_defaults(func=cmd_msg_get)
    p = msub.add_parser("query", parents=[common], help="messages of a topic by key")
    p.add_argument("--topic", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--limit", type=int, default=64)
    p.set_defaults(func=cmd_msg_query)

    tx = sub.add_parser("tx", help="pending transactions")
    xsub = tx.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = xsub.add_parser("list", parents=[common], help="list PENDING (or DISCARDED) transactions")
    p.add_argument("--state", default="PENDING", choices=["PENDING", "DISCARDED", "pending", "discarded"])
    p.add_argument("--topic")
    p.add_argument("--limit", type=int, default=1000)
    p.set_defaults(func=cmd_tx_list)
    p = xsub.add_parser("get", parents=[common], help="one transaction's state")
    p.add_argument("id")
    p.set_defaults(func=cmd_tx_get)
    for name, resolution in (("commit", "COMMIT"), ("rollback", "ROLLBACK")):
        p = xsub.add_parser(name, parents=[common], help=f"{name} a pending transaction")
        p.add_argument("id")
        p.set_defaults(func=_cmd_tx_end(resolution))
    p = xsub.add_parser("resume", parents=[common], help="make a DISCARDED transaction PENDING again")
    p.add_argument("id")
    p.set_defaults(func=cmd_tx_resume)

    group = sub.add_parser("group", help="consumer groups")
    gsub = group.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = gsub.add_parser("lag", parents=[common], help="committed offsets and lag of a group")
    p.add_argument("group")
    p.add_argument("--topic", action="append", help="topic(s) to report (default: those the group committed)")
    p.set_defaults(func=cmd_group_lag)
    for action, must_exist, text in (("create", False, "create a consumer group's settings (or change them)"),
                                     ("update", True, "change an existing consumer group's settings")):
        p = gsub.add_parser(action, parents=[common], help=text)
        p.add_argument("name")
        p.add_argument("--fifo", action=argparse.BooleanOptionalAction, default=None,
                       help="FIFO (RocketMQ's consumeMessageOrderly): a queue's next messages wait while one is "
                            "in flight or being retried (default for a new group: --no-fifo)")
        p.add_argument("--retry-max-times", type=int,
                       help="redeliveries before a message goes to %%DLQ%%<group> (default for a new group: 16)")
        p.set_defaults(func=_cmd_group_update(must_exist))
    p = gsub.add_parser("drain", parents=[common],
                        help="move every queue off a BROKER group, then retire it (cluster; not a consumer group)")
    p.add_argument("group", help="the broker group (--group of its brokers)")
    p.add_argument("--dry-run", action="store_true", help="only print what would move")
    p.add_argument("--wait", type=float, default=30.0, help="per queue, as `topic move --wait`")
    _copy_arguments(p)
    p.set_defaults(func=cmd_group_drain)
    p = gsub.add_parser("describe", parents=[common], help="a consumer group's settings")
    p.add_argument("name")
    p.set_defaults(func=cmd_group_describe)
    p = gsub.add_parser("list", parents=[common], help="consumer groups with settings")
    p.set_defaults(func=cmd_group_list)
    p = gsub.add_parser("delete", parents=[common], help="delete a consumer group's settings (back to the defaults)")
    p.add_argument("name")
    p.set_defaults(func=cmd_group_delete)

    p = sub.add_parser("stats", parents=[common], help="broker statistics")
    p.set_defaults(func=cmd_stats)

    cluster = sub.add_parser("cluster", help="broker groups (replicas coordinated by etcd)")
    csub = cluster.add_subparsers(dest="action", metavar="ACTION", required=True)
    p = csub.add_parser("status", parents=[common],
                        help="groups, replicas, leader, epoch, in-sync set and replication lag")
    p.add_argument("--etcd", default=os.environ.get("TXMQ_ETCD"), required=not os.environ.get("TXMQ_ETCD"),
                   help="etcd H:P[,H:P...] (default $TXMQ_ETCD)")
    p.add_argument("--group", help="only this group")
    p.set_defaults(func=cmd_cluster_status)

    p = sub.add_parser("console", parents=[common],
                       help="web pages of the cluster, transactions in flight, topics, consumer groups and messages")
    p.add_argument("--listen", default=os.environ.get("TXMQ_CONSOLE_LISTEN", "127.0.0.1:8080"),
                   help="HOST:PORT the console serves on (default 127.0.0.1:8080, or $TXMQ_CONSOLE_LISTEN)")
    p.add_argument("--refresh", type=float, default=2.0, help="seconds between a page's refreshes (default 2)")
    p.set_defaults(func=cmd_console)
    return parser


def _exit_code(exc: errors.TxmqError) -> int:
    if isinstance(exc, errors.BrokerUnavailable):
        return EXIT_UNREACHABLE
    if isinstance(exc, (errors.BadRequest, errors.NotFound, errors.TransactionError)):
        return EXIT_BAD_INPUT
    return EXIT_FAILED


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:2] == ["broker", "start"]:
        from txmq.broker.server.broker import run_broker

        return run_broker(argv[2:])
    parser = build_parser()
    args = parser.parse_args(argv)
    # the common options are SUPPRESSed so they work before or after the command: absent when given at neither
    args.broker = getattr(args, "broker", None) or os.environ.get("TXMQ_BROKER") or DEFAULT_BROKER
    args.json = getattr(args, "json", False)
    args.timeout = getattr(args, "timeout", None) or 10.0
    try:
        args.func(args)
    except UsageError as exc:
        print(f"txmq: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except errors.TxmqError as exc:
        print(f"txmq: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return _exit_code(exc)
    except BrokenPipeError:
        return EXIT_OK
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
