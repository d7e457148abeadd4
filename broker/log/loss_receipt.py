"""Loss receipts: what one truncation of a replica's log discarded, and how to read it.

Caller: `broker/log/quarantine.py` (writes receipts before truncations), `minikafka log
lost` and the fault suite's checker (read them). Pure rules over receipts (the epoch
ranges and committed records of a discard, whether a receipt describes a given discard,
the one-line format) and the reading side of the files.

Files, next to the log, in `DATA/<topic>-<partition>/quarantine/`, one per truncation:

    <sequence>.receipt.pending   written before truncating
    <sequence>.receipt           the same file, renamed once the truncation is done

Each holds one line of JSON (`LossReceipt`) and then, when `batches` is `kept`, the
discarded batches byte for byte (`byte_count` bytes, the segment format). One file, so
one fsync makes a receipt durable. A receipt's offsets, epochs and counts come from the
log's offsets and epoch cache, so it is complete even when its batches were not kept
(`batches`: `too-large`, `evicted`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Final, Literal

import msgspec

from broker.log import directory_state
from broker.log.errors import LogStorageError
from broker.log.manager import LOCK_NAME, parse_partition_dir
from broker.log.partition_log import LogSuffix
from minikafka.record_batch import (
    CorruptBatchError,
    TimestampType,
    decode_records,
    iter_batches,
)

DIR_NAME: Final = "quarantine"
RECEIPT_SUFFIX: Final = ".receipt"
PENDING_SUFFIX: Final = ".receipt.pending"
RECEIPT_VERSION: Final = 1
_SUFFIXES: Final = (RECEIPT_SUFFIX, PENDING_SUFFIX)

#: Why a replica truncated: the leader answered a fetch with a diverging epoch; the
#: leader's log ends before ours (out-of-range reset); the leader's log starts beyond
#: our log end (out-of-range reset: the whole log restarts there).
Reason = Literal["divergence", "leader-log-end", "leader-log-start"]
#: Where the discarded batches are: after the receipt line in its file; removed to stay
#: within the bound; never kept, because the discard alone exceeds the bound.
BatchesState = Literal["kept", "evicted", "too-large"]


# ---- the receipt and the pure rules -----------------------------------------------------


class EpochRange(msgspec.Struct, frozen=True, kw_only=True):
    """Offsets [start_offset, end_offset) written in one leader epoch (-1: offsets the
    epoch cache does not cover)."""

    epoch: int
    start_offset: int
    end_offset: int


class TruncationCause(msgspec.Struct, frozen=True, kw_only=True):
    reason: Reason
    detail: str


def divergence_cause(epoch: int, end_offset: int, leader_id: int) -> TruncationCause:
    return TruncationCause(
        reason="divergence",
        detail=f"diverging epoch {epoch} at offset {end_offset} from leader {leader_id}",
    )


def leader_log_end_cause(leader_log_end_offset: int, leader_id: int) -> TruncationCause:
    return TruncationCause(
        reason="leader-log-end",
        detail=(
            f"leader {leader_id}'s log ends at {leader_log_end_offset}, before ours "
            "(out-of-range reset)"
        ),
    )


def leader_log_start_cause(
    leader_log_start_offset: int, log_end_offset: int, leader_id: int
) -> TruncationCause:
    return TruncationCause(
        reason="leader-log-start",
        detail=(
            f"leader {leader_id}'s log starts at {leader_log_start_offset}, beyond our log "
            f"end {log_end_offset}: the whole log restarts there (out-of-range reset)"
        ),
    )


class LossReceipt(msgspec.Struct, frozen=True, kw_only=True):
    """What one truncation of one replica discarded (the JSON of a receipt file)."""

    version: int = RECEIPT_VERSION
    sequence: int
    topic: str
    partition: int
    time_ms: int
    broker_id: int
    #: The leader this replica followed, and its leader epoch, when it truncated.
    leader_id: int
    leader_epoch: int
    reason: Reason
    detail: str
    #: Discarded offsets [start_offset, end_offset), by leader epoch.
    start_offset: int
    end_offset: int
    epochs: list[EpochRange]
    record_count: int
    byte_count: int
    #: This replica's high watermark when it truncated, and what it discarded below it:
    #: records it knew were committed (a loss, not just an uncommitted tail). Bytes count
    #: whole batches holding at least one such record.
    high_watermark: int
    below_high_watermark_records: int
    below_high_watermark_bytes: int
    batches: BatchesState
    note: str = ""


def discarded_epochs(
    entries: Sequence[tuple[int, int]], start_offset: int, end_offset: int
) -> list[EpochRange]:
    """The leader epochs of offsets [start_offset, end_offset), from an epoch cache given
    as `(epoch, start offset)` pairs in increasing order; offsets before its first entry
    get epoch -1."""
    ranges: list[EpochRange] = []
    first_known = entries[0][1] if entries else end_offset
    if start_offset < min(first_known, end_offset):
        ranges.append(
            EpochRange(epoch=-1, start_offset=start_offset, end_offset=min(first_known, end_offset))
        )
    for i, (epoch, epoch_start) in enumerate(entries):
        epoch_end = entries[i + 1][1] if i + 1 < len(entries) else end_offset
        low, high = max(epoch_start, start_offset), min(epoch_end, end_offset)
        if low < high:
            ranges.append(EpochRange(epoch=epoch, start_offset=low, end_offset=high))
    return ranges


def records_below(start_offset: int, end_offset: int, high_watermark: int) -> int:
    """How many of the offsets [start_offset, end_offset) are below `high_watermark`."""
    return max(0, min(high_watermark, end_offset) - start_offset)


def same_discard(receipt: LossReceipt, suffix: LogSuffix, epochs: Sequence[EpochRange]) -> bool:
    """Whether `suffix` (with `epochs`) is the discard `receipt` describes."""
    return (
        receipt.start_offset == suffix.start_offset
        and receipt.end_offset == suffix.end_offset
        and receipt.byte_count == suffix.size_bytes
        and list(receipt.epochs) == list(epochs)
    )


def still_held(receipt: LossReceipt, log_end_offset: int, epochs: Sequence[EpochRange]) -> bool:
    """Whether a log still holds what `receipt` discards: it reaches its end offset and
    has the same epochs over its range (`epochs`, from the log's epoch cache)."""
    return log_end_offset >= receipt.end_offset and list(receipt.epochs) == list(epochs)


def format_epochs(epochs: Sequence[EpochRange]) -> str:
    return ",".join(f"{r.epoch}:{r.start_offset}-{r.end_offset - 1}" for r in epochs) or "-"


def format_time_ms(time_ms: int) -> str:
    """UTC, ISO 8601 with milliseconds."""
    seconds, millis = divmod(time_ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


# ---- files ----------------------------------------------------------------------------


def receipt_name(sequence: int, *, pending: bool = False) -> str:
    return f"{sequence:020d}{PENDING_SUFFIX if pending else RECEIPT_SUFFIX}"


def parse_name(name: str) -> tuple[int, str] | None:
    """(sequence, suffix) of a quarantine file name, None for any other name."""
    stem, dot, rest = name.partition(".")
    suffix = dot + rest
    if len(stem) == 20 and stem.isdigit() and suffix in _SUFFIXES:
        return int(stem), suffix
    return None


class StoredReceipt(msgspec.Struct, frozen=True, kw_only=True):
    """A receipt as found on disk."""

    receipt: LossReceipt
    path: str
    #: Written before a truncation that is not confirmed yet (`quarantine` module rules).
    pending: bool
    #: Where the batches start in the file (after the receipt line), and the bytes there.
    batches_position: int
    batches_size: int

    @property
    def has_batches(self) -> bool:
        """The batches are kept, and all there."""
        return self.receipt.batches == "kept" and self.batches_size == self.receipt.byte_count


def format_receipt(stored: StoredReceipt) -> str:
    """One `key: value` line per receipt (`minikafka log lost`); the free-text fields
    (`detail`, then `note`) come last."""
    r = stored.receipt
    line = (
        f"receipt: {r.sequence} topic: {r.topic} partition: {r.partition} "
        f"time: {format_time_ms(r.time_ms)} broker: {r.broker_id} leader: {r.leader_id} "
        f"leaderEpoch: {r.leader_epoch} reason: {r.reason} "
        f"offsets: {r.start_offset}-{r.end_offset - 1} epochs: {format_epochs(r.epochs)} "
        f"records: {r.record_count} bytes: {r.byte_count} highWatermark: {r.high_watermark} "
        f"belowHighWatermark: {r.below_high_watermark_records} "
        f"bytesBelowHighWatermark: {r.below_high_watermark_bytes} batches: {r.batches} "
        f"file: {stored.path} state: {'pending' if stored.pending else 'confirmed'} "
        f"detail: {r.detail}"
    )
    return f"{line} note: {r.note}" if r.note else line


_receipt_encoder = msgspec.json.Encoder()
_receipt_decoder = msgspec.json.Decoder(LossReceipt)


def encode_receipt(receipt: LossReceipt) -> bytes:
    """The receipt line (JSON never holds a raw newline)."""
    return _receipt_encoder.encode(receipt) + b"\n"


def stored_receipt(path: Path, *, pending: bool) -> StoredReceipt:
    """Read one receipt file's receipt line; raises `LogStorageError` if it is not one."""
    with path.open("rb") as file:
        line = file.readline()
        size = file.seek(0, 2)
    try:
        receipt = _receipt_decoder.decode(line)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise LogStorageError(f"{path}: not a loss receipt: {exc}") from exc
    return StoredReceipt(
        receipt=receipt,
        path=str(path),
        pending=pending,
        batches_position=len(line),
        batches_size=size - len(line),
    )


def read_batches(stored: StoredReceipt) -> bytes:
    """The kept batches of a receipt (empty when not kept)."""
    if stored.receipt.batches != "kept":
        return b""
    with Path(stored.path).open("rb") as file:
        file.seek(stored.batches_position)
        return file.read()


def read_receipts(directory: Path) -> tuple[list[StoredReceipt], list[str]]:
    """The receipts of one quarantine directory, oldest first, and a problem line per
    file that could not be read (a missing directory has none)."""
    stored: list[StoredReceipt] = []
    problems: list[str] = []
    if not directory.is_dir():
        return stored, problems
    for entry in sorted(directory.iterdir(), key=lambda p: p.name):
        parsed = parse_name(entry.name)
        if parsed is None:
            continue
        try:
            stored.append(stored_receipt(entry, pending=parsed[1] == PENDING_SUFFIX))
        except (OSError, LogStorageError) as exc:
            problems.append(str(exc))
    return stored, problems


class DiscardedRecord(msgspec.Struct, frozen=True, kw_only=True):
    """One record of a quarantined batch."""

    offset: int
    leader_epoch: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] | None


def quarantined_records(stored: StoredReceipt) -> Iterator[DiscardedRecord]:
    """The discarded records of a receipt whose batches are kept, in offset order, only
    those in its range (whole batches may hold offsets before the log start). Raises
    `CorruptBatchError` at a batch that fails validation."""
    receipt = stored.receipt
    data = read_batches(stored)
    view = memoryview(data)
    for position, header in iter_batches(data, verify_crc=False):
        _, records = decode_records(view[position : position + header.size])
        for i, (delta_ms, key, value, headers) in enumerate(records):
            offset = header.base_offset + i
            if not receipt.start_offset <= offset < receipt.end_offset:
                continue
            log_append = header.timestamp_type is TimestampType.LOG_APPEND_TIME
            yield DiscardedRecord(
                offset=offset,
                leader_epoch=header.leader_epoch,
                timestamp_ms=(
                    header.max_timestamp_ms if log_append else header.first_timestamp_ms + delta_ms
                ),
                key=key,
                value=value,
                headers=headers,
            )


def quarantine_dirs(path: Path) -> list[Path]:
    """The quarantine directories under `path`: a broker data directory (every
    partition's), a partition directory, or a quarantine directory itself. Raises
    `ValueError` for any other directory."""
    if not path.is_dir():
        raise ValueError(f"{path} is not a directory")
    if path.name == DIR_NAME:
        return [path]
    if parse_partition_dir(path.name) is not None and (
        (path / DIR_NAME).is_dir() or any(path.glob("*.log"))
    ):
        return [path / DIR_NAME] if (path / DIR_NAME).is_dir() else []
    partitions = [
        entry
        for entry in sorted(path.iterdir())
        if entry.is_dir() and parse_partition_dir(entry.name) is not None
    ]
    marked = (path / LOCK_NAME).exists() or (path / directory_state.META_NAME).exists()
    if not partitions and not marked:
        raise ValueError(
            f"{path} is neither a broker data directory, a partition directory "
            f"(DATA_DIR/TOPIC-PARTITION) nor a {DIR_NAME} directory"
        )
    return [entry / DIR_NAME for entry in partitions if (entry / DIR_NAME).is_dir()]


def check_batches(stored: StoredReceipt) -> str | None:
    """A problem with a receipt's kept batches, None when they are all there and frame
    cleanly (header and CRC of every batch)."""
    if stored.receipt.batches != "kept":
        return None
    if not stored.has_batches:
        return (
            f"the receipt keeps {stored.receipt.byte_count} bytes of batches, the file holds "
            f"{stored.batches_size}"
        )
    try:
        for _ in iter_batches(read_batches(stored)):
            pass
    except CorruptBatchError as exc:
        return f"kept batches: {exc}"
    return None
