"""The checker against hand-made histories: one per anomaly, the negative cases, and a
property that histories generated from a correct log are always valid."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.chaos.checker import (
    LATEST_OFFSET_OP,
    UNCLEAN_EXPECTED,
    check,
    latest_offset_regressions,
)
from tests.chaos.history import History, Op, load_history

pytestmark = pytest.mark.chaos

K = "t/0"


class Builder:
    """Writes histories tersely: sends and polls as invoke + completion pairs."""

    def __init__(self) -> None:
        self.history = History()

    def send(
        self, process: int, value: int, offset: int | None, outcome: str = "ok", acks: str = "all"
    ) -> None:
        op = self.history.invoke(process, "send", [["send", K, value]], acks=acks)
        done: Any = [["send", K, [offset, value]]] if outcome == "ok" else [["send", K, value]]
        self.history.complete(op, outcome, done)

    def poll(self, process: int, pairs: list[tuple[int, int]], **extra: Any) -> None:
        op = self.history.invoke(process, "poll", None)
        self.history.complete(op, "ok", [["poll", {K: [list(p) for p in pairs]}]], **extra)

    def latest(self, process: int | str, offset: int | None, key: str = K) -> None:
        """One ListOffsets(LATEST) answer (None: refused, e.g. OFFSET_NOT_AVAILABLE)."""
        op = self.history.invoke(process, LATEST_OFFSET_OP, key)
        if offset is None:
            self.history.complete(op, "fail", key, error="OFFSET_NOT_AVAILABLE")
        else:
            self.history.complete(op, "ok", [key, offset], leader_epoch=1)

    def assign(self, process: int, keys: list[str]) -> None:
        op = self.history.invoke(process, "assign", keys)
        self.history.complete(op, "ok", keys)

    @property
    def ops(self) -> list[Op]:
        return self.history.ops


def healthy() -> Builder:
    b = Builder()
    for i in range(3):
        b.send(1, 100 + i, i)
    b.poll(9, [(0, 100), (1, 101), (2, 102)])
    return b


def test_a_correct_history_is_valid() -> None:
    result = check(healthy().ops)
    assert result.valid, result.to_text()
    assert result.error_types == []
    assert result.stats["sends-ok"] == 3
    assert result.stats["values-read"] == 3


def _lost() -> Builder:
    b = Builder()
    for i in range(3):
        b.send(1, 100 + i, i)
    b.poll(9, [(0, 100)])
    b.poll(9, [(2, 102)])
    return b


def _inconsistent() -> Builder:
    b = Builder()
    b.send(1, 100, 0)
    b.poll(9, [(0, 200)])
    return b


def _g1a() -> Builder:
    b = Builder()
    b.send(1, 100, None, outcome="fail")
    b.poll(9, [(0, 100)])
    return b


def _unexpected() -> Builder:
    b = Builder()
    b.send(1, 100, 0)
    b.poll(9, [(0, 100), (1, 555)])
    return b


def _duplicate() -> Builder:
    b = Builder()
    b.send(1, 100, 0)
    b.send(1, 101, 1)
    b.poll(9, [(0, 100), (1, 101), (2, 100)])
    return b


def _poll_skip() -> Builder:
    b = healthy()
    b.poll(8, [(0, 100)])
    b.poll(8, [(2, 102)])
    return b


def _int_poll_skip() -> Builder:
    b = healthy()
    b.poll(8, [(0, 100), (2, 102)])
    return b


def _nonmonotonic_poll() -> Builder:
    b = healthy()
    b.poll(8, [(1, 101)])
    b.poll(8, [(0, 100)])
    return b


def _int_nonmonotonic_poll() -> Builder:
    b = healthy()
    b.poll(8, [(1, 101), (0, 100)])
    return b


def _nonmonotonic_send() -> Builder:
    b = Builder()
    b.send(1, 100, 1)
    b.send(1, 101, 0)
    b.poll(9, [(0, 101), (1, 100)])
    return b


def _unseen() -> Builder:
    b = Builder()
    b.send(1, 100, 0)
    b.send(1, 101, 1)
    b.poll(9, [(0, 100)])
    return b


def _above_hw() -> Builder:
    b = Builder()
    b.send(1, 100, 0)
    b.send(1, 101, 1)
    b.poll(9, [(0, 100), (1, 101)], hw={K: 1})
    return b


def _read_then_gone() -> Builder:
    b = Builder()
    b.send(1, 100, 0)
    b.send(1, 101, 1)
    b.poll(8, [(0, 100), (1, 101)])
    b.send(2, 200, 1)  # offset 1 reused: 101 was lost after a consumer saw it
    b.poll(9, [(0, 100), (1, 200)], final=True)
    return b


def _latest_backwards() -> Builder:
    b = healthy()
    b.latest(7, 3)
    b.latest(7, 2)  # a new leader answered its lagging HW
    return b


@pytest.mark.parametrize(
    ("build", "kind"),
    [
        (_lost, "lost-write"),
        (_inconsistent, "inconsistent-offsets"),
        (_g1a, "G1a"),
        (_unexpected, "unexpected"),
        (_duplicate, "duplicate"),
        (_poll_skip, "poll-skip"),
        (_int_poll_skip, "int-poll-skip"),
        (_nonmonotonic_poll, "nonmonotonic-poll"),
        (_int_nonmonotonic_poll, "int-nonmonotonic-poll"),
        (_nonmonotonic_send, "nonmonotonic-send"),
        (_unseen, "unseen"),
        (_above_hw, "poll-above-hw"),
        (_read_then_gone, "vanished"),
        (_read_then_gone, "unseen"),
        (_latest_backwards, "latest-offset-backwards"),
    ],
    ids=lambda x: x if isinstance(x, str) else "",
)
def test_each_anomaly_is_reported(build: Any, kind: str) -> None:
    result = check(build().ops)
    assert not result.valid
    assert kind in result.bad_error_types, result.to_text()
    assert result.counts[kind] >= 1
    assert result.anomalies[kind]


def test_final_polls_of_an_empty_log_make_every_acked_value_unseen() -> None:
    """Found by R22 on the lazy file system: every replica truncated to an empty log, the
    final polls returned nothing, and the earlier reads hid the loss."""
    b = healthy()
    b.history.meta(final_poll_targets={K: -1}, highest_offsets_seen={K: 2})
    result = check(b.ops)
    assert not result.valid
    assert "unseen" in result.bad_error_types
    assert "vanished" in result.bad_error_types
    assert check(healthy().ops).valid  # without final polls, the reads stand


def test_lost_write_names_the_value_and_writer() -> None:
    result = check(_lost().ops)
    (lost,) = result.anomalies["lost-write"]
    assert lost["value"] == 101
    assert lost["offset"] == 1
    assert lost["max_read_offset"] == 2
    assert set(result.bad_error_types) >= {"lost-write", "unseen"}


def test_a_skip_after_reassign_is_not_reported() -> None:
    b = healthy()
    b.poll(8, [(0, 100)])
    b.assign(8, [])  # dropped the key
    b.assign(8, [K])
    b.poll(8, [(2, 102)])
    assert check(b.ops).valid


def test_indefinite_send_that_was_not_read_is_not_lost() -> None:
    b = Builder()
    b.send(1, 100, 0)
    b.send(1, 101, None, outcome="info")
    b.send(1, 102, 1)
    b.poll(9, [(0, 100), (1, 102)])
    assert check(b.ops).valid


def test_indefinite_send_that_was_read_counts_as_committed() -> None:
    b = Builder()
    b.send(1, 100, None, outcome="info")
    b.poll(9, [(0, 100)])
    assert check(b.ops).valid


def test_loss_of_an_acks1_write_is_expected_loss_unless_strict() -> None:
    b = Builder()
    b.send(1, 100, 0, acks="1")
    b.send(1, 101, 1, acks="1")
    b.poll(9, [(0, 100)])
    result = check(b.ops)
    assert result.valid
    assert result.expected_types == ["expected-loss"]
    assert result.anomalies["expected-loss"][0]["value"] == 101
    assert not check(b.ops, strict=True).valid


def test_expected_types_are_labelled_but_allowed() -> None:
    result = check(_lost().ops, expected={"lost-write", "unseen", "poll-skip"})
    assert result.valid
    assert result.expected_types == ["lost-write", "unseen", "poll-skip"]
    assert "(expected)" in result.to_text()


def test_unfinished_invoke_is_indefinite() -> None:
    b = Builder()
    b.history.invoke(1, "send", [["send", K, 100]], acks="all")
    b.poll(9, [(0, 100)])
    assert check(b.ops).valid


def test_report_round_trips_through_files(tmp_path: Path) -> None:
    b = _lost()
    b.history.dump(tmp_path / "history.jsonl")
    result = check(load_history(tmp_path / "history.jsonl"))
    json_path, text_path = result.write(tmp_path)
    data = json.loads(json_path.read_text())
    assert data["valid"] is False
    assert "lost-write" in data["bad_error_types"]
    assert "INVALID" in text_path.read_text()


def test_load_history_rejects_garbage(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_text('{"type": "ok"}\nnot json\n')
    with pytest.raises(ValueError, match=r"h\.jsonl:2: not JSON"):
        load_history(path)


#: (name, answers as (process, offset or None: refused), regressions expected)
LATEST_OFFSET_CASES = [
    ("rising", [(7, 1), (7, 1), (7, 4)], 0),
    ("one-client-goes-back", [(7, 4), (7, 3)], 1),
    ("back-below-the-highest-not-the-last", [(7, 4), (7, 5), (7, 4), (7, 2)], 2),
    ("refusals-are-not-answers", [(7, 4), (7, None), (7, 4)], 0),
    ("two-clients-are-judged-apart", [(7, 4), (8, 2), (8, 3)], 0),
    ("second-client-goes-back", [(7, 2), (8, 4), (7, 3), (8, 3)], 1),
]


@pytest.mark.parametrize(
    ("answers", "expected"),
    [pytest.param(answers, expected, id=name) for name, answers, expected in LATEST_OFFSET_CASES],
)
def test_latest_offsets_seen_by_one_client_never_decrease(
    answers: list[tuple[int, int | None]], expected: int
) -> None:
    b = healthy()
    for process, offset in answers:
        b.latest(process, offset)
    found = latest_offset_regressions(b.ops)
    assert len(found) == expected, found
    result = check(b.ops)
    assert result.valid == (expected == 0), result.to_text()


def test_latest_offsets_of_two_keys_are_judged_apart() -> None:
    b = healthy()
    b.latest(7, 5, key="t/0")
    b.latest(7, 1, key="t/1")
    assert check(b.ops).valid


def test_an_unclean_election_may_move_the_latest_offset_back() -> None:
    result = check(_latest_backwards().ops, expected=UNCLEAN_EXPECTED)
    assert result.valid
    assert result.expected_types == ["latest-offset-backwards"]


@st.composite
def correct_histories(draw: st.DrawFn) -> list[Op]:
    """Sends from several processes against a model log, reads of its prefixes."""
    history = History()
    log: list[int] = []
    reader_pos: dict[int, int] = {}
    counter = 0
    for step in range(draw(st.integers(1, 40))):
        if draw(st.booleans()):
            process = draw(st.integers(1, 3))
            counter += 1
            value = process * 1000 + counter
            outcome = draw(st.sampled_from(["ok", "ok", "fail", "info"]))
            op = history.invoke(process, "send", [["send", K, value]], acks="all")
            if outcome == "fail":
                history.complete(op, "fail", [["send", K, value]])
                continue
            if outcome == "info" and draw(st.booleans()):
                history.complete(op, "info", [["send", K, value]])
                continue
            log.append(value)
            if outcome == "ok":
                history.complete(op, "ok", [["send", K, [len(log) - 1, value]]])
            else:
                history.complete(op, "info", [["send", K, value]])
        else:
            reader = draw(st.integers(10, 11))
            start = reader_pos.get(reader, 0)
            end = draw(st.integers(start, len(log)))
            op = history.invoke(reader, "poll", None)
            pairs = [[o, log[o]] for o in range(start, end)]
            history.complete(op, "ok", [["poll", {K: pairs}]])
            reader_pos[reader] = end
        del step
    final = history.invoke(99, "poll", None)
    everything = [["poll", {K: [[o, v] for o, v in enumerate(log)]}]]
    history.complete(final, "ok", everything, final=True)
    return history.ops


@settings(max_examples=150, deadline=None)
@given(correct_histories())
def test_no_false_positives_on_correct_histories(ops: list[Op]) -> None:
    result = check(ops)
    assert result.valid, result.to_text()
