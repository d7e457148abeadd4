"""dump_log: one line per batch, stopping at the first badly framed batch of a file and
marking batches whose contents lie invalid."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from broker.log.dump import dump_log, format_dump_line
from tests.support.lying_batches import gzip_bomb, one_record_batch, patch_header, with_body
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


def test_dump_marks_batches_whose_contents_lie_invalid(tmp_path: Path) -> None:
    """Finding 3: CRC-valid batches that lie (count 1000 around one record, count 2^31-1,
    random bytes as records, a gzip bomb) are invalid, and the scan goes on past them."""
    honest = one_record_batch()
    liars = [
        patch_header(honest, record_count=1000),
        patch_header(honest, record_count=2**31 - 1),
        with_body(honest, os.urandom(200)),
        gzip_bomb(100 * 1024 * 1024),
    ]
    offset = 0
    data = b""
    for batch in [honest, *liars, honest]:
        stamped = patch_header(batch, base_offset=offset)
        data += stamped
        offset += struct.unpack_from("<i", stamped, 61)[0]
    segment = tmp_path / "00000000000000000000.log"
    segment.write_bytes(data)
    lines = list(dump_log(segment))
    assert [x.valid for x in lines] == [True, False, False, False, False, True]
    assert "record count 1000" in lines[1].error
    assert "record count 2147483647" in lines[2].error
    assert "record" in lines[3].error
    assert "expand beyond" in lines[4].error
