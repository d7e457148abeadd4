"""benchmarks.breakdown: joining the brokers' stage traces with the consumer's records."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.breakdown import RESPONSE_STAGE, Event, analyze, read_events, text

MS = 1_000_000  # ns


def ev(at_ms: float, kind: str, a: int, b: int = 0, c: int = 0) -> Event:
    return Event(int(at_ms * MS), kind, a, b, c)


#: One produce of offsets [0, 10) received at t=10 ms and appended at 11; follower 2
#: reports at 16, follower 3 (the one the HW waits for) at 18; HW at 18.5.
EVENTS = [
    ev(11, "append", 0, 10, 10 * MS),
    ev(12, "fsend", 2, 0),
    ev(12.5, "fsend", 3, 0),
    ev(13, "frecv", 2, 0),
    ev(14, "frecv", 3, 0),
    ev(14.5, "fapp", 2, 0, 10),
    ev(15, "fapp", 3, 0, 10),
    ev(16, "ffetch", 2, 10),
    ev(18, "ffetch", 3, 10),
    ev(18.5, "hw", 10),
    ev(19, "resp", 10),
]


@pytest.mark.parametrize(
    ("stage", "expected_ms"),
    [
        pytest.param("client queue + linger + request", 4.0, id="client"),
        pytest.param("leader append", 1.0, id="append"),
        pytest.param("wait for follower fetch", 1.5, id="wait-fetch"),
        pytest.param("transfer to follower", 1.5, id="transfer"),
        pytest.param("follower append", 1.0, id="follower-append"),
        pytest.param("follower's next fetch", 3.0, id="report"),
        pytest.param("HW advance", 0.5, id="hw"),
        pytest.param("consumer fetch + delivery", 1.5, id="consumer"),
        pytest.param(RESPONSE_STAGE, 0.5, id="response"),
    ],
)
def test_stages_follow_the_follower_the_hw_waited_for(stage: str, expected_ms: float) -> None:
    records = [(offset, 6 * MS, 20 * MS) for offset in range(10)]
    result = analyze("t", EVENTS, records)
    summary = next(s for s in result.stages if s.stage == stage)
    assert summary.p50_ms == pytest.approx(expected_ms)
    assert result.records == 10
    assert result.unmatched == 0
    assert result.e2e_p50_ms == pytest.approx(14.0)


def test_stage_means_add_up_to_the_end_to_end_mean() -> None:
    records = [(offset, int((6 - offset / 10) * MS), 20 * MS) for offset in range(10)]
    result = analyze("t", EVENTS, records)
    total = sum(s.mean_ms for s in result.stages if s.stage != RESPONSE_STAGE)
    mean = sum(20 - (6 - offset / 10) for offset in range(10)) / 10
    assert total == pytest.approx(mean, abs=1e-3)
    assert "sum of stage means" in text(result)


def test_records_without_a_complete_chain_are_counted_not_guessed() -> None:
    without_hw = [e for e in EVENTS if e.kind != "hw"]
    result = analyze("t", without_hw, [(0, 6 * MS, 20 * MS), (99, 6 * MS, 20 * MS)])
    assert result.records == 0
    assert result.unmatched == 2


def test_read_events_keeps_one_partition_in_time_order(tmp_path: Path) -> None:
    (tmp_path / "1.trace").write_text("300 hw t 0 5 0 0\n100 hw other 0 9 0 0\n")
    (tmp_path / "2.trace").write_text("200 append t 0 0 5 150\n400 hw t 1 5 0 0\n")
    assert read_events(tmp_path, "t") == [
        Event(200, "append", 0, 5, 150),
        Event(300, "hw", 5, 0, 0),
    ]
