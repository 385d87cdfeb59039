"""A follower's compiled dispatch (store/replay_columns) builds what recovery's Python scan builds."""

from __future__ import annotations

import random
import pytest

from txmq.broker.store import MessageStore
from txmq.broker.store.message import (
    HALF_TOPIC,
    SYSFLAG_TRANSACTION_COMMIT,
    SYSFLAG_TRANSACTION_PREPARED,
    SYSFLAG_TRANSACTION_ROLLBACK,
)
from txmq.broker.store.replay_columns import scan_groups
from tests.store._helpers import msg, small_config


def _leader_log(store: MessageStore, rng: random.Random) -> None:
    for i in range(300):
        kind = rng.randrange(6)
        props = {"UNIQ_KEY": f"U{i:06d}"} if rng.random() < 0.8 else {}
        if rng.random() < 0.3:
            props["TAGS"] = rng.choice(["a", "b", "tag-é"])
        if rng.random() < 0.2:
            props["KEYS"] = rng.choice(["k1", "k1 k2", " k3  k4 "])
        if rng.random() < 0.1:
            props["user"] = "v" * rng.randrange(1, 40)
        body = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
        topic = rng.choice(["T", "U", "V-topic"])
        if kind == 0:
            store.append_group([msg(topic, body, rng.randrange(3), **props) for _ in range(rng.randrange(1, 5))])
        elif kind == 1:
            m = msg(HALF_TOPIC, body, 0, **props)
            m.sys_flag = SYSFLAG_TRANSACTION_PREPARED
            store.append([m], allow_system=True)
        elif kind == 2:
            m = msg(topic, body, rng.randrange(3), **props)
            m.sys_flag = rng.choice([SYSFLAG_TRANSACTION_COMMIT, SYSFLAG_TRANSACTION_ROLLBACK])
            store.append([m])
        else:
            store.append([msg(topic, body, rng.randrange(3), **props)])


def _queues(store: MessageStore) -> dict:
    out = {}
    for cq in store.dispatcher.queues():
        out[(cq.topic, cq.queue_id)] = [store.read_queue(cq.topic, cq.queue_id, 0, 10_000).messages[i].physical_offset
                                        for i in range(cq.max_offset)] if cq.max_offset else []
    return out


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_compiled_dispatch_matches_the_python_scan(tmp_path, seed, monkeypatch):
    import txmq.broker.store.recovery as recovery

    taken = []

    def counted(commitlog, position):
        got = scan_groups(commitlog, position)
        taken.append(got.records if got else 0)
        return got

    monkeypatch.setattr(recovery, "scan_groups", counted)
    rng = random.Random(seed)
    leader = MessageStore(small_config(tmp_path / "leader"))
    fast = MessageStore(small_config(tmp_path / "fast", replica=True))
    slow = MessageStore(small_config(tmp_path / "slow", replica=True))
    try:
        _leader_log(leader, rng)
        end = leader.commitlog.write_end
        pos = 0
        while pos < end:  # chunks that end anywhere, in a record or a group, as a fetch may
            data = leader.read_log(pos, rng.randrange(1, 5000))
            fast.append_replicated(pos, data)
            slow.append_replicated(pos, data)
            fast.dispatch_replicated()
            with slow._replay_lock:
                slow.recovery.replay.feed()
            pos += len(data)
        assert fast.recovery.replay.safe_end == slow.recovery.replay.safe_end == end
        assert sum(taken) > fast.recovery.replay.scanned / 2  # the compiled scan took most records
        assert fast.recovery.replay.redispatched == slow.recovery.replay.redispatched
        assert _queues(fast) == _queues(slow) == _queues(leader)
        for store in (fast, slow):
            store.dispatcher.index.write_pending()
        for i in range(300):
            for key in (f"#U#U{i:06d}", "T#k1", "U#k2", "V-topic#k4"):
                assert sorted(fast.dispatcher.index.lookup(key, limit=1000)) == \
                    sorted(slow.dispatcher.index.lookup(key, limit=1000)), key
    finally:
        for s in (leader, fast, slow):
            s.close()


def test_compiled_scan_stops_at_a_damaged_record(tmp_path):
    """A flipped byte anywhere in a record: the compiled scan takes the records before it only."""
    leader = MessageStore(small_config(tmp_path / "leader", commitlog_segment_bytes=1 << 20))
    try:
        leader.append([msg("T", b"x" * 100, 0, UNIQ_KEY=f"U{i}") for i in range(1)])
        first_end = leader.commitlog.write_end
        leader.append([msg("T", b"y" * 100, 0, UNIQ_KEY="V")])
        end = leader.commitlog.write_end
        good = leader.read_log(0, end)
        for at in range(first_end, end):
            bad = bytearray(good)
            bad[at] ^= 0x40
            replica = MessageStore(small_config(tmp_path / f"r{at}", replica=True, commitlog_segment_bytes=1 << 20))
            try:
                replica.append_replicated(0, bytes(bad))
                got = scan_groups(replica.commitlog, 0)
                assert got is not None and got.end == first_end, at
            finally:
                replica.close()
    finally:
        leader.close()


def test_a_followers_queues_and_index_equal_the_leaders_after_commits_by_reference(tmp_path):
    """Transactions committed by reference between plain writes, fetched in chunks that end anywhere:
    the follower's compiled dispatch (which leaves a commit record's group to the Python scan)
    derives the leader's queues, message by message, and its index entries at the slots."""
    from txmq.broker.transaction import Resolution, TransactionConfig, TransactionEngine

    rng = random.Random(5)
    leader = MessageStore(small_config(tmp_path / "leader", commitlog_segment_bytes=1 << 20))
    follower = MessageStore(small_config(tmp_path / "follower", replica=True, commitlog_segment_bytes=1 << 20))
    engine = TransactionEngine(leader, TransactionConfig(), clock=lambda: 1_700_000_000.0)
    try:
        for t in range(12):
            engine.prepare([msg("T", b"t%d-%d" % (t, i), i % 3, UNIQ_KEY=f"T{t}-{i}", KEYS=f"k{t}", TAGS="ab"[t % 2])
                            for i in range(rng.randrange(1, 30))], transaction_id=f"tx{t}")
            leader.append([msg("T", b"plain%d" % t, t % 3, UNIQ_KEY=f"P{t}")])
            engine.end(f"tx{t}", Resolution.COMMIT if t % 4 else Resolution.ROLLBACK)
        end = leader.commitlog.write_end
        pos = 0
        while pos < end:
            data = leader.read_log(pos, rng.randrange(1, 5000))
            follower.append_replicated(pos, data)
            follower.dispatch_replicated()
            pos += len(data)
        assert follower.recovery.replay.safe_end == end
        want = {q: [(m.msg_id, m.body, m.queue_offset) for m in leader.read_queue("T", q, 0, 1000).messages]
                for q in range(3)}
        assert {q: [(m.msg_id, m.body, m.queue_offset) for m in follower.read_queue("T", q, 0, 1000).messages]
                for q in range(3)} == want
        assert sum(map(len, want.values())) > 12
        follower.dispatcher.index.write_pending()
        for t in range(1, 12):
            if t % 4:
                assert [m.body for m in follower.query_by_key("T", f"k{t}")] == \
                    [m.body for m in leader.query_by_key("T", f"k{t}")] != []
                assert follower.get_by_message_id(f"T{t}-0") == leader.get_by_message_id(f"T{t}-0")
    finally:
        engine.close()
        leader.close()
        follower.close()
