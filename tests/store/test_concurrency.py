"""Reads run concurrently with the single writer and never see a partial batch or a torn record."""

from __future__ import annotations

import threading

from tests.store._helpers import msg


def test_readers_see_only_complete_records_while_a_writer_appends(open_store) -> None:
    store = open_store(commitlog_segment_bytes=64 * 1024, consume_queue_entries_per_file=64)
    stop = threading.Event()
    errors: list[str] = []
    total = 3000

    def writer() -> None:
        for i in range(0, total, 10):
            store.append([msg(body=b"%06d" % j * (1 + j % 50)) for j in range(i, i + 10)])
        stop.set()

    def reader() -> None:
        offset = 0
        while offset < total:
            read = store.read_queue("T", 0, offset, 97)
            for m in read.messages:
                want = b"%06d" % m.queue_offset * (1 + m.queue_offset % 50)
                if m.body != want:
                    errors.append(f"offset {m.queue_offset}: body mismatch")
                    return
            if read.messages and read.messages[0].queue_offset != offset:
                errors.append(f"asked {offset}, got {read.messages[0].queue_offset}")
                return
            offset = read.next_offset
            if not read.messages:
                stop.wait(0.001)  # caught up with the writer

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert store.max_offset("T", 0) == total


def test_ipv6_hosts_round_trip_through_the_store(open_store) -> None:
    store = open_store(store_host=("::1", 10911))
    m = msg(body=b"v6")
    m.born_host = ("2001:db8::7", 4242)
    r = store.append([m])[0]
    got = store.read_at(r.physical_offset)
    assert got.born_host == ("2001:db8::7", 4242) and got.store_host == ("::1", 10911)
    assert store.get_by_message_id(r.msg_id).body == b"v6"
    assert store.offset_for_timestamp("T", 0, got.store_timestamp) == 0
