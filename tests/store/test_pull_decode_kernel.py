"""The compiled pull decode (store/pull_decode_kernel.py) takes well-formed records and leaves
everything else to the numpy decode, which names the problem.

Its output is checked against the per-record decode in test_pull_columnar.py (every
test there runs with both decodes); here: that it really is the compiled decode that
answered, and when it steps aside.
"""

from __future__ import annotations

import pytest

from txmq.broker.errors import StoreError
from txmq.broker.store.pull_decode_kernel import pull_batch_compiled
from txmq.broker.server.native_pull import build_pull_batch, pull_batch
from txmq.broker.store import Message, MessageStore, StoreConfig
from txmq.broker.store.columnar_read import read_queue_bytes
from txmq.broker.store.message import PROP_KEYS, PROP_TAGS, PROP_TRANSACTION_ID, PROP_UNIQ_KEY

IPV4_HOST = ("127.0.0.1", 10911)


@pytest.fixture
def open_store(tmp_path):
    """open_store(store_host) -> a store on tmp_path, closed at the end of the test."""
    opened: list[MessageStore] = []

    def factory(store_host=IPV4_HOST) -> MessageStore:
        opened.append(MessageStore(StoreConfig(tmp_path / "store", store_host=store_host)))
        return opened[-1]

    yield factory
    for store in opened:
        store.close()


def compiled(store: MessageStore, topic: str = "orders", queue_id: int = 0):
    read = read_queue_bytes(store, topic, queue_id, 0, 1000)
    return pull_batch_compiled(read.data, read.record_at, read.phys, read.sizes, topic)


def assert_compiled_like_the_per_record_decode(store: MessageStore, messages: list[Message]) -> None:
    """Append `messages` to orders:0; the compiled decode answers their pull, with the batch of
    the per-record decode."""
    store.append(messages)
    batch = compiled(store)
    assert batch is not None
    assert batch.equals(build_pull_batch(store.read_queue("orders", 0, 0, 1000).messages))


def assert_left_to_the_numpy_decode(store: MessageStore, error: str) -> None:
    """The compiled decode steps aside, and the pull raises the numpy decode's StoreError."""
    assert compiled(store) is None
    with pytest.raises(StoreError, match=error):
        pull_batch(store, "orders", 0, 0, 10)


def varied_messages(n: int) -> list[Message]:
    """Tags, keys, client ids, transaction ids and user properties, each sometimes missing or empty."""
    out = []
    for i in range(n):
        props = {"color": "red" if i % 2 else "blue", "ключ": "значение ✓"}
        if i % 3:
            props[PROP_TAGS] = f"tag{i % 4}"
        if i % 4:
            props[PROP_KEYS] = " ".join(f"k{j}" for j in range(i % 9))
        if i % 5:
            props[PROP_UNIQ_KEY] = "%032X" % i if i % 7 else ""
        if i % 2:
            props[PROP_TRANSACTION_ID] = f"tx-{i // 10}"
        out.append(Message("orders", b"body-%d" % i * (i % 40 + 1), queue_id=0, properties=props))
    return out


@pytest.mark.parametrize("store_host", [IPV4_HOST, ("2001:db8::7", 10911)])
def test_the_compiled_decode_answers_well_formed_records_like_the_per_record_decode(open_store, store_host):
    assert_compiled_like_the_per_record_decode(open_store(store_host), varied_messages(300))


def test_the_compiled_decode_reads_nul_bytes_as_text_and_finds_separators_anywhere_in_a_word(open_store):
    """Its separator search reads eight bytes a step: names and values of every length up to
    a few words, so each separator falls at every place in a word, some with \\x00 bytes
    (text, not separators) before or after it."""
    messages = []
    for i in range(40):
        props = {"n" * (1 + i % 17): "v" * (i % 19), "x\x00" * (i % 3) + "y": "\x00" * (i % 5) + "é" * (i % 4)}
        messages.append(Message("orders", b"b", queue_id=0, properties=props))
    assert_compiled_like_the_per_record_decode(open_store(), messages)


def test_a_name_like_the_one_at_its_place_in_the_record_before_is_not_taken_for_it(open_store):
    """The decode reuses a name's kind when the record before had the same name at the same
    place: names one byte or one length apart from their predecessor must still be told apart."""
    variants = [(PROP_TAGS, PROP_UNIQ_KEY, PROP_KEYS), ("TAGZ", "UNIQ_KEX", "KEYSS"), ("TAG", "UNIQ_KE", PROP_KEYS),
                (PROP_TAGS, "UNIQ_KEYUNIQ_KEY", "KEY"), ("T", PROP_UNIQ_KEY, PROP_TRANSACTION_ID)]
    messages = [Message("orders", b"b", queue_id=0,
                        properties={name: f"v{i}-{j}" for j, name in enumerate(variants[i % len(variants)])})
                for i in range(50)]
    assert_compiled_like_the_per_record_decode(open_store(), messages)


def test_records_with_more_keys_and_properties_than_first_planned_for_still_decode(open_store):
    store = open_store()
    props = {PROP_KEYS: " ".join(f"k{j}" for j in range(40)), **{f"p{j}": str(j) for j in range(40)}}
    store.append([Message("orders", b"x", queue_id=0, properties=props)])
    batch = compiled(store)
    assert batch is not None
    assert batch.column("keys").to_pylist() == [[f"k{j}" for j in range(40)]]
    assert batch.column("properties").to_pylist() == [[(f"p{j}", str(j)) for j in range(40)]]


def test_a_damaged_record_is_left_to_the_numpy_decode_which_names_it(open_store):
    store = open_store()
    store.append([Message("orders", b"hello", properties={"a": "b"})])
    store.commitlog.segments[0].write_at(4, b"\0\0\0\0")  # the first record's magic code
    assert_left_to_the_numpy_decode(store, "does not match the CommitLog")


def test_a_property_text_that_is_not_utf8_is_left_to_the_numpy_decode_which_names_it(open_store):
    store = open_store()
    store.append([Message("orders", b"hello", properties={"colour": "red"})])
    seg = store.commitlog.segments[0]
    seg.write_at(seg.read(0, seg.end).index(b"red"), b"\xff")
    assert_left_to_the_numpy_decode(store, "UTF-8")


def test_a_pull_of_one_record_is_decoded_by_the_compiled_pass(open_store):
    store = open_store()
    store.append([Message("orders", b"only one")])
    assert compiled(store).column("body").to_pylist() == [b"only one"]
