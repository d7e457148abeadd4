"""The core's in-memory log: reads, truncation, snapshots, and its epoch cache vs a model."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controller.raft.log import RaftLog
from controller.raft.messages import Entry, Snapshot
from controller.raft.rules import EpochStart, end_offset_for


def _entries(*epochs: int) -> list[Entry]:
    return [Entry(epoch, b"x%d" % index) for index, epoch in enumerate(epochs)]


def test_epoch_cache_and_reads() -> None:
    log = RaftLog(start_offset=0, start_epoch=0, entries=_entries(1, 1, 3, 3, 3, 4))
    assert log.epochs == [(1, 0), (3, 2), (4, 5)]
    assert (log.end_offset, log.last_epoch) == (6, 4)
    assert log.epoch_at(3) == 3
    assert log.read(2, max_entries=2, max_bytes=100) == tuple(_entries(1, 1, 3, 3)[2:4])
    assert log.read(6, max_entries=5, max_bytes=100) == ()


def test_read_returns_at_least_one_entry_over_the_byte_limit() -> None:
    log = RaftLog(start_offset=0, start_epoch=0, entries=[Entry(1, b"a" * 50), Entry(1, b"b")])
    assert log.read(0, max_entries=5, max_bytes=10) == (Entry(1, b"a" * 50),)
    assert len(log.read(0, max_entries=5, max_bytes=51)) == 2


def test_truncate_trims_the_epoch_cache() -> None:
    log = RaftLog(start_offset=0, start_epoch=0, entries=_entries(1, 1, 3, 3, 4))
    log.truncate(3)
    assert log.epochs == [(1, 0), (3, 2)]
    log.truncate(2)
    assert log.epochs == [(1, 0)]
    assert log.last_epoch == 1


def test_drop_prefix_keeps_the_snapshot_epoch() -> None:
    log = RaftLog(start_offset=0, start_epoch=0, entries=_entries(1, 1, 3, 3, 4))
    log.drop_prefix(Snapshot(end_offset=3, epoch=3, data=b""))
    assert (log.start_offset, log.start_epoch, log.end_offset) == (3, 3, 5)
    assert log.epochs == [(3, 3), (4, 4)]
    assert log.epoch_at(2) == 3
    assert end_offset_for(log.epochs, 3, log.end_offset) is not None
    log.truncate(3)  # down to the snapshot: its epoch stays known
    assert log.epochs == [(3, 3)]
    assert log.last_epoch == 3


def test_drop_prefix_at_an_epoch_boundary() -> None:
    log = RaftLog(start_offset=0, start_epoch=0, entries=_entries(1, 1, 3, 3))
    log.drop_prefix(Snapshot(end_offset=2, epoch=1, data=b""))
    assert log.epochs == [(1, 2), (3, 2)]
    assert end_offset_for(log.epochs, 1, log.end_offset) is not None


def test_drop_prefix_refuses_a_snapshot_of_another_history() -> None:
    log = RaftLog(start_offset=0, start_epoch=0, entries=_entries(1, 1, 3))
    with pytest.raises(ValueError, match="snapshot epoch 2"):
        log.drop_prefix(Snapshot(end_offset=2, epoch=2, data=b""))


def test_reset_to_a_snapshot() -> None:
    log = RaftLog(start_offset=0, start_epoch=0, entries=_entries(1, 2))
    log.reset(Snapshot(end_offset=10, epoch=4, data=b""))
    assert (log.start_offset, log.end_offset, log.last_epoch) == (10, 10, 4)
    log.append(_entries(4, 5))
    assert log.epochs == [(4, 10), (5, 11)]


@pytest.mark.parametrize(
    ("start", "epoch", "problem"),
    [
        pytest.param(-1, 0, "bad log start", id="negative start"),
        pytest.param(5, 0, "with snapshot epoch 0", id="start without epoch"),
        pytest.param(0, 2, "with snapshot epoch 2", id="epoch without start"),
    ],
)
def test_bad_log_start(start: int, epoch: int, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        RaftLog(start_offset=start, start_epoch=epoch, entries=[])


def test_epochs_never_go_back() -> None:
    log = RaftLog(start_offset=0, start_epoch=0, entries=_entries(3))
    with pytest.raises(ValueError, match="after epoch 3"):
        log.append(_entries(2))


def _model_cache(epochs: list[int], start: int, start_epoch: int) -> list[EpochStart]:
    cache: list[EpochStart] = [(start_epoch, start)] if start_epoch else []
    for index, epoch in enumerate(epochs):
        if not cache or cache[-1][0] != epoch:
            cache.append((epoch, start + index))
    return cache


@given(
    runs=st.lists(st.tuples(st.integers(0, 2), st.integers(1, 4)), min_size=1, max_size=6),
    operations=st.lists(st.tuples(st.sampled_from(["truncate", "snapshot"]), st.floats(0, 1))),
)
def test_epoch_cache_matches_a_model(
    runs: list[tuple[int, int]], operations: list[tuple[str, float]]
) -> None:
    """After any appends, truncations and snapshots, the epoch cache answers every
    end-offset question as a cache rebuilt from scratch would."""
    epochs: list[int] = []
    epoch = 1
    for step, length in runs:
        epoch += step
        epochs.extend([epoch] * length)
    log = RaftLog(start_offset=0, start_epoch=0, entries=[Entry(e, b"") for e in epochs])
    start, start_epoch = 0, 0
    for name, fraction in operations:
        held = log.end_offset - start
        if name == "truncate":
            cut = start + int(fraction * held)
            log.truncate(cut)
            epochs = epochs[: cut - start]
        elif held:
            end = start + 1 + int(fraction * (held - 1))
            snapshot_epoch = log.epoch_at(end - 1)
            log.drop_prefix(Snapshot(end_offset=end, epoch=snapshot_epoch, data=b""))
            epochs = epochs[end - start :]
            start, start_epoch = end, snapshot_epoch
        model = _model_cache(epochs, start, start_epoch)
        for requested in range(0, epoch + 2):
            expected = end_offset_for(model, requested, log.end_offset)
            got = end_offset_for(log.epochs, requested, log.end_offset)
            if expected is not None and model and requested < model[0][0]:
                continue  # below the snapshot's epoch: the start offset is not known
            assert got == expected, (requested, log.epochs, model)
