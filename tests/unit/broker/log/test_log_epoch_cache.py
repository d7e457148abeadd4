"""Leader epoch cache: Kafka's endOffsetFor cases, monotonicity under any op sequence."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.log.checkpoint import write_epochs
from broker.log.epoch_cache import (
    EpochEntry,
    LeaderEpochCache,
    assign_entry,
    end_offset_for,
    epoch_for_offset,
    truncate_entries_from_end,
    truncate_entries_from_start,
)
from broker.log.errors import LogStorageError


def entries(*pairs: tuple[int, int]) -> list[EpochEntry]:
    return [EpochEntry(e, s) for e, s in pairs]


# Cases from Kafka's LeaderEpochFileCacheTest (endOffsetFor).
END_OFFSET_CASES = [
    pytest.param([], 0, 100, (-1, -1), id="empty-cache"),
    pytest.param([(2, 6)], -1, 100, (-1, -1), id="undefined-epoch-requested"),
    pytest.param([(2, 6)], 2, 100, (2, 100), id="latest-epoch-gets-log-end"),
    pytest.param([(2, 6), (3, 8)], 3, 100, (3, 100), id="latest-of-two"),
    pytest.param([(2, 6), (5, 10)], 2, 100, (2, 10), id="previous-epoch-ends-at-next-start"),
    pytest.param([(2, 6), (5, 10)], 3, 100, (2, 10), id="missing-epoch-gets-floor-epoch"),
    pytest.param([(1, 0), (3, 21)], 2, 30, (1, 21), id="kip-279-a-b-a"),
    pytest.param([(5, 11), (6, 12), (7, 13)], 4, 0, (4, 11), id="below-first-epoch"),
    pytest.param([(2, 6)], 3, 100, (-1, -1), id="above-latest-epoch"),
    pytest.param([(0, 0), (1, 4), (4, 9), (6, 20)], 5, 30, (4, 20), id="gap-in-the-middle"),
]


@pytest.mark.parametrize(("cached", "requested", "leo", "expected"), END_OFFSET_CASES)
def test_end_offset_for(
    cached: list[tuple[int, int]], requested: int, leo: int, expected: tuple[int, int]
) -> None:
    assert end_offset_for(entries(*cached), requested, leo) == expected


ASSIGN_CASES = [
    pytest.param([], (0, 0), [(0, 0)], id="first"),
    pytest.param([(0, 0)], (0, 5), [(0, 0)], id="same-epoch-later-start-ignored"),
    pytest.param([(0, 5)], (0, 2), [(0, 2)], id="same-epoch-earlier-start-replaces"),
    pytest.param([(0, 0)], (2, 5), [(0, 0), (2, 5)], id="new-epoch"),
    pytest.param([(0, 0), (2, 5)], (1, 7), [(0, 0), (1, 7)], id="lower-epoch-drops-higher"),
    pytest.param([(0, 0), (2, 5)], (3, 4), [(0, 0), (3, 4)], id="lower-start-drops-entry"),
    pytest.param([(1, 3), (2, 5)], (4, 0), [(4, 0)], id="start-below-all"),
]


@pytest.mark.parametrize(("cached", "new", "expected"), ASSIGN_CASES)
def test_assign(
    cached: list[tuple[int, int]], new: tuple[int, int], expected: list[tuple[int, int]]
) -> None:
    assert assign_entry(entries(*cached), *new) == entries(*expected)


@pytest.mark.parametrize(
    ("offset", "expected"),
    [(0, None), (4, 1), (5, 1), (9, 1), (10, 3), (99, 3)],
    ids=["before-first", "first-start", "inside-first", "end-first", "second", "beyond"],
)
def test_epoch_for_offset(offset: int, expected: int | None) -> None:
    assert epoch_for_offset(entries((1, 4), (3, 10)), offset) == expected


@pytest.mark.parametrize(
    ("end", "expected"),
    [(100, [(1, 4), (3, 10)]), (10, [(1, 4)]), (5, [(1, 4)]), (4, []), (0, [])],
    ids=["past-end", "at-second", "inside-first", "at-first", "zero"],
)
def test_truncate_from_end(end: int, expected: list[tuple[int, int]]) -> None:
    assert truncate_entries_from_end(entries((1, 4), (3, 10)), end) == entries(*expected)


@pytest.mark.parametrize(
    ("start", "expected"),
    [
        (0, [(1, 4), (3, 10)]),
        (4, [(1, 4), (3, 10)]),
        (7, [(1, 7), (3, 10)]),
        (10, [(3, 10)]),
        (15, [(3, 15)]),
    ],
    ids=["before-first", "at-first", "inside-first", "at-second", "inside-last"],
)
def test_truncate_from_start(start: int, expected: list[tuple[int, int]]) -> None:
    assert truncate_entries_from_start(entries((1, 4), (3, 10)), start) == entries(*expected)


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("assign"), st.integers(0, 20), st.integers(0, 200)),
        st.tuples(st.just("end"), st.integers(0, 200), st.just(0)),
        st.tuples(st.just("start"), st.integers(0, 200), st.just(0)),
    ),
    max_size=40,
)


@given(OPS)
def test_entries_stay_strictly_monotonic(ops: list[tuple[str, int, int]]) -> None:
    current: list[EpochEntry] = []
    for op, a, b in ops:
        if op == "assign":
            current = assign_entry(current, a, b)
            assert current[-1] == EpochEntry(a, b) or (
                current[-1].epoch == a and current[-1].start_offset <= b
            )
        elif op == "end":
            current = truncate_entries_from_end(current, a)
            assert all(e.start_offset < a for e in current)
        else:
            current = truncate_entries_from_start(current, a)
            assert all(e.start_offset >= a for e in current)
        for before, after in itertools.pairwise(current):
            assert before.epoch < after.epoch
            assert before.start_offset < after.start_offset


def test_cache_persists_and_reloads(tmp_path: Path) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    cache = LeaderEpochCache(path)
    cache.assign(0, 0)
    cache.assign(3, 17)
    cache.flush()
    assert path.read_text() == "0\n2\n0 0\n3 17\n"
    reloaded = LeaderEpochCache.load(path)
    assert reloaded.entries() == cache.entries()
    assert reloaded.latest_epoch() == 3
    assert reloaded.end_offset_for(0, 40) == (0, 17)


@pytest.mark.parametrize(
    "pairs",
    [[(3, 5), (2, 9)], [(1, 5), (2, 5)], [(-1, 0)]],
    ids=["epoch-goes-down", "start-repeats", "negative"],
)
def test_load_rejects_non_monotonic_checkpoint(
    tmp_path: Path, pairs: list[tuple[int, int]]
) -> None:
    path = tmp_path / "leader-epoch-checkpoint"
    write_epochs(path, pairs)
    with pytest.raises(LogStorageError, match="leader epoch checkpoint"):
        LeaderEpochCache.load(path)
