"""Sparse offset index: lookup equals a linear scan; on-disk validation."""

from __future__ import annotations

import tempfile
from array import array
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.index import OffsetIndex, floor_lookup


def linear_floor(pairs: list[tuple[int, int]], target: int) -> tuple[int, int]:
    found = (-1, 0)
    for offset, position in pairs:
        if offset <= target:
            found = (offset, position)
    return found


@given(
    st.lists(st.tuples(st.integers(1, 50), st.integers(1, 5000)), max_size=60),
    st.integers(-5, 3000),
)
def test_lookup_equals_linear_scan(steps: list[tuple[int, int]], target: int) -> None:
    pairs: list[tuple[int, int]] = []
    offset = position = 0
    for offset_step, position_step in steps:
        pairs.append((offset, position))
        offset += offset_step
        position += position_step
    offsets = array("q", [o for o, _ in pairs])
    positions = array("q", [p for _, p in pairs])
    assert floor_lookup(offsets, positions, target) == linear_floor(pairs, target)


@settings(deadline=None)
@given(st.lists(st.integers(1, 100), min_size=1, max_size=30), st.integers(0, 4000))
def test_persist_load_and_truncate(steps: list[int], cut: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        index = OffsetIndex(Path(tmp) / "00000000000000000000.index")
        position = 0
        for i, step in enumerate(steps):
            index.append(10 * i, position)
            position += step
        index.persist()
        loaded = OffsetIndex(index.path)
        assert loaded.load(0, position + 1)
        assert list(loaded.offsets) == list(index.offsets)
        assert list(loaded.positions) == list(index.positions)
        loaded.truncate_to_position(cut)
        assert all(p < cut for p in loaded.positions)
        assert len(loaded) == sum(1 for p in index.positions if p < cut)


@pytest.mark.parametrize(
    ("raw_pairs", "extra", "log_size"),
    [
        ([(0, 0), (5, 100)], b"\x00", 1000),
        ([(5, 100), (0, 0)], b"", 1000),
        ([(0, 0), (5, 100)], b"", 100),
        ([(0, 0), (0, 100)], b"", 1000),
    ],
    ids=["partial-entry", "decreasing", "position-past-log-end", "repeated-offset"],
)
def test_invalid_index_file_is_rejected(
    tmp_path: Path, raw_pairs: list[tuple[int, int]], extra: bytes, log_size: int
) -> None:
    path = tmp_path / "00000000000000000000.index"
    data = array("q", [v for pair in raw_pairs for v in pair])
    path.write_bytes(data.tobytes() + extra)
    index = OffsetIndex(path)
    assert not index.load(0, log_size)
    assert len(index) == 0


def test_missing_index_file_is_rejected(tmp_path: Path) -> None:
    assert not OffsetIndex(tmp_path / "00000000000000000000.index").load(0, 10)


def per_batch_entries(
    index: OffsetIndex,
    positions: list[int],
    base_offsets: list[int],
    start: int,
    total: int,
    since: int,
    interval: int,
) -> int:
    """The per-batch walk `LogSegment.append` used before `append_sparse` (reference)."""
    index_empty = not len(index)
    previous = 0
    for relative, base_offset in zip(positions, base_offsets, strict=True):
        since += relative - previous
        previous = relative
        if since >= interval or index_empty:
            index.append(base_offset, start + relative)
            since = 0
            index_empty = False
    return since + total - previous


@given(
    st.lists(st.tuples(st.integers(1, 3000), st.integers(1, 20)), max_size=40),
    st.lists(st.tuples(st.integers(1, 50), st.integers(1, 5000)), max_size=3),
    st.integers(0, 10_000),
    st.sampled_from([-1, 0, 1, 256, 4096]),
    st.integers(-2, 2),
)
def test_sparse_append_equals_the_per_batch_walk(
    batches: list[tuple[int, int]],
    earlier: list[tuple[int, int]],
    since: int,
    interval: int,
    overlap: int,
) -> None:
    """Bisecting from entry to entry adds the same entries, and leaves the same byte count
    since the last entry, as a walk over every batch: the `.index` bytes do not change.
    `earlier` entries precede the append (`overlap` moves it onto them, where `append`'s
    rule refuses entries that do not grow)."""
    fast, slow = (OffsetIndex(Path("unused.index")) for _ in range(2))
    offset = position = 0
    for offset_step, position_step in earlier:
        for index in (fast, slow):
            index.append(offset, position)
        offset += offset_step
        position += position_step
    positions: list[int] = []
    base_offsets: list[int] = []
    total = 0
    for size, records in batches:
        positions.append(total)
        base_offsets.append(offset + overlap)
        total += size
        offset += records
    start = position + overlap
    got = fast.append_sparse(
        positions, base_offsets, start, total, bytes_since_entry=since, interval_bytes=interval
    )
    expected = per_batch_entries(slow, positions, base_offsets, start, total, since, interval)
    assert (got, list(fast.offsets), list(fast.positions)) == (
        expected,
        list(slow.offsets),
        list(slow.positions),
    )
