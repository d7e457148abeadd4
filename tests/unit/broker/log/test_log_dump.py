"""dump_log: one line per batch, stopping at the first invalid batch of a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.log.dump import dump_log, format_dump_line
from tests.unit.broker.log.storage_helpers import SMALL, fill, open_log


def test_dump_directory_and_damaged_file(tmp_path: Path) -> None:
    log = open_log(tmp_path / "orders-0", SMALL)
    fill(log, 4, records=3, epoch=2)
    log.close()
    lines = list(dump_log(tmp_path / "orders-0"))
    assert [(x.base_offset, x.last_offset, x.count, x.leader_epoch) for x in lines] == [
        (0, 2, 3, 2),
        (3, 5, 3, 2),
        (6, 8, 3, 2),
        (9, 11, 3, 2),
    ]
    assert all(x.valid for x in lines)
    text = format_dump_line(lines[1])
    assert "baseOffset: 3 lastOffset: 5 count: 3" in text
    assert "isValid: true" in text

    segment = tmp_path / "orders-0" / "00000000000000000000.log"
    data = bytearray(segment.read_bytes())
    data[lines[2].position + 40] ^= 0xFF
    segment.write_bytes(bytes(data))
    damaged = list(dump_log(segment))
    assert [x.valid for x in damaged] == [True, True, False]
    assert "CRC mismatch" in damaged[-1].error
    assert "isValid: false" in format_dump_line(damaged[-1])


def test_dump_torn_header(tmp_path: Path) -> None:
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(b"\x00" * 10)
    (line,) = dump_log(segment)
    assert not line.valid
    assert "truncated" in line.error


def test_dump_rejects_other_files(tmp_path: Path) -> None:
    (tmp_path / "x.txt").write_text("x")
    with pytest.raises(ValueError, match="neither"):
        list(dump_log(tmp_path / "x.txt"))
