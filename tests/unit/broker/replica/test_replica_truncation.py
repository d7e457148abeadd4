"""Epoch lookups, fetch-time divergence (leader) and the truncation point (follower)."""

from __future__ import annotations

import pytest

from broker.replica.state import UNKNOWN
from broker.replica.truncation import (
    EpochEndOffset,
    EpochStart,
    FetchOffsetOutOfRange,
    OutOfRangeReset,
    TruncationPoint,
    diverging_epoch_for_fetch,
    end_offset_for,
    out_of_range_reset,
    truncation_point,
)
from minikafka.errors import ErrorCode

CACHE: list[EpochStart] = [(1, 0), (3, 10), (5, 20)]


def eeo(epoch: int, end_offset: int) -> EpochEndOffset:
    return EpochEndOffset(epoch=epoch, end_offset=end_offset)


@pytest.mark.parametrize(
    ("entries", "requested", "expected"),
    [
        pytest.param(CACHE, UNKNOWN, eeo(UNKNOWN, UNKNOWN), id="undefined-epoch"),
        pytest.param(CACHE, 5, eeo(5, 25), id="latest-epoch-ends-at-leo"),
        pytest.param(CACHE, 6, eeo(UNKNOWN, UNKNOWN), id="beyond-latest"),
        pytest.param([], 1, eeo(UNKNOWN, UNKNOWN), id="empty-cache"),
        pytest.param(CACHE, 0, eeo(0, 0), id="below-first-epoch"),
        pytest.param([(2, 4)], 1, eeo(1, 4), id="below-first-epoch-nonzero-start"),
        pytest.param(CACHE, 1, eeo(1, 10), id="known-epoch-ends-at-next-start"),
        pytest.param(CACHE, 3, eeo(3, 20), id="middle-epoch"),
        pytest.param(CACHE, 2, eeo(1, 10), id="unknown-epoch-largest-below"),
        pytest.param(CACHE, 4, eeo(3, 20), id="unknown-epoch-largest-below-2"),
    ],
)
def test_end_offset_for(
    entries: list[EpochStart], requested: int, expected: EpochEndOffset
) -> None:
    assert end_offset_for(entries, requested, 25) == expected


# ---- leader side -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fetch_offset", "last_fetched_epoch", "expected"),
    [
        pytest.param(25, UNKNOWN, None, id="no-epoch-no-check"),
        pytest.param(25, 5, None, id="at-leader-leo-same-epoch"),
        pytest.param(15, 3, None, id="inside-epoch-on-leader"),
        pytest.param(20, 3, None, id="at-end-of-epoch"),
        pytest.param(21, 3, eeo(3, 20), id="follower-has-more-of-epoch-than-leader"),
        pytest.param(12, 2, eeo(1, 10), id="epoch-unknown-to-leader"),
        pytest.param(12, 4, eeo(3, 20), id="epoch-unknown-to-leader-2"),
    ],
)
def test_diverging_epoch_for_fetch(
    fetch_offset: int, last_fetched_epoch: int, expected: EpochEndOffset | None
) -> None:
    got = diverging_epoch_for_fetch(
        local_entries=CACHE,
        log_end_offset=25,
        log_start_offset=0,
        fetch_offset=fetch_offset,
        last_fetched_epoch=last_fetched_epoch,
    )
    assert got == expected


@pytest.mark.parametrize(
    ("entries", "log_start", "fetch_offset", "epoch", "message"),
    [
        pytest.param(CACHE, 0, 30, 6, "last fetched epoch 6", id="epoch-newer-than-leader"),
        pytest.param([], 0, 3, 1, "latest local epoch None", id="leader-cache-empty"),
        pytest.param(CACHE, 12, 11, 3, "below the log start offset 12", id="below-log-start"),
    ],
)
def test_diverging_epoch_for_fetch_out_of_range(
    entries: list[EpochStart], log_start: int, fetch_offset: int, epoch: int, message: str
) -> None:
    with pytest.raises(FetchOffsetOutOfRange, match=message) as err:
        diverging_epoch_for_fetch(
            local_entries=entries,
            log_end_offset=25,
            log_start_offset=log_start,
            fetch_offset=fetch_offset,
            last_fetched_epoch=epoch,
        )
    assert err.value.code == ErrorCode.OFFSET_OUT_OF_RANGE


# ---- follower side -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "leo", "diverging", "expected"),
    [
        pytest.param(
            [(1, 0), (2, 11)],
            15,
            eeo(1, 21),
            TruncationPoint(offset=11, complete=True),
            id="kip279-same-epoch-follower-end-smaller",
        ),
        pytest.param(
            [(1, 0)],
            15,
            eeo(1, 12),
            TruncationPoint(offset=12, complete=True),
            id="same-epoch-leader-end-smaller",
        ),
        pytest.param(
            [(1, 0)],
            9,
            eeo(1, 12),
            TruncationPoint(offset=9, complete=True),
            id="same-epoch-capped-by-leo",
        ),
        pytest.param(
            [(0, 0), (1, 3), (3, 6)],
            8,
            eeo(2, 10),
            TruncationPoint(offset=6, complete=False),
            id="leader-epoch-unknown-locally-intermediate",
        ),
        pytest.param(
            [(0, 0), (3, 6)],
            5,
            eeo(2, 10),
            TruncationPoint(offset=5, complete=False),
            id="intermediate-capped-by-leo",
        ),
        pytest.param(
            [],
            8,
            eeo(2, 5),
            TruncationPoint(offset=5, complete=True),
            id="empty-cache-uses-leader-offset",
        ),
        pytest.param(
            [(1, 0)],
            8,
            eeo(3, 5),
            TruncationPoint(offset=5, complete=True),
            id="epoch-beyond-local-latest-uses-leader-offset",
        ),
        pytest.param(
            [(4, 2)],
            8,
            eeo(2, 5),
            TruncationPoint(offset=2, complete=True),
            id="below-first-local-epoch",
        ),
    ],
)
def test_truncation_point(
    entries: list[EpochStart], leo: int, diverging: EpochEndOffset, expected: TruncationPoint
) -> None:
    assert (
        truncation_point(local_entries=entries, log_end_offset=leo, diverging=diverging) == expected
    )


@pytest.mark.parametrize(
    "diverging",
    [
        pytest.param(eeo(UNKNOWN, 5), id="no-epoch"),
        pytest.param(eeo(2, UNKNOWN), id="no-end-offset"),
    ],
)
def test_truncation_point_refuses_undefined_answer(diverging: EpochEndOffset) -> None:
    with pytest.raises(ValueError, match="not a diverging epoch"):
        truncation_point(local_entries=CACHE, log_end_offset=25, diverging=diverging)


@pytest.mark.parametrize(
    ("leo", "leader_start", "leader_end", "expected"),
    [
        pytest.param(
            30, 0, 20, OutOfRangeReset(truncate_to=20, start_at=None), id="leader-shorter-unclean"
        ),
        pytest.param(
            5, 10, 20, OutOfRangeReset(truncate_to=None, start_at=10), id="retention-passed-us"
        ),
        pytest.param(
            15, 10, 20, OutOfRangeReset(truncate_to=15, start_at=None), id="inside-leader-log"
        ),
    ],
)
def test_out_of_range_reset(
    leo: int, leader_start: int, leader_end: int, expected: OutOfRangeReset
) -> None:
    got = out_of_range_reset(
        log_end_offset=leo, leader_log_start_offset=leader_start, leader_log_end_offset=leader_end
    )
    assert got == expected
