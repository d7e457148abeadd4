"""Inspect segment files batch by batch (`minikafka log dump DIR`, like kafka-dump-log.sh).

Read-only: works on a partition directory or a single `.log` file, with or without a
running broker. Each batch is fully validated: framing (header, CRCs), what its header
claims (record count, producer fields, timestamps) and its records, decoded as a consumer
would (`record_batch.decode_records`: the records present must match the header). A
batch whose framing fails is reported with `valid=False` and the scan of that file stops
there, since nothing after it can be framed; a well-framed batch whose contents lie is
reported `valid=False` and the scan goes on.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import msgspec

from broker.log.segment import LOG_SUFFIX, parse_segment_name
from minikafka.record_batch import (
    HEADER_SIZE,
    LENGTH_PREFIX_SIZE,
    CorruptBatchError,
    decode_records,
    parse_header,
)

_PREFIX: Final = struct.Struct("<qii")
_CRC: Final = struct.Struct("<I")
_CRC_POS: Final = 21
_LAST_DELTA: Final = struct.Struct("<i")
_LAST_DELTA_POS: Final = 27
_COUNT: Final = struct.Struct("<i")
_COUNT_POS: Final = 61


class DumpLine(msgspec.Struct, frozen=True):
    """One batch of a segment file as found on disk."""

    file: str
    position: int
    base_offset: int
    last_offset: int
    leader_epoch: int
    count: int
    crc: int
    size: int
    valid: bool
    error: str


def _segment_files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(
            (p for p in path.iterdir() if parse_segment_name(p.name) is not None),
            key=lambda p: p.name,
        )
    if path.suffix != LOG_SUFFIX:
        raise ValueError(f"{path} is neither a partition directory nor a .log segment file")
    return [path]


def _invalid(name: str, data: bytes, position: int, error: str) -> DumpLine:
    """Describe a bad batch with whatever header fields are present."""
    available = len(data) - position
    base_offset = batch_length = epoch = last_delta = count = crc = -1
    if available >= _PREFIX.size:
        base_offset, batch_length, epoch = _PREFIX.unpack_from(data, position)
    if available >= HEADER_SIZE:
        (crc,) = _CRC.unpack_from(data, position + _CRC_POS)
        (last_delta,) = _LAST_DELTA.unpack_from(data, position + _LAST_DELTA_POS)
        (count,) = _COUNT.unpack_from(data, position + _COUNT_POS)
    return DumpLine(
        file=name,
        position=position,
        base_offset=base_offset,
        last_offset=base_offset + last_delta if last_delta >= 0 else -1,
        leader_epoch=epoch,
        count=count,
        crc=crc,
        size=batch_length + LENGTH_PREFIX_SIZE if batch_length >= 0 else available,
        valid=False,
        error=error,
    )


def dump_log(path: Path) -> Iterator[DumpLine]:
    """Yield one `DumpLine` per batch of every segment in `path` (a partition directory
    or one `.log` file), in offset order."""
    for file in _segment_files(path):
        yield from dump_batches(file.name, file.read_bytes())


def dump_batches(name: str, data: bytes) -> Iterator[DumpLine]:
    """One `DumpLine` per batch of `data` (batches as in a segment; `name` names where
    they come from), stopping at the first badly framed batch."""
    position = 0
    while position < len(data):
        try:
            header = parse_header(data, position)
        except CorruptBatchError as exc:
            yield _invalid(name, data, position, str(exc))
            break
        error = ""
        try:
            decode_records(memoryview(data)[position : position + header.size])
        except CorruptBatchError as exc:
            error = str(exc)
        yield DumpLine(
            file=name,
            position=position,
            base_offset=header.base_offset,
            last_offset=header.last_offset,
            leader_epoch=header.leader_epoch,
            count=header.record_count,
            crc=header.crc,
            size=header.size,
            valid=not error,
            error=error,
        )
        position += header.size


def format_dump_line(line: DumpLine) -> str:
    """One human-readable line, in the spirit of kafka-dump-log.sh."""
    text = (
        f"{line.file} position: {line.position} baseOffset: {line.base_offset} "
        f"lastOffset: {line.last_offset} count: {line.count} "
        f"partitionLeaderEpoch: {line.leader_epoch} size: {line.size} "
        f"crc: {line.crc} isValid: {str(line.valid).lower()}"
    )
    return f"{text} error: {line.error}" if line.error else text
