"""The consumer-group checker against hand-made histories: a valid handover, and one bad
history per violation, each of which the checker must report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.chaos.group_checker import (
    KILL,
    PAUSE,
    RESUME,
    check_group,
    ownership,
    read_events,
)
from tests.chaos.history import History, Op

pytestmark = pytest.mark.chaos

T = "g"
P0 = f"{T}/0"


class Builder:
    """Worker events and producer/nemesis ops on one made-up monotonic clock."""

    def __init__(self) -> None:
        self.now = 1_000
        self.events: list[dict[str, Any]] = []
        self.ops: list[Op] = []
        self.history = History()

    def tick(self) -> int:
        self.now += 10
        return self.now

    def event(self, pid: int, event: str, **fields: Any) -> None:
        self.events.append(
            {"event": event, "pid": pid, "name": f"w{pid}", "mono_ns": self.tick(), **fields}
        )

    def assigned(self, pid: int, *partitions: int) -> None:
        self.event(pid, "assigned", partitions=[[T, p] for p in partitions])

    def revoked(self, pid: int, *partitions: int, how: str = "revoked") -> None:
        self.event(pid, how, partitions=[[T, p] for p in partitions])

    def record(self, pid: int, offset: int, partition: int = 0) -> None:
        self.event(pid, "record", tp=[T, partition], offset=offset, value=1000 + offset)

    def commit(self, pid: int, offset: int, outcome: str = "ok", partition: int = 0) -> None:
        offsets = {f"{T}/{partition}": offset}
        self.event(pid, "commit", type="invoke", offsets=offsets)
        if outcome != "unknown":
            self.event(pid, "commit", type=outcome, offsets=offsets)

    def acked(self, offset: int, partition: int = 0) -> None:
        key = f"{T}/{partition}"
        self.ops.append(
            {"f": "send", "type": "ok", "value": [["send", key, [offset, 1000 + offset]]]}
        )

    def nemesis(self, action: str, pid: int) -> None:
        self.ops.append(
            {"f": "nemesis", "type": "info", "value": action, "pid": pid, "time": self.tick()}
        )

    def check(self, final: dict[str, int] | None = None) -> Any:
        return check_group(self.events, self.ops, final if final is not None else {P0: 4})


def handover() -> Builder:
    """w1 reads 0-1 and commits 2, gives the partition up; w2 resumes at 2, reads 2-3 and
    commits 4. Every acknowledged record (0-3) is processed."""
    b = Builder()
    for offset in range(4):
        b.acked(offset)
    b.assigned(1, 0)
    b.record(1, 0)
    b.record(1, 1)
    b.commit(1, 2)
    b.revoked(1, 0)
    b.assigned(2, 0)
    b.record(2, 2)
    b.record(2, 3)
    b.commit(2, 4)
    return b


def kinds(result: Any) -> set[str]:
    return set(result.violations)


def test_a_clean_handover_is_valid() -> None:
    result = handover().check()
    assert result.valid, result.to_text()
    assert result.stats["distinct_records"] == 4
    assert result.stats["commits_ok"] == 2
    # w1 started at 0 with nothing committed, w2 at w1's commit.
    assert result.stats["resumes_checked"] == 2
    assert result.stats["resumes_from_commits"] == 1


def test_two_owners_at_once_are_concurrent_owners() -> None:
    b = Builder()
    b.acked(0)
    b.assigned(1, 0)
    b.assigned(2, 0)  # before w1 gave it up
    b.record(1, 0)
    b.revoked(1, 0)
    result = b.check({P0: -1})
    assert kinds(result) == {"concurrent-owners"}, result.to_text()


def test_a_killed_member_stops_owning_at_its_kill() -> None:
    b = Builder()
    b.acked(0)
    b.assigned(1, 0)
    b.record(1, 0)
    b.nemesis(KILL, 1)
    b.assigned(2, 0)
    b.record(2, 0)  # w1 died before committing: read again, from 0
    intervals = ownership(b.events, b.ops)
    assert [i.ended_by for i in intervals] == ["kill", "end"]
    assert b.check({}).valid
    # Without the kill, w1 still owned the partition when w2 got it.
    b.ops = [op for op in b.ops if op.get("value") != KILL]
    assert "concurrent-owners" in kinds(b.check({}))


def test_a_record_outside_ownership_is_unowned() -> None:
    b = handover()
    b.record(1, 3)  # after w1's revocation, not paused: no zombie window
    assert kinds(b.check()) == {"unowned-record"}


def test_an_acknowledged_record_never_processed_is_unprocessed() -> None:
    b = handover()
    b.acked(4)
    result = b.check()
    assert kinds(result) == {"unprocessed"}
    assert result.violations["unprocessed"][0]["offset"] == 4


def test_a_record_that_is_not_the_acknowledged_one_is_wrong() -> None:
    b = handover()
    last_record = next(e for e in reversed(b.events) if e["event"] == "record")
    last_record["value"] = 77
    assert kinds(b.check()) == {"wrong-record"}


def test_a_commit_below_an_earlier_success_goes_backwards() -> None:
    b = handover()
    b.commit(2, 3)
    assert kinds(b.check()) == {"commit-backwards"}


def test_a_final_offset_below_a_successful_commit_is_lost() -> None:
    assert kinds(handover().check({P0: 2})) == {"commit-lost"}
    assert kinds(handover().check({})) == {"commit-lost"}


def test_a_new_owner_not_starting_at_the_committed_offset_is_a_resume_mismatch() -> None:
    b = Builder()
    for offset in range(4):
        b.acked(offset)
    b.assigned(1, 0)
    b.record(1, 0)
    b.record(1, 1)
    b.commit(1, 2)
    b.revoked(1, 0)
    b.assigned(2, 0)
    b.record(2, 1)  # committed 2: starting at 1 is wrong
    b.record(2, 2)
    b.record(2, 3)
    b.commit(2, 4)
    result = b.check()
    assert kinds(result) == {"resume-mismatch"}, result.to_text()
    assert result.violations["resume-mismatch"][0]["committed"] == [2]


def test_a_commit_of_unknown_outcome_may_be_where_the_next_owner_resumes() -> None:
    b = Builder()
    for offset in range(3):
        b.acked(offset)
    b.assigned(1, 0)
    b.record(1, 0)
    b.record(1, 1)
    b.commit(1, 2, outcome="unknown")  # killed mid-commit
    b.nemesis(KILL, 1)
    b.assigned(2, 0)
    b.record(2, 2)
    assert b.check({P0: 2}).valid
    # Resuming at 0 is right too (the commit may not have landed), at 1 it is not.
    b.events[-1].update(offset=1, value=1001)
    b.record(2, 2)
    assert kinds(b.check({P0: 2})) == {"resume-mismatch"}


def test_a_member_fenced_while_paused_has_a_zombie_window_and_its_commits_must_fail() -> None:
    b = Builder()
    for offset in range(3):
        b.acked(offset)
    b.assigned(1, 0)
    b.record(1, 0)
    b.commit(1, 1)
    b.nemesis(PAUSE, 1)
    b.assigned(2, 0)  # the coordinator fenced w1 while it was stopped
    b.record(2, 1)
    b.record(2, 2)
    b.commit(2, 3)
    b.nemesis(RESUME, 1)
    b.record(1, 1)  # fetched before the pause: processed in the zombie window
    b.commit(1, 2, outcome="fail")
    b.revoked(1, 0, how="lost")
    result = b.check({P0: 3})
    assert result.valid, result.to_text()
    assert result.stats["zombie_records"] == 1
    assert result.stats["commits_refused"] == 1
    # The same history where the zombie's commit was accepted.
    for event in b.events:
        if event["event"] == "commit" and event.get("type") == "fail":
            event["type"] = "ok"
    assert "zombie-commit" in kinds(b.check({P0: 3}))
    # And a member that lost its partitions without having been paused had no window.
    b.ops = [op for op in b.ops if op.get("value") != PAUSE]
    assert "concurrent-owners" in kinds(b.check({P0: 3}))


def test_read_events_merges_logs_in_time_order_and_skips_a_cut_last_line(tmp_path: Path) -> None:
    first, second = tmp_path / "w1.jsonl", tmp_path / "w2.jsonl"
    first.write_text('{"event": "start", "pid": 1, "mono_ns": 30}\n{"event": "rec')
    second.write_text('{"event": "start", "pid": 2, "mono_ns": 20}\n')
    assert [e["pid"] for e in read_events([first, second])] == [2, 1]
    first.write_text('{"event": "rec\n{"event": "start", "pid": 1, "mono_ns": 30}\n')
    with pytest.raises(ValueError, match="not JSON"):
        read_events([first])
