"""Recovery: abort marker, checkpoint-bounded scan, torn tails, dirty queue entries."""

from __future__ import annotations

import os
import random

import pytest

from txmq.broker.store.consume_queue import ENTRY
from txmq.broker.store.record_layout import HEADER_V4_SIZE
from tests.store._helpers import crash, msg, queue_contents

SEG = 16 * 1024
NO_CHECKPOINTS = dict(checkpoint_interval_ms=10**8, flush_interval_ms=10**8)


def test_clean_close_removes_the_abort_marker(open_store, tmp_path) -> None:
    store = open_store()
    assert (tmp_path / "store" / "abort").exists()
    store.close()
    assert not (tmp_path / "store" / "abort").exists()
    assert not open_store().recovery.crashed


def test_a_crash_leaves_the_abort_marker_and_recovery_keeps_everything_written(open_store) -> None:
    store = open_store(**NO_CHECKPOINTS)
    store.append([msg(body=b"%d" % i, queue_id=i % 3) for i in range(100)])
    crash(store)
    store = open_store()
    assert store.recovery.crashed and store.recovery.records_scanned == 100
    contents = queue_contents(store)
    assert sorted(b for bodies in contents.values() for b in bodies) == sorted(b"%d" % i for i in range(100))


def test_recovery_scans_only_the_tail_after_the_checkpoint(open_store) -> None:
    store = open_store(**NO_CHECKPOINTS)
    store.append([msg(body=b"old") for _ in range(200)])
    store._write_checkpoint()
    store.append([msg(body=b"new") for _ in range(7)])
    crash(store)
    store = open_store()
    assert store.recovery.records_scanned == 7
    assert store.max_offset("T", 0) == 207


def test_lost_queue_entries_past_the_checkpoint_are_rebuilt(open_store, tmp_path) -> None:
    store = open_store(**NO_CHECKPOINTS)
    store.append([msg(body=b"a%d" % i) for i in range(10)])
    store._write_checkpoint()
    store.append([msg(body=b"b%d" % i) for i in range(10)])
    crash(store)
    qfile = tmp_path / "store" / "consumequeue" / "T" / "0" / ("%020d" % 16)
    os.unlink(qfile)  # entries 16..19 lost
    os.truncate(tmp_path / "store" / "consumequeue" / "T" / "0" / ("%020d" % 0), 12 * 20 + 7)
    store = open_store()
    assert queue_contents(store)[("T", 0)] == [b"a%d" % i for i in range(10)] + [b"b%d" % i for i in range(10)]


def test_dirty_queue_entries_pointing_past_the_log_end_are_truncated(open_store, tmp_path) -> None:
    store = open_store(**NO_CHECKPOINTS)
    results = store.append([msg(body=b"%d" % i) for i in range(10)])
    crash(store)
    os.truncate(tmp_path / "store" / "commitlog" / ("%020d" % 0), results[6].physical_offset)
    qfile = tmp_path / "store" / "consumequeue" / "T" / "0" / ("%020d" % 0)
    with open(qfile, "ab") as f:  # an entry for a record that never made it
        f.write(ENTRY.pack(10**6, 100, 0))
    store = open_store()
    assert queue_contents(store) == {("T", 0): [b"%d" % i for i in range(6)]}
    assert store.append([msg(body=b"next")])[0].queue_offset == 6


def _write_random_history(store, rng: random.Random) -> list[tuple[list, bool]]:
    """Batches and groups of random sizes; returns (results, is_group) per append."""
    history = []
    while store.commitlog.write_end < 3 * SEG + rng.randrange(SEG):
        batch = [msg(topic=rng.choice(["A", "B"]), queue_id=rng.randrange(3),
                     body=os.urandom(rng.randrange(1, 700)), TAGS=rng.choice(["x", "y"]))
                 for _ in range(rng.randrange(1, 6))]
        group = rng.random() < 0.4
        results = store.append_group(batch) if group else store.append(batch)
        history.append(([(r, m.body) for r, m in zip(results, batch)], group))
    return history


def _expected_after_damage(history, damage_at: int) -> dict[tuple[str, int], list[bytes]]:
    expected: dict[tuple[str, int], list[bytes]] = {}
    for items, group in history:
        units = [items] if group else [[it] for it in items]
        for unit in units:
            if max(r.physical_offset + r.size for r, _ in unit) <= damage_at:
                for r, body in unit:
                    expected.setdefault((r.topic, r.queue_id), []).append(body)
    return expected


def run_torn_tail_trial(open_store, tmp_path, seed: int) -> None:
    rng = random.Random(seed)
    store = open_store(**NO_CHECKPOINTS)
    history = _write_random_history(store, rng)
    last = store.commitlog.segments[-1]
    crash(store)
    damage_at = rng.randrange(last.start, last.end)
    path = last.path
    if rng.random() < 0.5:
        os.truncate(path, damage_at - last.start)
    else:
        with open(path, "r+b") as f:
            f.seek(damage_at - last.start)
            byte = f.read(1)[0]
            f.seek(damage_at - last.start)
            f.write(bytes([byte ^ rng.randrange(1, 256)]))
    store = open_store()
    assert queue_contents(store) == _expected_after_damage(history, damage_at), f"seed {seed}"
    # the recovered store keeps working and offsets stay contiguous
    r = store.append([msg(topic="A", queue_id=0, body=b"after")])[0]
    assert r.queue_offset == len(_expected_after_damage(history, damage_at).get(("A", 0), []))
    store.close()


@pytest.mark.parametrize("seed", range(6))
def test_torn_tail_keeps_complete_records_before_the_damage(open_store, tmp_path, seed) -> None:
    run_torn_tail_trial(open_store, tmp_path, seed)


@pytest.mark.torture
def test_torn_tail_torture(tmp_path) -> None:
    from txmq.broker.store import MessageStore
    from tests.store._helpers import small_config
    for seed in range(1000, 1220):
        opened = []

        def factory(**overrides):
            s = MessageStore(small_config(tmp_path / f"s{seed}" / "store", **overrides))
            opened.append(s)
            return s
        try:
            run_torn_tail_trial(factory, tmp_path, seed)
        finally:
            for s in opened:
                s.close()


def test_deleted_queue_files_are_rebuilt_from_the_whole_log(open_store, tmp_path) -> None:
    import shutil
    store = open_store()
    store.append([msg(body=b"%d" % i, queue_id=i % 2, TAGS="t") for i in range(50)])
    store.close()
    shutil.rmtree(tmp_path / "store" / "consumequeue")
    store = open_store()
    assert store.recovery.records_scanned == 50
    assert queue_contents(store) == {("T", 0): [b"%d" % i for i in range(0, 50, 2)],
                                     ("T", 1): [b"%d" % i for i in range(1, 50, 2)]}


def test_a_flipped_bit_before_the_checkpoint_is_not_rescanned_but_the_record_crc_finds_it(open_store) -> None:
    """Recovery trusts the log up to the checkpoint (its time follows the tail, not the log), and
    reads do not recompute CRCs: a body bit flipped on disk there is kept and read as it is;
    verifying the record (decode_record(verify=True)) names it."""
    from txmq.broker.store.record import RecordCorrupted, decode_record

    store = open_store(**NO_CHECKPOINTS)
    placed = store.append([msg(body=b"body-%d" % i) for i in range(10)])
    store._write_checkpoint()
    crash(store)
    with open(store.commitlog.segments[0].path, "r+b") as f:
        f.seek(placed[3].physical_offset + HEADER_V4_SIZE + 2)  # the third byte of its body
        byte = f.read(1)[0]
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([byte ^ 0x04]))
    store = open_store()
    assert store.recovery.records_scanned == 0 and store.max_offset("T", 0) == 10
    assert store.read_queue("T", 0, 3, 1).messages[0].body == b"bo`y-3"  # the flip, as stored
    raw = store.commitlog.read(placed[3].physical_offset, placed[3].size)
    with pytest.raises(RecordCorrupted, match="CRC mismatch"):
        decode_record(raw, verify=True)


def test_a_clock_that_jumps_back_changes_no_offset_and_loses_nothing(open_store, monkeypatch) -> None:
    """Store times come from the wall clock; queue and physical offsets never do."""
    from types import SimpleNamespace

    from txmq.broker.store import message_store

    store = open_store(**NO_CHECKPOINTS)
    for now in (2_000_000_000.0, 1_000_000_000.0, 1_500_000_000.0):
        monkeypatch.setattr(message_store, "time", SimpleNamespace(time=lambda now=now: now,
                                                                  monotonic=__import__("time").monotonic))
        store.append([msg(body=b"%d" % now)])
    crash(store)
    store = open_store()
    read = store.read_queue("T", 0, 0, 10).messages
    assert [m.queue_offset for m in read] == [0, 1, 2]
    assert [m.store_timestamp for m in read] == [2_000_000_000_000, 1_000_000_000_000, 1_500_000_000_000]
