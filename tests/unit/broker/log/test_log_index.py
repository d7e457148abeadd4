"""Sparse offset index: lookup equals a linear scan; on-disk validation."""

from __future__ import annotations

import tempfile
from array import array
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.log.index import OffsetIndex, floor_lookup
from broker.log.segment import index_positions


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
    positions: list[int], total: int, since: int, interval: int, index_empty: bool
) -> tuple[list[int], int]:
    """The per-batch walk `LogSegment.append` used before `index_positions` (reference)."""
    chosen: list[int] = []
    previous = 0
    for i, relative in enumerate(positions):
        since += relative - previous
        previous = relative
        if since >= interval or index_empty:
            chosen.append(i)
            since = 0
            index_empty = False
    return chosen, since + total - previous


@given(
    st.lists(st.integers(1, 3000), max_size=40),
    st.integers(0, 10_000),
    st.sampled_from([-1, 0, 1, 256, 4096]),
    st.booleans(),
)
def test_index_positions_equals_the_per_batch_walk(
    sizes: list[int], since: int, interval: int, index_empty: bool
) -> None:
    """The bisecting entry choice picks the same batches, and leaves the same byte count
    since the last entry, as a walk over every batch: the `.index` bytes do not change."""
    positions: list[int] = []
    total = 0
    for size in sizes:
        positions.append(total)
        total += size
    assert index_positions(
        positions, total, bytes_since_entry=since, interval_bytes=interval, index_empty=index_empty
    ) == per_batch_entries(positions, total, since, interval, index_empty)
