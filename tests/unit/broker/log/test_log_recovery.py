"""Crash simulation: torn tails, flipped bytes, lost indexes and checkpoints, then an
unclean reopen must keep every batch before the damage and continue at the right offset."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import msgspec
import pytest

from broker.log.epoch_cache import CHECKPOINT_NAME
from broker.log.partition_log import PartitionLog
from minikafka.record_batch import iter_batches
from tests.unit.broker.log.storage_helpers import SMALL, batch, batch_bytes, open_log

CONFIG = msgspec.structs.replace(SMALL, segment_bytes=800, index_interval_bytes=150)
BATCHES = 14


def build_pristine(directory: Path) -> list[bytes]:
    """A crashed log (never closed) with several segments and epochs; its batches."""
    log = open_log(directory, CONFIG)
    for i in range(BATCHES):
        log.append_as_leader(
            batch(1 + i % 3, value_bytes=40 + i, tag=i), leader_epoch=i // 4, now_ms=0
        )
    log.flush()  # make the epoch checkpoint and recovery point mid-way realistic
    for i in range(BATCHES, BATCHES + 2):
        log.append_as_leader(batch(2, tag=i), leader_epoch=9, now_ms=0)
    batches = batch_bytes(log)
    log.abandon()
    return batches


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[bytes]]:
    directory = tmp_path_factory.mktemp("pristine") / "orders-0"
    return directory, build_pristine(directory)


def last_segment(directory: Path) -> Path:
    return sorted(directory.glob("*.log"))[-1]


def check_recovered(
    log: PartitionLog, original: list[bytes], kept: int, *, expect_epoch: int | None = None
) -> None:
    """The first `kept` batches are intact and readable, nothing else is, appends continue."""
    assert batch_bytes(log) == original[:kept]
    expected_leo = sum(h.record_count for raw in original[:kept] for _, h in iter_batches(raw))
    assert log.log_end_offset == expected_leo
    assert all(e.start_offset < expected_leo for e in log.epoch_cache.entries())
    if expect_epoch is not None:
        assert log.epoch_cache.latest_epoch() == expect_epoch
    info = log.append_as_leader(batch(1, tag=999), leader_epoch=20, now_ms=0)
    assert info.first_offset == expected_leo
    assert log.read(expected_leo, max_bytes=1000).first_offset == expected_leo
    log.close()


def reopen_damaged(pristine: tuple[Path, list[bytes]], tmp_path: Path) -> Path:
    directory = tmp_path / "orders-0"
    shutil.copytree(pristine[0], directory)
    return directory


def test_cut_at_every_byte_of_the_last_batch(
    pristine: tuple[Path, list[bytes]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source, original = pristine
    segment = last_segment(source)
    size = segment.stat().st_size
    last_start = size - len(original[-1])
    for cut in range(last_start, size):
        directory = tmp_path / f"cut-{cut}" / "orders-0"
        shutil.copytree(source, directory)
        with last_segment(directory).open("r+b") as f:
            f.truncate(cut)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="broker.log.partition_log"):
            log = open_log(directory, CONFIG, clean=False)
        if cut > last_start:
            assert "truncating" in caplog.text, cut
        check_recovered(log, original, len(original) - 1, expect_epoch=9)
        shutil.rmtree(directory.parent)


def test_flip_each_byte_of_the_last_batch(
    pristine: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    source, original = pristine
    size = last_segment(source).stat().st_size
    for position in range(size - len(original[-1]), size):
        directory = tmp_path / f"flip-{position}" / "orders-0"
        shutil.copytree(source, directory)
        with last_segment(directory).open("r+b") as f:
            f.seek(position)
            byte = f.read(1)[0]
            f.seek(position)
            f.write(bytes([byte ^ 0x5A]))
        log = open_log(directory, CONFIG, clean=False)
        check_recovered(log, original, len(original) - 1)
        shutil.rmtree(directory.parent)


def test_flip_in_an_earlier_segment_drops_everything_after(
    pristine: tuple[Path, list[bytes]], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    directory = reopen_damaged(pristine, tmp_path)
    original = pristine[1]
    segments = sorted(directory.glob("*.log"))
    assert len(segments) >= 3
    second = segments[1]
    first_size = segments[0].stat().st_size
    kept = len([1 for _ in iter_batches(segments[0].read_bytes())])
    second_batches = list(iter_batches(second.read_bytes()))
    damage_at = second_batches[1][0] + 30  # inside the second batch of the second segment
    data = bytearray(second.read_bytes())
    data[damage_at] ^= 0x01
    second.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING):
        log = open_log(directory, CONFIG, clean=False, recovery_point=0)
    assert "deleting" in caplog.text
    assert first_size == segments[0].stat().st_size
    assert len(log.segment_base_offsets()) == 2
    assert sorted(p.name for p in directory.glob("*.log")) == [s.name for s in segments[:2]]
    check_recovered(log, original, kept + 1)


def test_lost_indexes_are_rebuilt(pristine: tuple[Path, list[bytes]], tmp_path: Path) -> None:
    directory = reopen_damaged(pristine, tmp_path)
    for index in directory.glob("*.index"):
        index.unlink()
    log = open_log(directory, CONFIG, clean=False)
    for offset in range(log.log_end_offset):
        assert log.read(offset, max_bytes=1).first_offset <= offset
    check_recovered(log, pristine[1], len(pristine[1]))
    assert len(list(directory.glob("*.index"))) == len(list(directory.glob("*.log")))


def test_garbage_index_is_rebuilt_even_on_clean_open(
    pristine: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    directory = reopen_damaged(pristine, tmp_path)
    for index in directory.glob("*.index"):
        index.write_bytes(b"\x01" * 32)
    log = open_log(directory, CONFIG, clean=True)
    check_recovered(log, pristine[1], len(pristine[1]))


def test_clean_open_still_checks_the_last_batch(
    pristine: tuple[Path, list[bytes]], tmp_path: Path
) -> None:
    directory = reopen_damaged(pristine, tmp_path)
    segment = last_segment(directory)
    with segment.open("r+b") as f:
        f.truncate(segment.stat().st_size - 3)
    log = open_log(directory, CONFIG, clean=True)
    check_recovered(log, pristine[1], len(pristine[1]) - 1)


@pytest.mark.parametrize("damage", ["garbage", "missing"])
def test_bad_epoch_checkpoint_is_rebuilt_from_the_log(
    pristine: tuple[Path, list[bytes]], tmp_path: Path, damage: str
) -> None:
    directory = reopen_damaged(pristine, tmp_path)
    if damage == "garbage":
        (directory / CHECKPOINT_NAME).write_text("0\n7\ngarbage")
    else:
        (directory / CHECKPOINT_NAME).unlink()
    log = open_log(directory, CONFIG, clean=True)
    epochs = [(e.epoch, e.start_offset) for e in log.epoch_cache.entries()]
    assert [e for e, _ in epochs] == [0, 1, 2, 3, 9]
    assert epochs[0] == (0, 0)
    check_recovered(log, pristine[1], len(pristine[1]))


def test_unflushed_tail_entirely_lost(pristine: tuple[Path, list[bytes]], tmp_path: Path) -> None:
    """Power loss: the OS dropped everything after the last flushed segment's data."""
    directory = reopen_damaged(pristine, tmp_path)
    segment = last_segment(directory)
    base = int(segment.stem)
    segment.write_bytes(b"")
    log = open_log(directory, CONFIG, clean=False)
    assert log.log_end_offset == base
    kept = 0
    offset = 0
    while offset < base:
        offset += sum(h.record_count for _, h in iter_batches(pristine[1][kept]))
        kept += 1
    check_recovered(log, pristine[1], kept)
