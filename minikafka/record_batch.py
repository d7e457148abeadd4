"""The record batch format shared by producer, broker and consumer.

A batch is one `bytes` value: a fixed 65-byte header modelled on Kafka's v2 batch,
followed by the records section. All integers are little-endian.

    offset  size  field
    0       8     base_offset            stamped by the leader
    8       4     batch_length           bytes after this field (= total size - 12)
    12      4     partition_leader_epoch stamped by the leader
    16      1     magic                  MAGIC (2)
    17      4     header_crc             CRC-32C of bytes [0, 17)
    21      4     crc                    CRC-32C of bytes [25, end)
    25      2     attributes             bits 0-2 compression, bit 3 timestamp type
    27      4     last_offset_delta      record_count - 1
    31      8     first_timestamp_ms
    39      8     max_timestamp_ms
    47      8     producer_id            -1 when not idempotent
    55      2     producer_epoch
    57      4     base_sequence          -1 when not idempotent
    61      4     record_count
    65      ...   records               msgpack array of [timestamp_delta_ms, key, value, headers]

The main `crc` covers everything after itself, so the leader stamps base offset and
leader epoch without touching it (as Kafka does); a second, 17-byte `header_crc`
covers the stamped fields so that a flipped bit anywhere in a batch is detected. The
broker validates headers and CRCs but never decodes records; the consumer decodes
them with one msgspec call per batch (`decode_records`).

Validation has three levels, all here (one home), each raising `CorruptBatchError`:

- framing (`parse_header`): length, magic, both CRCs, record count >= 1,
  `last_offset_delta == record_count - 1`, known codec. What recovery and followers check.
- contents (`content_problem`): what a CRC-valid header may still lie about, checked
  without decoding records: producer id >= -1 and, for an idempotent batch (id >= 0),
  epoch in [0, 32767] and base sequence >= 0; timestamps -1 (none) or >= 0; a record
  count the body can hold (uncompressed: at `MIN_RECORD_BYTES` per record; compressed:
  within `RECORDS_BYTES_MAX` once expanded). The leader checks it on every append,
  `log dump` and the consumer's decode too.
- records (`decode_records` / `decode_rows`): the body decompresses (streaming, never
  beyond `RECORDS_BYTES_MAX` or the caller's bound: a compression bomb fails fast) to
  a msgpack array of exactly `record_count` well-formed records.
"""

from __future__ import annotations

import enum
import gzip
import operator
import struct
import zlib
from collections.abc import Iterator, Sequence
from typing import Final, TypeAlias, TypeVar

import crc32c as _crc32c
import msgspec

from minikafka.errors import ErrorCode, MiniKafkaError

MAGIC: Final = 2
HEADER_SIZE: Final = 65
#: Smallest encoded record: a 4-element array of an int and three nils.
MIN_RECORD_BYTES: Final = 5
#: Largest records section a batch may decode to (after decompression): 64 MiB, the gRPC
#: message limit; a consumer may pass a smaller bound to `decode_records`.
RECORDS_BYTES_MAX: Final = 64 * 1024 * 1024
#: `producer_id` of a batch from a producer that is not idempotent (epoch and sequence -1).
NO_PRODUCER_ID: Final = -1
#: Kafka's producer epoch is an int16: an idempotent producer's epoch is in [0, 32767].
PRODUCER_EPOCH_MAX: Final = 32767
#: A timestamp field holding "no timestamp".
NO_TIMESTAMP: Final = -1
#: Bytes of a batch not counted by `batch_length` (base_offset + batch_length).
LENGTH_PREFIX_SIZE: Final = 12
#: Smallest legal value of `batch_length`.
MIN_BATCH_LENGTH: Final = HEADER_SIZE - LENGTH_PREFIX_SIZE

_PREFIX = struct.Struct("<qiib")  # base_offset, batch_length, leader_epoch, magic (17 bytes)
_HEADER = struct.Struct("<qiibIIhiqqqhii")
_TAIL = struct.Struct("<hiqqqhii")  # attributes .. record_count (40 bytes, CRC-covered)
_U32 = struct.Struct("<I")
_I16 = struct.Struct("<h")
_I64 = struct.Struct("<q")
_HEADER_CRC_POS: Final = 17
_CRC_POS: Final = 21
_CRC_START: Final = 25
_MAX_TIMESTAMP_POS: Final = 39

assert _HEADER.size == HEADER_SIZE
assert _PREFIX.size == _HEADER_CRC_POS

_COMPRESSION_MASK: Final = 0x07
_TIMESTAMP_TYPE_BIT: Final = 0x08

#: One record as stored: (timestamp_delta_ms, key, value, headers).
RecordTuple: TypeAlias = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]] | None]
#: One record ready to encode (`build_batch_from_rows`): (timestamp_delta_ms, key, value,
#: headers), headers any list or tuple of pairs.
EncodableRow: TypeAlias = tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes]] | None]
#: One record as given to `build_batch`: (timestamp_ms, key, value, headers).
RecordInput: TypeAlias = tuple[int, bytes | None, bytes | None, Sequence[tuple[str, bytes]] | None]


_first_item = operator.itemgetter(0)


class Compression(enum.IntEnum):
    """Compression codec of the records section (Kafka's attribute numbering)."""

    NONE = 0
    GZIP = 1
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str | None) -> Compression:
        """Map a `compression_type` setting (`none`, `gzip`, `lz4`, `zstd`) to a codec."""
        normalized = (name or "none").strip().lower()
        for member in cls:
            if member.name.lower() == normalized:
                return member
        choices = ", ".join(m.name.lower() for m in cls)
        raise ValueError(f"unknown compression type {name!r}; expected one of {choices}")


class TimestampType(enum.IntEnum):
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class CorruptBatchError(MiniKafkaError):
    """A batch failed validation: bad length, magic, CRC or header field."""

    default_code = ErrorCode.CORRUPT_MESSAGE


class BatchHeader(msgspec.Struct, frozen=True, kw_only=True):
    """The decoded fixed header of one batch."""

    base_offset: int
    batch_length: int
    leader_epoch: int
    magic: int
    header_crc: int
    crc: int
    attributes: int
    last_offset_delta: int
    first_timestamp_ms: int
    max_timestamp_ms: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int

    @property
    def size(self) -> int:
        """Total size of the batch in bytes."""
        return self.batch_length + LENGTH_PREFIX_SIZE

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & _COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        return TimestampType(1 if self.attributes & _TIMESTAMP_TYPE_BIT else 0)


class RecordRow(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """One stored record decoded as a struct (same wire form as `RecordTuple`).

    Untracked by the garbage collector, unlike a tuple: a consumer decoding a million
    records a second then triggers no collections for them.
    """

    timestamp_delta_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None


_records_encoder = msgspec.msgpack.Encoder()
_records_decoder = msgspec.msgpack.Decoder(list[RecordTuple])
_rows_decoder = msgspec.msgpack.Decoder(list[RecordRow])


def _compress(codec: Compression, data: bytes) -> bytes:
    if codec is Compression.NONE:
        return data
    if codec is Compression.GZIP:
        return gzip.compress(data, compresslevel=1)
    if codec is Compression.LZ4:
        import lz4.frame

        return bytes(lz4.frame.compress(data))
    import zstandard

    return bytes(zstandard.ZstdCompressor(level=1).compress(data))


#: Bytes produced per step of a streaming decompression.
_DECOMPRESS_CHUNK_BYTES: Final = 1024 * 1024


class _TooLarge(Exception):
    pass


def _gunzip(data: bytes | memoryview, limit: int) -> bytes:
    out = bytearray()
    pending = bytes(data)
    while pending:
        stream = zlib.decompressobj(16 + zlib.MAX_WBITS)  # one gzip member
        while not stream.eof:
            chunk = stream.decompress(pending, _DECOMPRESS_CHUNK_BYTES)
            out += chunk
            if len(out) > limit:
                raise _TooLarge
            pending = stream.unconsumed_tail
            if not chunk and not pending:
                break  # no input left and no progress: the stream is cut short
        if not stream.eof:
            raise ValueError("truncated gzip stream")
        pending = stream.unused_data
    return bytes(out)


def _unlz4(data: bytes | memoryview, limit: int) -> bytes:
    import lz4.frame

    out = bytearray()
    pending = bytes(data)
    while pending:
        stream = lz4.frame.LZ4FrameDecompressor()
        chunk = stream.decompress(pending, max_length=_DECOMPRESS_CHUNK_BYTES)
        while True:
            out += chunk
            if len(out) > limit:
                raise _TooLarge
            if stream.eof or stream.needs_input:
                break
            chunk = stream.decompress(b"", max_length=_DECOMPRESS_CHUNK_BYTES)
        if not stream.eof:
            raise ValueError("truncated lz4 frame")
        pending = stream.unused_data
    return bytes(out)


def _unzstd(data: bytes | memoryview, limit: int) -> bytes:
    import zstandard

    reader = zstandard.ZstdDecompressor().stream_reader(bytes(data), read_across_frames=True)
    out = bytearray()
    while chunk := reader.read(_DECOMPRESS_CHUNK_BYTES):
        out += chunk
        if len(out) > limit:
            raise _TooLarge
    return bytes(out)


def _decompress(
    codec: Compression, data: bytes | memoryview, *, max_bytes: int = RECORDS_BYTES_MAX
) -> bytes | memoryview:
    """The records section of a batch, decompressed by streaming: never more than
    `max_bytes` are produced (a compression bomb fails after `max_bytes`, fast)."""
    if codec is Compression.NONE:
        return data
    try:
        if codec is Compression.GZIP:
            return _gunzip(data, max_bytes)
        if codec is Compression.LZ4:
            return _unlz4(data, max_bytes)
        return _unzstd(data, max_bytes)
    except _TooLarge:
        raise CorruptBatchError(
            f"{codec.name} records expand beyond {max_bytes} bytes (the records size limit)"
        ) from None
    except Exception as exc:  # codec libraries raise assorted types on bad input
        raise CorruptBatchError(f"cannot decompress {codec.name} records: {exc}") from exc


def build_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int = 0,
    leader_epoch: int = -1,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """Encode `records` (each `(timestamp_ms, key, value, headers)`) as one batch.

    The records section is one msgspec call; timestamps are stored as deltas from the
    first record's timestamp.
    """
    if not records:
        raise ValueError("a record batch needs at least one record")
    first_timestamp_ms = records[0][0]
    rows = [
        (ts - first_timestamp_ms, key, value, list(headers) if headers else None)
        for ts, key, value, headers in records
    ]
    return build_batch_from_rows(
        rows,
        first_timestamp_ms=first_timestamp_ms,
        base_offset=base_offset,
        leader_epoch=leader_epoch,
        compression=compression,
        timestamp_type=timestamp_type,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def build_batch_from_rows(
    rows: Sequence[EncodableRow],
    *,
    first_timestamp_ms: int,
    base_offset: int = 0,
    leader_epoch: int = -1,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """`build_batch` for records already in stored form, `(timestamp_delta_ms, key,
    value, headers)` with deltas from `first_timestamp_ms` (the producer builds them so
    as it appends; headers may be any list or tuple of `(name, value)` pairs)."""
    if not rows:
        raise ValueError("a record batch needs at least one record")
    max_timestamp_ms = first_timestamp_ms + max(map(_first_item, rows))
    body = _compress(compression, _records_encoder.encode(rows))
    count = len(rows)
    attributes = int(compression) | (
        _TIMESTAMP_TYPE_BIT if timestamp_type is TimestampType.LOG_APPEND_TIME else 0
    )
    tail = _TAIL.pack(
        attributes,
        count - 1,
        first_timestamp_ms,
        max_timestamp_ms,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    crc = _crc32c.crc32c(body, _crc32c.crc32c(tail))
    batch_length = HEADER_SIZE - LENGTH_PREFIX_SIZE + len(body)
    prefix = _PREFIX.pack(base_offset, batch_length, leader_epoch, MAGIC)
    header_crc = _crc32c.crc32c(prefix)
    return b"".join((prefix, _U32.pack(header_crc), _U32.pack(crc), tail, body))


def stamp_prefix(batch: bytes | memoryview, *, base_offset: int, leader_epoch: int) -> bytes:
    """The first 21 bytes of `batch` restamped with a new base offset and leader epoch.

    Writing `stamp_prefix(...)` followed by `batch[21:]` yields the stamped batch; the
    main CRC stays valid because it covers only bytes from 25 on.
    """
    (batch_length,) = struct.unpack_from("<i", batch, 8)
    prefix = _PREFIX.pack(base_offset, batch_length, leader_epoch, MAGIC)
    return prefix + _U32.pack(_crc32c.crc32c(prefix))


def stamp(
    batch: bytes | memoryview,
    *,
    base_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None = None,
) -> bytes:
    """Return `batch` with a new base offset and leader epoch (and, for topics that use
    LogAppendTime, the broker's timestamp, which requires recomputing the main CRC)."""
    view = memoryview(batch)
    prefix = stamp_prefix(view, base_offset=base_offset, leader_epoch=leader_epoch)
    if log_append_time_ms is None:
        return prefix + view[_CRC_POS:]
    (attributes,) = struct.unpack_from("<h", view, _CRC_START)
    covered = bytearray(view[_CRC_START:])
    struct.pack_into("<h", covered, 0, attributes | _TIMESTAMP_TYPE_BIT)
    struct.pack_into("<q", covered, _MAX_TIMESTAMP_POS - _CRC_START, log_append_time_ms)
    return prefix + _U32.pack(_crc32c.crc32c(covered)) + bytes(covered)


#: The 14 raw header fields, in `BatchHeader` field order (`header_fields`).
HeaderFields: TypeAlias = tuple[
    int, int, int, int, int, int, int, int, int, int, int, int, int, int
]
#: Indexes into `HeaderFields` (the hot paths read fields without building a struct).
F_BASE_OFFSET: Final = 0
F_BATCH_LENGTH: Final = 1
F_LEADER_EPOCH: Final = 2
F_ATTRIBUTES: Final = 6
F_LAST_OFFSET_DELTA: Final = 7
F_FIRST_TIMESTAMP: Final = 8
F_MAX_TIMESTAMP: Final = 9
F_PRODUCER_ID: Final = 10
F_PRODUCER_EPOCH: Final = 11
F_BASE_SEQUENCE: Final = 12
F_RECORD_COUNT: Final = 13

_unpack_header = _HEADER.unpack_from
_crc = _crc32c.crc32c
_KNOWN_CODECS: Final = frozenset(int(c) for c in Compression)


def header_fields(
    buf: bytes | memoryview | bytearray, pos: int = 0, *, verify_crc: bool = True
) -> HeaderFields:
    """Decode and validate the batch that starts at `buf[pos]`: its raw header fields.

    The framing rules of `parse_header` (one home), without building a `BatchHeader`:
    what the append paths call once per batch. Raises `CorruptBatchError` naming the
    problem when the batch is truncated, its length, magic or a CRC is wrong, or its
    header fields are inconsistent.
    """
    available = len(buf) - pos
    if available < HEADER_SIZE:
        raise CorruptBatchError(
            f"truncated batch at byte {pos}: {available} bytes, header needs {HEADER_SIZE}"
        )
    fields: HeaderFields = _unpack_header(buf, pos)
    view = memoryview(buf)
    if _crc(view[pos : pos + _HEADER_CRC_POS]) != fields[4]:
        raise CorruptBatchError(f"header CRC mismatch in batch at byte {pos}")
    if fields[3] != MAGIC:
        raise CorruptBatchError(f"unsupported magic {fields[3]} in batch at byte {pos}")
    batch_length = fields[1]
    if batch_length < MIN_BATCH_LENGTH:
        raise CorruptBatchError(
            f"batch length {batch_length} at byte {pos} is below the minimum {MIN_BATCH_LENGTH}"
        )
    size = batch_length + LENGTH_PREFIX_SIZE
    if size > available:
        raise CorruptBatchError(
            f"truncated batch at byte {pos}: length says {size} bytes, {available} present"
        )
    if verify_crc and _crc(view[pos + _CRC_START : pos + size]) != fields[5]:
        raise CorruptBatchError(f"CRC mismatch in batch at byte {pos}")
    count = fields[13]
    if count < 1:
        raise CorruptBatchError(f"batch at byte {pos} has {count} records")
    if fields[7] != count - 1:
        raise CorruptBatchError(
            f"batch at byte {pos}: last offset delta {fields[7]} does not "
            f"match record count {count}"
        )
    if fields[6] & _COMPRESSION_MASK not in _KNOWN_CODECS:
        raise CorruptBatchError(
            f"batch at byte {pos}: unsupported compression codec {fields[6] & _COMPRESSION_MASK}"
        )
    return fields


def header_from_fields(fields: HeaderFields) -> BatchHeader:
    """The `BatchHeader` of raw fields from `header_fields`."""
    return BatchHeader(
        base_offset=fields[0],
        batch_length=fields[1],
        leader_epoch=fields[2],
        magic=fields[3],
        header_crc=fields[4],
        crc=fields[5],
        attributes=fields[6],
        last_offset_delta=fields[7],
        first_timestamp_ms=fields[8],
        max_timestamp_ms=fields[9],
        producer_id=fields[10],
        producer_epoch=fields[11],
        base_sequence=fields[12],
        record_count=fields[13],
    )


def parse_header(buf: bytes | memoryview, pos: int = 0, *, verify_crc: bool = True) -> BatchHeader:
    """Decode and validate the batch that starts at `buf[pos]`.

    Raises `CorruptBatchError` naming the problem when the batch is truncated, its
    length, magic or a CRC is wrong, or its header fields are inconsistent.
    """
    return header_from_fields(header_fields(buf, pos, verify_crc=verify_crc))


def scan_batches(
    buf: bytes | memoryview | bytearray, *, verify_crc: bool = True
) -> list[tuple[int, HeaderFields]]:
    """`(position, fields)` of every batch of a concatenation of batches, all validated
    (`header_fields`) before anything is returned: all or nothing.

    The append paths' hot loop: a batch that passes every framing rule in one expression
    is taken as is; any other goes through `header_fields`, the rules' one home, which
    raises the precise error (or, should the two ever disagree, decides).
    """
    view = memoryview(buf)
    end = len(view)
    found: list[tuple[int, HeaderFields]] = []
    unpack = _unpack_header
    crc = _crc
    known = _KNOWN_CODECS
    pos = 0
    while pos < end:
        if end - pos >= HEADER_SIZE:
            fields: HeaderFields = unpack(view, pos)
            size = fields[1] + LENGTH_PREFIX_SIZE
            count = fields[13]
            if (
                fields[3] == MAGIC
                and fields[1] >= MIN_BATCH_LENGTH
                and pos + size <= end
                and count >= 1
                and fields[7] == count - 1
                and fields[6] & _COMPRESSION_MASK in known
                and crc(view[pos : pos + _HEADER_CRC_POS]) == fields[4]
                and (not verify_crc or crc(view[pos + _CRC_START : pos + size]) == fields[5])
            ):
                found.append((pos, fields))
                pos += size
                continue
        fields = header_fields(view, pos, verify_crc=verify_crc)
        found.append((pos, fields))
        pos += fields[1] + LENGTH_PREFIX_SIZE
    return found


def stamp_all_in_place(
    buf: bytearray,
    scanned: Sequence[tuple[int, HeaderFields]],
    *,
    first_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None = None,
) -> list[tuple[int, int, int]]:
    """`stamp_in_place` for every batch of a validated record set (`scan_batches`), with
    consecutive base offsets from `first_offset`, in one loop (the leader's append path).

    Returns `(position, base offset, max timestamp)` of each batch (the broker's
    timestamp for LogAppendTime); the next offset is the last base offset + its count.
    """
    if log_append_time_ms is not None:
        stamped: list[tuple[int, int, int]] = []
        offset = first_offset
        for pos, fields in scanned:
            stamp_in_place(
                buf,
                pos,
                fields,
                base_offset=offset,
                leader_epoch=leader_epoch,
                log_append_time_ms=log_append_time_ms,
            )
            stamped.append((pos, offset, log_append_time_ms))
            offset += fields[13]
        return stamped
    pack = _PREFIX.pack
    pack_crc = _U32.pack_into
    crc = _crc
    batches: list[tuple[int, int, int]] = []
    offset = first_offset
    for pos, fields in scanned:
        prefix = pack(offset, fields[1], leader_epoch, MAGIC)
        buf[pos : pos + _HEADER_CRC_POS] = prefix
        pack_crc(buf, pos + _HEADER_CRC_POS, crc(prefix))
        batches.append((pos, offset, fields[9]))
        offset += fields[13]
    return batches


def check_and_stamp_create_time(
    buf: bytearray,
    *,
    first_offset: int,
    leader_epoch: int,
    max_batch_length: int,
    earliest_ms: int,
    latest_ms: int,
) -> tuple[list[int], list[int], int, int] | None:
    """The leader's CreateTime append in one pass per batch: every framing rule
    (`header_fields`), every content rule (`fields_content_problem`), `batch_length <=
    max_batch_length` and both timestamps in `[earliest_ms, latest_ms]` (or -1), then the
    restamp of `stamp_all_in_place`, on one `unpack_from` per batch.

    Only a shortcut: it accepts a batch only when all those rules hold, and returns None
    as soon as one batch fails any of them (or `buf` is empty), leaving `buf` partly
    stamped. The caller then runs the checks' homes on the original bytes, which raise
    the precise error (or, should the two ever disagree, decide). On success returns
    what `stamp_all_in_place` returns, as `(positions, base offsets, next offset,
    largest max timestamp)`: each batch's position and new base offset, the offset
    after the last batch and the largest max timestamp (-1 if none).
    """
    pack_prefix = _PREFIX.pack_into
    pack_crc = _U32.pack_into
    unpack = _unpack_header
    crc = _crc
    known = _KNOWN_CODECS
    # The rules' constants as locals: this loop runs for every batch of every produce.
    magic_v2 = MAGIC
    min_length = MIN_BATCH_LENGTH
    prefix_bytes = LENGTH_PREFIX_SIZE
    codec_mask = _COMPRESSION_MASK
    body_offset = _BODY_LENGTH_OFFSET
    record_bytes = MIN_RECORD_BYTES
    max_compressed_count = RECORDS_BYTES_MAX // MIN_RECORD_BYTES
    no_producer = NO_PRODUCER_ID
    max_producer_epoch = PRODUCER_EPOCH_MAX
    no_timestamp = NO_TIMESTAMP
    header_crc_end = _HEADER_CRC_POS
    crc_start = _CRC_START
    positions: list[int] = []
    base_offsets: list[int] = []
    add_position = positions.append
    add_offset = base_offsets.append
    largest = NO_TIMESTAMP
    # A timestamp is -1 (none) or >= 0 (`fields_content_problem`), and within the window.
    lowest_ms = max(earliest_ms, 0)
    offset = first_offset
    pos = 0
    end = len(buf)
    if not end:
        return None
    with memoryview(buf) as view:
        try:
            while pos < end:
                (
                    _,
                    length,
                    _,
                    magic,
                    header_crc,
                    body_crc,
                    attributes,
                    last_offset_delta,
                    first_ms,
                    max_ms,
                    producer_id,
                    producer_epoch,
                    base_sequence,
                    count,
                ) = unpack(view, pos)  # struct.error if fewer than HEADER_SIZE bytes remain
                stop = pos + length + prefix_bytes  # the next batch starts here
                codec = attributes & codec_mask
                head = view[pos : pos + header_crc_end]
                if not (
                    magic == magic_v2
                    and min_length <= length <= max_batch_length
                    and stop <= end
                    and 0 < count == last_offset_delta + 1
                    and (  # the array header in front of the records: `_array_header_bytes`
                        count * record_bytes + (1 if count < 16 else 3 if count < 65536 else 5)
                        <= length - body_offset
                        if codec == 0
                        else codec in known and count <= max_compressed_count
                    )
                    and (
                        (
                            producer_id == no_producer
                            and producer_epoch >= no_producer
                            and base_sequence >= no_producer
                        )
                        or (
                            producer_id >= 0
                            and 0 <= producer_epoch <= max_producer_epoch
                            and base_sequence >= 0
                        )
                    )
                    and (first_ms == no_timestamp or lowest_ms <= first_ms <= latest_ms)
                    and (max_ms == no_timestamp or lowest_ms <= max_ms <= latest_ms)
                    and crc(head) == header_crc
                    and crc(view[pos + crc_start : stop]) == body_crc
                ):
                    return None
                # Restamp: `head` now shows the new prefix, whose CRC follows it.
                pack_prefix(buf, pos, offset, length, leader_epoch, magic_v2)
                pack_crc(buf, pos + header_crc_end, crc(head))
                add_position(pos)
                add_offset(offset)
                if max_ms > largest:
                    largest = max_ms
                offset += count
                pos = stop
        except struct.error:
            return None
    return positions, base_offsets, offset, largest


def stamp_in_place(
    buf: bytearray,
    pos: int,
    fields: HeaderFields,
    *,
    base_offset: int,
    leader_epoch: int,
    log_append_time_ms: int | None = None,
) -> None:
    """Restamp the validated batch at `buf[pos]` (raw `fields`) in place: base offset,
    leader epoch and header CRC (as `stamp`), and for LogAppendTime topics the
    timestamp type bit, the max timestamp and the main CRC."""
    prefix = _PREFIX.pack(base_offset, fields[1], leader_epoch, MAGIC)
    buf[pos : pos + _HEADER_CRC_POS] = prefix
    _U32.pack_into(buf, pos + _HEADER_CRC_POS, _crc(prefix))
    if log_append_time_ms is None:
        return
    _I16.pack_into(buf, pos + _CRC_START, fields[6] | _TIMESTAMP_TYPE_BIT)
    _I64.pack_into(buf, pos + _MAX_TIMESTAMP_POS, log_append_time_ms)
    end = pos + fields[1] + LENGTH_PREFIX_SIZE
    _U32.pack_into(buf, pos + _CRC_POS, _crc(memoryview(buf)[pos + _CRC_START : end]))


def _array_header_bytes(count: int) -> int:
    """Bytes of the msgpack array header in front of `count` records."""
    return 1 if count < 16 else 3 if count < 1 << 16 else 5


def content_problem(
    header: BatchHeader, *, max_records_bytes: int = RECORDS_BYTES_MAX
) -> str | None:
    """What a framed, CRC-valid batch header claims that cannot be true, or None.

    Checked without decoding records (cheap enough for every leader append): producer
    id, epoch and sequence ranges; timestamps; and whether the body can hold
    `record_count` records (uncompressed: at `MIN_RECORD_BYTES` each; compressed: within
    `max_records_bytes` once expanded, which `decode_records` enforces).
    """
    return fields_content_problem(
        msgspec.structs.astuple(header),
        max_records_bytes=max_records_bytes,
    )


def fields_content_problem(
    fields: HeaderFields, *, max_records_bytes: int = RECORDS_BYTES_MAX
) -> str | None:
    """`content_problem` of raw header fields (`header_fields`): the one home of the
    rules, on the fields the leader's append path has without building a struct."""
    # Fast path (every leader append): one expression; the explanation only on failure.
    count = fields[13]
    producer_id = fields[10]
    producer_epoch = fields[11]
    base_sequence = fields[12]
    if (
        (
            (
                producer_id == NO_PRODUCER_ID
                and producer_epoch >= NO_PRODUCER_ID
                and base_sequence >= NO_PRODUCER_ID
            )
            or (
                producer_id >= 0
                and 0 <= producer_epoch <= PRODUCER_EPOCH_MAX
                and base_sequence >= 0
            )
        )
        and fields[8] >= NO_TIMESTAMP
        and fields[9] >= NO_TIMESTAMP
        and (
            count * MIN_RECORD_BYTES + 5 <= fields[1] - _BODY_LENGTH_OFFSET
            if fields[6] & _COMPRESSION_MASK == 0
            else count * MIN_RECORD_BYTES <= max_records_bytes
        )
    ):
        return None
    return _explain_content_problem(header_from_fields(fields), max_records_bytes)


#: `batch_length` minus this is the size of the records section.
_BODY_LENGTH_OFFSET: Final = HEADER_SIZE - LENGTH_PREFIX_SIZE


def _explain_content_problem(header: BatchHeader, max_records_bytes: int) -> str | None:
    producer_id = header.producer_id
    if producer_id < NO_PRODUCER_ID:
        return f"producer id {producer_id} is negative (only -1, no producer, is allowed)"
    if producer_id != NO_PRODUCER_ID:
        if not 0 <= header.producer_epoch <= PRODUCER_EPOCH_MAX:
            return (
                f"producer epoch {header.producer_epoch} of producer {producer_id} is outside "
                f"[0, {PRODUCER_EPOCH_MAX}]"
            )
        if header.base_sequence < 0:
            return f"base sequence {header.base_sequence} of producer {producer_id} is negative"
    elif header.producer_epoch < NO_PRODUCER_ID or header.base_sequence < NO_PRODUCER_ID:
        return (
            f"producer epoch {header.producer_epoch} / base sequence {header.base_sequence} "
            "below -1"
        )
    for name, value in (
        ("first timestamp", header.first_timestamp_ms),
        ("max timestamp", header.max_timestamp_ms),
    ):
        if value < NO_TIMESTAMP:
            return f"{name} {value} is negative (only -1, no timestamp, is allowed)"
    count = header.record_count
    body_bytes = header.size - HEADER_SIZE
    if header.attributes & _COMPRESSION_MASK == Compression.NONE:
        needed = _array_header_bytes(count) + count * MIN_RECORD_BYTES
        if needed > body_bytes:
            return (
                f"record count {count} needs at least {needed} bytes of records, "
                f"the batch holds {body_bytes}"
            )
    elif count * MIN_RECORD_BYTES > max_records_bytes:
        return (
            f"record count {count} cannot fit in {max_records_bytes} bytes of records "
            "(the records size limit)"
        )
    return None


def check_contents(header: BatchHeader, *, max_records_bytes: int = RECORDS_BYTES_MAX) -> None:
    """Raise `CorruptBatchError` naming the problem if `content_problem` finds one."""
    problem = content_problem(header, max_records_bytes=max_records_bytes)
    if problem is not None:
        raise CorruptBatchError(f"batch at offset {header.base_offset}: {problem}")


def iter_batches(
    buf: bytes | memoryview, *, verify_crc: bool = True
) -> Iterator[tuple[int, BatchHeader]]:
    """Yield `(position, header)` for each batch of a concatenation of batches.

    Every batch is validated; the first bad one raises `CorruptBatchError`, so a caller
    that needs all-or-nothing semantics should consume the whole iterator first.
    """
    pos = 0
    end = len(buf)
    while pos < end:
        header = parse_header(buf, pos, verify_crc=verify_crc)
        yield pos, header
        pos += header.size


def decode_records(
    batch: bytes | memoryview, *, max_records_bytes: int = RECORDS_BYTES_MAX
) -> tuple[BatchHeader, list[RecordTuple]]:
    """Validate one batch fully and decode its records (one msgspec call).

    Returns the header and the records as `(timestamp_delta_ms, key, value, headers)`
    tuples; record `i` has offset `header.base_offset + i` and timestamp
    `header.first_timestamp_ms + timestamp_delta_ms` (or `header.max_timestamp_ms` for
    LogAppendTime batches). Raises `CorruptBatchError` naming the problem when the batch
    fails framing or contents validation, its records expand beyond
    `max_records_bytes`, or the body is not exactly `record_count` records.
    """
    return _decode(batch, _records_decoder, max_records_bytes)


def decode_rows(
    batch: bytes | memoryview, *, max_records_bytes: int = RECORDS_BYTES_MAX
) -> tuple[BatchHeader, list[RecordRow]]:
    """`decode_records` with each record as a `RecordRow` struct (cheaper in bulk)."""
    return _decode(batch, _rows_decoder, max_records_bytes)


_Row = TypeVar("_Row")


def _decode(
    batch: bytes | memoryview, decoder: msgspec.msgpack.Decoder[list[_Row]], max_records_bytes: int
) -> tuple[BatchHeader, list[_Row]]:
    header = parse_header(batch)
    check_contents(header, max_records_bytes=max_records_bytes)
    body = _decompress(
        header.compression,
        memoryview(batch)[HEADER_SIZE : header.size],
        max_bytes=max_records_bytes,
    )
    if len(body) > max_records_bytes:
        raise CorruptBatchError(
            f"batch at offset {header.base_offset}: {len(body)} bytes of records exceed "
            f"{max_records_bytes} (the records size limit)"
        )
    try:
        rows = decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise CorruptBatchError(
            f"batch at offset {header.base_offset}: records are not a valid record list: {exc}"
        ) from exc
    if len(rows) != header.record_count:
        raise CorruptBatchError(
            f"batch at offset {header.base_offset} says {header.record_count} records but "
            f"holds {len(rows)}"
        )
    return header, rows
