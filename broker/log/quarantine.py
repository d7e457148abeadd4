"""Quarantine: writes the loss receipt and keeps the discarded batches of every truncation.

Caller: `Partition` (broker/replica/partition.py) around each truncation of a non-empty
suffix (divergence after an epoch change, an out-of-range reset); the broker's metrics
read `Quarantine.totals`. The operator learns exactly what a truncation (an unclean
election, a power loss of the last in-sync replica) cost, and can replay it with
`minikafka log lost DIR --print-records`. The receipt, its files and the reading side
are in `broker/log/loss_receipt.py`.

Rules:

- Nothing is truncated before its receipt is durable: the pending receipt file (the
  receipt line, then the batches if kept) is written to a temporary file, fsynced,
  renamed, and the directory fsynced (two fsyncs, as many as the truncation's own epoch
  checkpoint), then the log is truncated. The removed byte range is read once (one read
  per segment) and written once; the receipt's offsets, epochs and counts come from the
  log's offsets and epoch cache, without decoding a batch.
- A crash between the receipt and the truncation leaves a pending receipt and an
  untruncated log. The partition's next truncation that removes the same suffix (same
  offsets, bytes and epochs) reuses it instead of writing a second one. Any other
  truncation first settles it: void (deleted) when the log still holds those batches,
  since nothing was lost, confirmed when it no longer does (the truncation happened,
  only the rename was lost). Opening the partition confirms such a receipt at once.
- Bound (`--quarantine-max-bytes`, per broker, default `QUARANTINE_MAX_BYTES_DEFAULT`):
  the kept batches of every partition of the broker together. Keeping new batches evicts
  the oldest batches first (by the time their file was written); their receipts stay,
  rewritten without them and marked `evicted`. A bound of 0 keeps receipts only.
- One truncation copies at most `--quarantine-max-copy-bytes` (default
  `QUARANTINE_MAX_COPY_BYTES_DEFAULT`): the copy and its fsync run on the follower's
  fetch path, on the event loop, which must keep heartbeating (measured with
  `python -m benchmarks.quarantine_bench`: 150-230 MiB/s, so the default pauses it for
  about 0.2 s at most). A larger discard, or one larger than the whole bound, keeps only
  its receipt (`too-large`).
- Receipts are small (under 1 KiB) and kept, at most `MAX_RECEIPTS_PER_PARTITION` per
  partition (the oldest, with its batches, removed first). Deleting a topic deletes its
  quarantine with the partition directory.
"""

from __future__ import annotations

import heapq
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Final, Literal

import msgspec

from broker.log.checkpoint import TMP_SUFFIX, atomic_write, fsync_dir
from broker.log.disk import OS_DISK, Disk
from broker.log.errors import LogStorageError
from broker.log.loss_receipt import (
    DIR_NAME,
    PENDING_SUFFIX,
    EpochRange,
    LossReceipt,
    StoredReceipt,
    TruncationCause,
    discarded_epochs,
    encode_receipt,
    format_epochs,
    format_time_ms,
    parse_name,
    receipt_name,
    records_below,
    same_discard,
    still_held,
    stored_receipt,
)
from broker.log.partition_log import LogSuffix, PartitionLog

logger = logging.getLogger(__name__)

#: Default of `--quarantine-max-bytes`: kept discarded batches per broker.
QUARANTINE_MAX_BYTES_DEFAULT: Final = 256 * 1024 * 1024
#: Default of `--quarantine-max-copy-bytes`: the most one truncation copies.
QUARANTINE_MAX_COPY_BYTES_DEFAULT: Final = 32 * 1024 * 1024
#: Receipts kept per partition; beyond it the oldest goes, with its batches.
MAX_RECEIPTS_PER_PARTITION: Final = 1000
_IOV_MAX: Final = 1024


QuarantineStep = Literal["keep", "evict-oldest", "too-large"]


def quarantine_step(
    *, kept_bytes: int, incoming_bytes: int, max_bytes: int, max_copy_bytes: int
) -> QuarantineStep:
    """What to do before keeping `incoming_bytes` of batches when `kept_bytes` are kept:
    keep them, evict the oldest kept batches first (then ask again), or keep only the
    receipt because they alone exceed the bound `max_bytes` or what one truncation may
    copy, `max_copy_bytes`."""
    if incoming_bytes > min(max_bytes, max_copy_bytes):
        return "too-large"
    if kept_bytes + incoming_bytes > max_bytes:
        return "evict-oldest"
    return "keep"


def _write_synced(path: Path, chunks: Sequence[bytes], disk: Disk) -> None:
    """Write `chunks` to a temporary file, fsync it and rename it to `path` (the caller
    fsyncs the directory)."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = disk.open(str(tmp), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        pending: list[bytes | bytearray | memoryview] = [
            memoryview(chunk) for chunk in chunks if chunk
        ]
        position = 0
        while pending:
            written = disk.pwritev(fd, pending[:_IOV_MAX], position)
            position += written
            while pending and written >= len(pending[0]):
                written -= len(pending[0])
                pending.pop(0)
            if written:
                pending[0] = pending[0][written:]
        disk.fsync(fd)
    except BaseException:
        disk.close(fd)
        disk.unlink(tmp, missing_ok=True)
        raise
    disk.close(fd)
    disk.replace(tmp, path)


# ---- the broker's quarantine ------------------------------------------------------------


class DiscardTotals(msgspec.Struct, kw_only=True):
    """What this broker's truncations discarded since it started (the metrics)."""

    records_below_high_watermark: int = 0
    records_above_high_watermark: int = 0
    bytes_below_high_watermark: int = 0
    bytes_above_high_watermark: int = 0
    receipts: int = 0


class Quarantine:
    """The quarantines of one broker's partitions and their shared bound.

    Caller: the replica manager (one per broker; `for_log` per partition it opens,
    `forget` when it deletes one). Runs on the event loop, synchronously, as the
    truncations it serves.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        max_bytes: int,
        max_copy_bytes: int = QUARANTINE_MAX_COPY_BYTES_DEFAULT,
        disk: Disk = OS_DISK,
    ) -> None:
        if max_bytes < 0 or max_copy_bytes < 0:
            raise ValueError(
                f"quarantine bounds must be >= 0, got {max_bytes} and {max_copy_bytes}"
            )
        self.max_copy_bytes = max_copy_bytes
        self.data_dir = data_dir
        #: Where the receipts live (the log manager's disk).
        self.disk = disk
        self.max_bytes = max_bytes
        self.totals = DiscardTotals()
        self.kept_bytes = 0
        #: (directory, sequence) -> (time the batches were written, ns; size in bytes)
        self._kept: dict[tuple[str, int], tuple[int, int]] = {}
        self._by_dir: dict[str, set[int]] = {}
        #: Eviction order, oldest first; entries no longer in `_kept` are skipped.
        self._heap: list[tuple[int, str, int]] = []
        if data_dir.is_dir():
            for directory in sorted(data_dir.glob(f"*/{DIR_NAME}")):
                self._index(directory)

    def _index(self, directory: Path) -> list[int]:
        """(Re)read one quarantine directory: drop leftovers of interrupted writes
        (temporary files), account its kept batches. Returns its receipt sequences, oldest
        first."""
        self.forget(directory.parent)
        sequences: list[int] = []
        key = str(directory)
        for entry in sorted(directory.iterdir()):
            if entry.name.endswith(TMP_SUFFIX):
                self.disk.unlink(entry, missing_ok=True)
                continue
            parsed = parse_name(entry.name)
            if parsed is None:
                continue
            sequences.append(parsed[0])
            try:
                stored = stored_receipt(entry, pending=parsed[1] == PENDING_SUFFIX)
            except LogStorageError as exc:
                logger.warning("%s (`minikafka log lost` reports it)", exc)
                continue
            if stored.receipt.batches == "kept":
                time_ns = entry.stat().st_mtime_ns
                self._account(key, parsed[0], time_ns, stored.batches_size)
        return sorted(set(sequences))

    def _account(self, key: str, sequence: int, time_ns: int, size: int) -> None:
        self._kept[(key, sequence)] = (time_ns, size)
        self._by_dir.setdefault(key, set()).add(sequence)
        heapq.heappush(self._heap, (time_ns, key, sequence))
        self.kept_bytes += size
        if len(self._heap) > 2 * len(self._kept) + 64:  # bounded: drop stale entries
            self._heap = [(t, k, s) for (k, s), (t, _) in self._kept.items()]
            heapq.heapify(self._heap)

    def _unaccount(self, key: str, sequence: int) -> None:
        found = self._kept.pop((key, sequence), None)
        if found is not None:
            self.kept_bytes -= found[1]
            self._by_dir.get(key, set()).discard(sequence)

    def forget(self, partition_dir: Path) -> None:
        """A partition directory is gone (or about to be re-read): stop counting its
        batches."""
        key = str(partition_dir / DIR_NAME)
        for sequence in self._by_dir.pop(key, set()):
            found = self._kept.pop((key, sequence), None)
            if found is not None:
                self.kept_bytes -= found[1]

    def for_log(self, log: PartitionLog) -> PartitionQuarantine:
        """The quarantine of one partition log (read from disk now)."""
        directory = log.directory / DIR_NAME
        sequences = self._index(directory) if directory.is_dir() else []
        pending: StoredReceipt | None = None
        if sequences:
            newest = directory / receipt_name(sequences[-1], pending=True)
            if newest.exists():
                try:
                    pending = stored_receipt(newest, pending=True)
                except LogStorageError as exc:
                    # Never keep a partition offline for a damaged receipt: `log lost`
                    # reports it; the next receipt takes the next sequence.
                    logger.warning("%s; treating it as settled", exc)
        return PartitionQuarantine(self, log, directory, sequences, pending)

    def too_large_note(self, size_bytes: int) -> str:
        if size_bytes > self.max_copy_bytes:
            limit = f"the most one truncation copies, {self.max_copy_bytes} bytes"
            flag = "--quarantine-max-copy-bytes"
        else:
            limit = f"this broker's quarantine bound of {self.max_bytes} bytes"
            flag = "--quarantine-max-bytes"
        return f"{size_bytes} bytes of batches exceed {limit} ({flag}): receipt only"

    def make_room(self, incoming_bytes: int, *, now_ms: int) -> bool:
        """Evict the oldest kept batches until `incoming_bytes` fit; False when they
        cannot fit at all (larger than the bound)."""
        while True:
            step = quarantine_step(
                kept_bytes=self.kept_bytes,
                incoming_bytes=incoming_bytes,
                max_bytes=self.max_bytes,
                max_copy_bytes=self.max_copy_bytes,
            )
            if step == "keep":
                return True
            if step == "too-large" or not self._heap:
                return False
            time_ns, key, sequence = heapq.heappop(self._heap)
            if self._kept.get((key, sequence), (None, 0))[0] != time_ns:
                continue  # stale heap entry
            self._evict(Path(key), sequence, now_ms=now_ms)

    def _evict(self, directory: Path, sequence: int, *, now_ms: int) -> None:
        """Rewrite a receipt file without its batches (the receipt says so)."""
        self._unaccount(str(directory), sequence)
        for pending in (False, True):
            path = directory / receipt_name(sequence, pending=pending)
            if not path.exists():
                continue
            try:
                receipt = stored_receipt(path, pending=pending).receipt
            except LogStorageError as exc:
                logger.warning("%s; removing it to evict its batches", exc)
                self.disk.unlink(path, missing_ok=True)
                return
            note = (
                f"batches evicted at {format_time_ms(now_ms)} to keep this broker's "
                f"quarantine within {self.max_bytes} bytes (--quarantine-max-bytes)"
            )
            evicted = msgspec.structs.replace(receipt, batches="evicted", note=note)
            atomic_write(path, encode_receipt(evicted), disk=self.disk)
            logger.info("%s: evicted the batches of receipt %s", directory, sequence)
            return


class PartitionQuarantine:
    """The receipts of one partition: written before a truncation, confirmed after it."""

    def __init__(
        self,
        owner: Quarantine,
        log: PartitionLog,
        directory: Path,
        sequences: list[int],
        pending: StoredReceipt | None,
    ) -> None:
        self._owner = owner
        self.directory = directory
        self._sequences = sequences
        #: Sequences only grow (a voided receipt's number is not reused in this process).
        self._last_sequence = sequences[-1] if sequences else 0
        self._pending = pending
        if pending is not None and not self._log_holds(log, pending.receipt):
            # The truncation happened before the crash; only the rename was lost.
            self._confirm(pending.receipt.sequence)

    @property
    def pending(self) -> LossReceipt | None:
        return self._pending.receipt if self._pending is not None else None

    @staticmethod
    def _log_holds(log: PartitionLog, receipt: LossReceipt) -> bool:
        epochs = discarded_epochs(
            _epoch_entries(log), receipt.start_offset, min(receipt.end_offset, log.log_end_offset)
        )
        return still_held(receipt, log.log_end_offset, epochs)

    def before_truncation(
        self,
        log: PartitionLog,
        *,
        offset: int,
        cause: TruncationCause,
        broker_id: int,
        leader_id: int,
        leader_epoch: int,
        now_ms: int,
    ) -> LossReceipt | None:
        """Make the receipt of `log.truncate_to(offset)` (`offset` <= the log start: of
        emptying the log) durable, with the batches if they fit the bound. Returns it
        (None when nothing would be discarded); pass it to `after_truncation`. Raises
        `LogStorageError` when it cannot be written: do not truncate then."""
        owner = self._owner
        hw = log.high_watermark
        suffix = log.truncation_suffix(
            offset, split_offset=hw, read_max_bytes=min(owner.max_bytes, owner.max_copy_bytes)
        )
        if suffix.size_bytes == 0:
            return None
        epochs = discarded_epochs(_epoch_entries(log), suffix.start_offset, suffix.end_offset)
        below = records_below(suffix.start_offset, suffix.end_offset, hw)
        try:
            pending = self._pending
            if pending is not None:
                if same_discard(pending.receipt, suffix, epochs):
                    logger.info(
                        "%s: receipt %s, written before a crash, already covers this truncation",
                        self.directory,
                        pending.receipt.sequence,
                    )
                    self._count(suffix, below)
                    return pending.receipt
                self._settle(log, pending.receipt)
            receipt = self._write(
                suffix,
                epochs,
                below=below,
                cause=cause,
                topic=log.topic,
                partition=log.partition,
                broker_id=broker_id,
                leader_id=leader_id,
                leader_epoch=leader_epoch,
                high_watermark=hw,
                now_ms=now_ms,
            )
        except OSError as exc:
            raise LogStorageError(
                f"{log.name}: cannot write the loss receipt, so not truncating: {exc}"
            ) from exc
        self._count(suffix, below)
        return receipt

    def after_truncation(self, receipt: LossReceipt | None) -> None:
        """The truncation `receipt` describes is done: confirm it."""
        if receipt is not None:
            self._confirm(receipt.sequence)

    def _count(self, suffix: LogSuffix, below: int) -> None:
        totals = self._owner.totals
        totals.receipts += 1
        totals.records_below_high_watermark += below
        totals.records_above_high_watermark += suffix.end_offset - suffix.start_offset - below
        totals.bytes_below_high_watermark += suffix.bytes_below_split
        totals.bytes_above_high_watermark += suffix.size_bytes - suffix.bytes_below_split

    def _settle(self, log: PartitionLog, receipt: LossReceipt) -> None:
        """A pending receipt that does not describe the truncation about to happen."""
        if self._log_holds(log, receipt):
            logger.info(
                "%s: voiding receipt %s: the log still holds what it describes",
                self.directory,
                receipt.sequence,
            )
            self._delete(receipt.sequence)
            fsync_dir(self.directory, disk=self._owner.disk)
        else:
            self._confirm(receipt.sequence)

    def _write(
        self,
        suffix: LogSuffix,
        epochs: list[EpochRange],
        *,
        below: int,
        cause: TruncationCause,
        topic: str,
        partition: int,
        broker_id: int,
        leader_id: int,
        leader_epoch: int,
        high_watermark: int,
        now_ms: int,
    ) -> LossReceipt:
        owner = self._owner
        sequence = self._last_sequence + 1
        keep = suffix.chunks is not None and owner.make_room(suffix.size_bytes, now_ms=now_ms)
        receipt = LossReceipt(
            sequence=sequence,
            topic=topic,
            partition=partition,
            time_ms=now_ms,
            broker_id=broker_id,
            leader_id=leader_id,
            leader_epoch=leader_epoch,
            reason=cause.reason,
            detail=cause.detail,
            start_offset=suffix.start_offset,
            end_offset=suffix.end_offset,
            epochs=epochs,
            record_count=suffix.end_offset - suffix.start_offset,
            byte_count=suffix.size_bytes,
            high_watermark=high_watermark,
            below_high_watermark_records=below,
            below_high_watermark_bytes=suffix.bytes_below_split,
            batches="kept" if keep else "too-large",
            note="" if keep else owner.too_large_note(suffix.size_bytes),
        )
        directory = self.directory
        disk = owner.disk
        if not directory.is_dir():
            disk.mkdir(directory, exist_ok=True)
            fsync_dir(directory.parent, disk=disk)
        line = encode_receipt(receipt)
        path = directory / receipt_name(sequence, pending=True)
        _write_synced(path, [line, *(suffix.chunks or [])] if keep else [line], disk)
        fsync_dir(directory, disk=disk)
        if keep:
            owner._account(str(directory), sequence, path.stat().st_mtime_ns, suffix.size_bytes)
        self._sequences.append(sequence)
        self._last_sequence = sequence
        self._pending = StoredReceipt(
            receipt=receipt,
            path=str(path),
            pending=True,
            batches_position=len(line),
            batches_size=suffix.size_bytes if keep else 0,
        )
        logger.log(
            logging.WARNING if below else logging.INFO,
            "%s: loss receipt %s: discarding offsets %s-%s (%s records, %s bytes, %s below the "
            "high watermark %s; epochs %s), batches %s: %s",
            directory,
            sequence,
            receipt.start_offset,
            receipt.end_offset - 1,
            receipt.record_count,
            receipt.byte_count,
            below,
            high_watermark,
            format_epochs(epochs),
            receipt.batches,
            cause.detail,
        )
        return receipt

    def _confirm(self, sequence: int) -> None:
        """Rename a pending receipt to its final name (no fsync: a lost rename leaves it
        pending, which the next start or truncation settles)."""
        if self._pending is not None and self._pending.receipt.sequence == sequence:
            self._pending = None
        try:
            self._owner.disk.replace(
                self.directory / receipt_name(sequence, pending=True),
                self.directory / receipt_name(sequence),
            )
        except FileNotFoundError:
            pass
        except OSError as exc:
            logger.warning("%s: cannot confirm receipt %s: %s", self.directory, sequence, exc)
        self._trim()

    def _trim(self) -> None:
        """Keep at most MAX_RECEIPTS_PER_PARTITION receipts (oldest removed first)."""
        while len(self._sequences) > MAX_RECEIPTS_PER_PARTITION:
            oldest = self._sequences[0]
            if self._pending is not None and self._pending.receipt.sequence == oldest:
                return
            self._delete(oldest)

    def _delete(self, sequence: int) -> None:
        if self._pending is not None and self._pending.receipt.sequence == sequence:
            self._pending = None
        self._owner._unaccount(str(self.directory), sequence)
        for pending in (True, False):
            self._owner.disk.unlink(
                self.directory / receipt_name(sequence, pending=pending), missing_ok=True
            )
        if sequence in self._sequences:
            self._sequences.remove(sequence)


def _epoch_entries(log: PartitionLog) -> list[tuple[int, int]]:
    return [(entry.epoch, entry.start_offset) for entry in log.epoch_cache.entries()]
