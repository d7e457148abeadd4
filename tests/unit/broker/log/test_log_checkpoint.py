"""Checkpoint files: Kafka's text format, atomic replacement, clear errors when malformed."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.checkpoint import atomic_write, read_epochs, read_offsets, write_offsets
from broker.log.errors import LogStorageError


def test_offsets_round_trip_in_kafka_format(tmp_path: Path) -> None:
    path = tmp_path / "replication-offset-checkpoint"
    write_offsets(path, {("orders-eu", 1): 42, ("orders-eu", 0): 1500})
    assert path.read_text() == "0\n2\norders-eu 0 1500\norders-eu 1 42\n"
    assert read_offsets(path) == {("orders-eu", 0): 1500, ("orders-eu", 1): 42}


def test_missing_file_is_empty(tmp_path: Path) -> None:
    assert read_offsets(tmp_path / "nope") == {}
    assert read_epochs(tmp_path / "nope") == []


def test_leftover_tmp_is_ignored_and_replaced(tmp_path: Path) -> None:
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_offsets(path, {("t", 0): 7})
    (tmp_path / "recovery-point-offset-checkpoint.tmp").write_text("0\n1\nt 0 99999")  # torn
    assert read_offsets(path) == {("t", 0): 7}
    write_offsets(path, {("t", 0): 8})
    assert read_offsets(path) == {("t", 0): 8}
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_atomic_write_replaces_whole_content(tmp_path: Path) -> None:
    path = tmp_path / "f"
    atomic_write(path, b"a" * 1000)
    atomic_write(path, b"b")
    assert path.read_bytes() == b"b"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("", "truncated"),
        ("1\n0\n", "unsupported version"),
        ("0\nx\n", "bad count"),
        ("0\n2\nt 0 1\n", "says 2 entries but holds 1"),
        ("0\n1\nt 0\n", "malformed entry"),
        ("0\n1\nt zero 1\n", "non-integer"),
    ],
    ids=["empty", "version", "count", "count-mismatch", "short-entry", "non-integer"],
)
def test_malformed_checkpoint_raises(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "cp"
    path.write_text(content)
    with pytest.raises(LogStorageError, match=message):
        read_offsets(path)


def test_topic_with_space_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="cannot be stored"):
        write_offsets(tmp_path / "cp", {("bad topic", 0): 1})
