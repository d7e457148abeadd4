"""The consumer's reaction to a diverging epoch (KIP-320)."""

from __future__ import annotations

import pytest

from client.offset_rules import OffsetReset, TruncationAction, truncation_action


@pytest.mark.parametrize(
    ("position", "end_offset", "reset", "auto_reset", "expected"),
    [
        (100, 120, False, "latest", TruncationAction(kind="refetch", offset=100, epoch=3)),
        (100, 100, False, "none", TruncationAction(kind="refetch", offset=100, epoch=3)),
        (120, 100, False, "earliest", TruncationAction(kind="raise", offset=100, epoch=3)),
        (120, 100, True, "earliest", TruncationAction(kind="reset", offset=100, epoch=3)),
        (120, 100, True, "none", TruncationAction(kind="raise", offset=100, epoch=3)),
    ],
    ids=[
        "not-consumed-yet",
        "exactly-at-end",
        "consumed-truncated-raises",
        "reset-when-asked",
        "none-never-resets",
    ],
)
def test_truncation_action(
    position: int, end_offset: int, reset: bool, auto_reset: OffsetReset, expected: TruncationAction
) -> None:
    assert (
        truncation_action(
            position=position,
            diverging_epoch=3,
            end_offset=end_offset,
            reset_on_truncation=reset,
            auto_offset_reset=auto_reset,
        )
        == expected
    )
