"""Producer-state snapshot files: naming, listing, truncation and retention."""

from __future__ import annotations

from pathlib import Path

from broker.log import producer_snapshots as snapshots


def test_listing_ignores_other_files_and_sorts(tmp_path: Path) -> None:
    for offset in (40, 5, 17):
        snapshots.write(tmp_path, offset, b"state-%d" % offset)
    (tmp_path / "00000000000000000000.log").write_bytes(b"")
    (tmp_path / "junk.producers").write_bytes(b"")
    assert snapshots.offsets(tmp_path) == [5, 17, 40]
    assert snapshots.read(tmp_path, 17) == b"state-17"
    assert not list(tmp_path.glob("*.tmp")), "written atomically, no leftovers"


def test_truncation_drops_snapshots_past_the_log_end(tmp_path: Path) -> None:
    for offset in (10, 20, 30):
        snapshots.write(tmp_path, offset, b"x")
    snapshots.delete_above(tmp_path, 20)
    assert snapshots.offsets(tmp_path) == [10, 20]
    snapshots.delete_above(tmp_path, -1)
    assert snapshots.offsets(tmp_path) == []


def test_retention_keeps_the_newest(tmp_path: Path) -> None:
    for offset in (1, 2, 3, 4):
        snapshots.write(tmp_path, offset, b"x")
    snapshots.retain_newest(tmp_path, 2)
    assert snapshots.offsets(tmp_path) == [3, 4]


def test_a_missing_directory_has_no_snapshots(tmp_path: Path) -> None:
    assert snapshots.offsets(tmp_path / "gone") == []
