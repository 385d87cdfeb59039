"""Split the property text of a pull's records into (name, value) pairs, column-wise.

RocketMQ stores a record's properties as one string, `name \\x01 value \\x02 ...`.
A pull turns them into columns (tag, keys, message id, transaction id, the user
properties map), so every pair of the batch must be found, and every name
classified as a system property or not, without a Python step per message.

Two ways to the same `PropertyPairs`:

- **shared layouts** (the common case): the records of a queue usually come from
  a few producers that set the same properties with values of the same widths
  (a fixed-width UNIQ_KEY, one transaction id per COMMIT, one sender per task).
  Records whose property text has the same length are checked as one matrix:
  when every row has its separators where the first row has them and the same
  names, that row's pairs are the layout of all of them. Only that first row is
  classified; the rest is arithmetic on positions.
- **general**: the separators of the whole text are located by one byte scan, and
  each name is classified by a hash lookup. Used for whatever the layouts don't
  cover (values of varying width, optional properties).

Names and values never contain a separator (the store refuses such properties
on append); a pair without exactly one \\x01 is reported as corruption.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from txmq.broker.errors import StoreError
from txmq.broker.store.property_names import SYSTEM_PROPERTIES
from txmq.broker.store.record_columns import RecordColumns, as_utf8, byte_rows, gather_binary, values_and_offsets

SYSTEM_NAMES = sorted(SYSTEM_PROPERTIES)
SYSTEM_NAME_SET = pa.array(SYSTEM_NAMES, pa.string())
SYSTEM_CODE = {name: code for code, name in enumerate(SYSTEM_NAMES)}
NOT_SYSTEM = -1

MAX_LAYOUTS = 8  # distinct property-text lengths tried as shared layouts; more means no common layout
NAME_SEP, PAIR_SEP = 1, 2


@dataclass
class PropertyPairs:
    """Every property of a batch, in record then on-disk order: which system property each
    name is (a small integer, so finding a property is a numpy comparison, not a string
    comparison over every pair), and where its value is.

    `pieces` is the batch's property text cut into name, separator, value, separator
    of every pair (pair i's value is piece 4i + 2). `code` is each name's index in
    SYSTEM_NAMES (NOT_SYSTEM otherwise); `user` lists the pairs that are user
    properties (not system, not hidden by a "__" prefix).
    """

    pieces: pa.StringArray
    code: np.ndarray  # int per pair
    row: np.ndarray  # the record each pair belongs to (ascending)
    user: np.ndarray  # indices of user-property pairs (ascending)

    def values(self, pairs: np.ndarray, missing: np.ndarray | None = None) -> pa.StringArray:
        """The values of `pairs` (indices of pairs; null where `missing`)."""
        return self.pieces.take(pa.array(4 * pairs + 2, mask=missing))

    def names(self, pairs: np.ndarray) -> pa.StringArray:
        return _names(self.pieces, pairs)

    def pairs_named(self, name: str) -> np.ndarray:
        return np.flatnonzero(self.code == SYSTEM_CODE[name])

    def by_row(self, n: int, name: str) -> pa.StringArray:
        """Value of system property `name` per record (null where absent)."""
        hits = self.pairs_named(name)
        if not len(hits):
            return pa.nulls(n, pa.string())
        pos = np.full(n, -1, dtype=np.int64)
        pos[self.row[hits]] = hits
        return self.values(np.maximum(pos, 0), pos < 0)


def split_properties(records: RecordColumns) -> PropertyPairs:
    """The property pairs of every record (see the module doc)."""
    n = records.count
    has_props = records.props_len > 0
    # each non-empty text with the \x02 that ends its last pair (the record has it before
    # the CRC property), so every pair is "name \x01 value \x02" and pairs tile the text
    with_end = np.where(has_props, records.props_len + 1, 0)
    text, row_at = values_and_offsets(as_utf8(gather_binary(records.tail, records.props_at, with_end), "properties"))
    shared = _shared_layout_pairs(text, row_at, n)
    if shared is not None:
        return shared
    return _scanned_pairs(text, row_at, has_props, n)


def _pieces(text: np.ndarray, offsets: np.ndarray) -> pa.StringArray:
    """Name, separator, value, separator of every pair as one string array over `text` itself
    (offsets only, no copy): the pairs tile `text`. UTF-8 was checked on the whole text
    (cutting at ASCII separators keeps it valid)."""
    return pa.Array.from_buffers(pa.string(), len(offsets) - 1, [None, pa.py_buffer(offsets), pa.py_buffer(text)])


def _pair_bounds(text: np.ndarray) -> np.ndarray | None:
    """Where each piece of each pair in `text` starts (name, \\x01, value, \\x02: 4 int32 per
    pair), then len(text): the offsets of the pieces as one string array. From one scan for
    separators; None when a pair is not name \\x01 value \\x02."""
    seps = np.flatnonzero(text <= PAIR_SEP)  # one pass; a \x00 inside a value is neither separator
    kinds = text[seps]
    pair_end = seps[kinds == PAIR_SEP]
    name_end = seps[kinds == NAME_SEP]
    k = len(pair_end)
    pair_at = np.zeros(k, dtype=np.int64)
    pair_at[1:] = pair_end[:-1] + 1
    if len(name_end) != k or (k and ((name_end < pair_at).any() or (name_end > pair_end).any())):
        return None
    offsets = np.empty(4 * k + 1, dtype=np.int32)
    offsets[0:4 * k:4] = pair_at
    offsets[1:4 * k:4] = name_end
    offsets[2:4 * k:4] = name_end + 1
    offsets[3:4 * k:4] = pair_end
    offsets[4 * k] = len(text)
    return offsets


def _scanned_pairs(text: np.ndarray, row_at: np.ndarray, has_props: np.ndarray, n: int) -> PropertyPairs:
    """The pairs found by one scan of the whole text for separators, names classified by hash lookups."""
    offsets = _pair_bounds(text)
    if offsets is None or (text[row_at[1:][has_props] - 1] != PAIR_SEP).any():
        raise StoreError("a record has a malformed property (no name separator, or not name\\x01value\\x02)")
    pieces = _pieces(text, offsets)
    pair_end = offsets[3:-1:4]
    row = np.repeat(np.arange(n, dtype=np.int64), np.diff(np.searchsorted(pair_end, row_at)))
    code = _codes(_names(pieces, np.arange(len(pair_end), dtype=np.int64)))
    return PropertyPairs(pieces, code, row, _user_pairs(pieces, code))


@dataclass
class _Layout:
    """The pairs of one row's property text, which other rows of its length group follow."""

    bounds: np.ndarray  # int32, 4 per pair: name start, name end, value start, value end (from the text start)
    code: np.ndarray
    user: np.ndarray  # bool per pair: a user property

    @property
    def pairs(self) -> int:
        return len(self.code)


def _shared_layout_pairs(text: np.ndarray, row_at: np.ndarray, n: int) -> PropertyPairs | None:
    """The pairs when every record's text follows one of a few layouts (see the module doc),
    else None."""
    lengths = np.diff(row_at)
    if not n or not lengths.any():
        return None
    first = int(lengths[0])
    if (lengths == first).all():
        layout = _layout_of(text[:n * first].reshape(n, first))
        if layout is None:
            return None
        offsets = np.empty(4 * n * layout.pairs + 1, dtype=np.int32)
        offsets[:-1] = (row_at[:-1, None].astype(np.int32) + layout.bounds).reshape(-1)
        offsets[-1] = len(text)
        code = np.tile(layout.code, n)
        row = np.repeat(np.arange(n, dtype=np.int64), layout.pairs)
        return PropertyPairs(_pieces(text, offsets), code, row, np.flatnonzero(np.tile(layout.user, n)))
    distinct = np.unique(lengths)
    if len(distinct) > MAX_LAYOUTS:
        return None
    groups = []
    for length in distinct.tolist():
        rows = np.flatnonzero(lengths == length)
        layout = _layout_of(byte_rows(text, row_at[rows], length)) if length else _EMPTY_LAYOUT
        if layout is None:
            return None
        groups.append((rows, layout))
    return _placed_pairs(text, row_at, groups, n)


def _layout_of(block: np.ndarray) -> _Layout | None:
    """The layout of the first row of `block` (rows of one length) if every row follows it:
    bytes <= \x02 exactly where the first row has its separators, the same separators
    and the same names. Two passes over the block, whatever the number of pairs."""
    template = block[0]
    offsets = _pair_bounds(template)
    if offsets is None or len(offsets) == 1 or offsets[-2] != len(template) - 1:
        return None  # malformed, or not ending with a pair: the general path decides
    bounds = offsets[:-1]
    pair_at, name_end = bounds[0::4].tolist(), bounds[1::4].tolist()
    constant = template <= PAIR_SEP  # separators (and any \x00, which every row must then share) and names
    for start, end in zip(pair_at, name_end):
        constant[start:end] = True
    same = (block == template).all(axis=0)  # per column: every row has the first row's byte
    if not same[constant].all() or (block.min(axis=0)[~constant] <= PAIR_SEP).any():
        return None
    names = [bytes(template[s:e]).decode() for s, e in zip(pair_at, name_end)]
    code = np.array([SYSTEM_CODE.get(name, NOT_SYSTEM) for name in names], dtype=np.int64)
    user = np.array([name not in SYSTEM_CODE and not name.startswith("__") for name in names], dtype=bool)
    return _Layout(bounds, code, user)


_EMPTY_LAYOUT = _Layout(np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=bool))


def _placed_pairs(text: np.ndarray, row_at: np.ndarray, groups: list[tuple[np.ndarray, _Layout]], n: int
                  ) -> PropertyPairs:
    """The pairs of records in several length groups, each row's placed at its text start
    plus its group's layout, in record order."""
    per_row = np.zeros(n, dtype=np.int64)
    for rows, layout in groups:
        per_row[rows] = layout.pairs
    first_pair = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(per_row, out=first_pair[1:])
    k = int(first_pair[-1])
    offsets = np.empty(4 * k + 1, dtype=np.int32)
    offsets[-1] = len(text)
    code = np.empty(k, dtype=np.int64)
    user = np.empty(k, dtype=bool)
    for rows, layout in groups:
        if not layout.pairs:
            continue
        slots = (first_pair[rows][:, None] + np.arange(layout.pairs)).reshape(-1)
        pieces_at = (4 * first_pair[rows][:, None] + np.arange(4 * layout.pairs)).reshape(-1)
        offsets[pieces_at] = (row_at[rows][:, None] + layout.bounds).reshape(-1)
        code[slots] = np.tile(layout.code, len(rows))
        user[slots] = np.tile(layout.user, len(rows))
    row = np.repeat(np.arange(n, dtype=np.int64), per_row)
    return PropertyPairs(_pieces(text, offsets), code, row, np.flatnonzero(user))


def _codes(names: pa.StringArray) -> np.ndarray:
    return pc.fill_null(pc.index_in(names, value_set=SYSTEM_NAME_SET), NOT_SYSTEM).to_numpy().astype(np.int64)


def _names(pieces: pa.StringArray, pairs: np.ndarray) -> pa.StringArray:
    return pieces.take(pa.array(4 * pairs))


def _user_pairs(pieces: pa.StringArray, code: np.ndarray) -> np.ndarray:
    """Pairs that are neither a system name nor hidden (a name starting with "__")."""
    candidates = np.flatnonzero(code == NOT_SYSTEM)
    if not len(candidates):
        return candidates
    hidden = pc.starts_with(_names(pieces, candidates), "__").to_numpy(zero_copy_only=False)
    return candidates[~hidden]
