"""PartitionLog: the ordered segments of one partition, its offsets, and crash recovery.

Caller: the replica layer (one writer per partition). Storage is synchronous; a lock
makes each public call atomic so a flush offloaded to a thread is safe.

Invariants maintained:
- offsets are contiguous: each batch's base offset is the previous batch's last + 1,
  and each segment's base offset is the previous segment's end;
- log_start_offset <= high_watermark <= log_end_offset, recovery_point <= log_end_offset;
- the epoch cache has no entry past the log end offset (one AT it marks the epoch a
  new leader will append in);
- a rejected append (bad CRC, empty, too large, offset gap) changes nothing.
"""

from __future__ import annotations

import bisect
import logging
import threading
from pathlib import Path
from typing import Final

import msgspec

from broker.log.checkpoint import TMP_SUFFIX, fsync_dir
from broker.log.checkpoint import atomic_write as checkpoint_write
from broker.log.config import LogConfig
from broker.log.disk import OS_DISK, Disk
from broker.log.epoch_cache import CHECKPOINT_NAME, LeaderEpochCache
from broker.log.errors import (
    CorruptRecordError,
    InconsistentEpochError,
    InconsistentOffsetError,
    InvalidRecordError,
    InvalidTimestampError,
    LogStorageError,
    OffsetOutOfRangeError,
    RecordTooLargeError,
)
from broker.log.file_budget import FileBudget
from broker.log.segment import INDEX_SUFFIX, LogSegment, parse_segment_name
from minikafka.record_batch import (
    F_ATTRIBUTES,
    F_BASE_OFFSET,
    F_BATCH_LENGTH,
    F_FIRST_TIMESTAMP,
    F_LAST_OFFSET_DELTA,
    F_LEADER_EPOCH,
    F_MAX_TIMESTAMP,
    F_RECORD_COUNT,
    LENGTH_PREFIX_SIZE,
    NO_TIMESTAMP,
    BatchHeader,
    Compression,
    CorruptBatchError,
    HeaderFields,
    check_and_stamp_create_time,
    decode_rows,
    fields_content_problem,
    scan_batches,
    stamp_all_in_place,
)

logger = logging.getLogger(__name__)

_COMPRESSION_MASK: Final = 0x07


class AppendInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What one append wrote."""

    first_offset: int
    last_offset: int
    record_count: int
    batch_count: int
    max_timestamp_ms: int
    log_append_time_ms: int  # -1 unless LogAppendTime
    size_bytes: int


class LogSuffix(msgspec.Struct, frozen=True, kw_only=True):
    """The batches a truncation would remove: `truncate_to(offset)`, or the whole log
    for `truncate_fully_and_start_at` (`PartitionLog.truncation_suffix`)."""

    #: First removed offset: the base offset of the batch holding the truncation offset
    #: (batch granularity), never below the log start offset; `end_offset` if nothing.
    start_offset: int
    end_offset: int  # the log end offset
    size_bytes: int
    #: Bytes of removed batches holding an offset below `split_offset` (the HW).
    bytes_below_split: int
    #: The removed bytes, whole batches, one chunk per segment (None: not read).
    chunks: list[bytes] | None


class ReadResult(msgspec.Struct, frozen=True, kw_only=True):
    """Whole batches read from the log."""

    records: bytes
    first_offset: int  # base offset of the first batch returned, -1 if empty
    next_offset: int  # offset after the last returned batch (the requested one if empty)


def validate_record_set(
    records: bytes | memoryview | bytearray,
) -> list[tuple[int, HeaderFields]]:
    """Validate the framing of every batch of an append (header, CRC, whole batches); all
    or nothing. What a follower checks: it appends exactly the leader's bytes. Returns
    `(position, raw header fields)` per batch (`record_batch.scan_batches`)."""
    if not records:
        raise InvalidRecordError("empty record set: an append needs at least one batch")
    try:
        return scan_batches(records, verify_crc=True)
    except CorruptBatchError as exc:
        raise CorruptRecordError(str(exc)) from exc


def validate_leader_record_set(
    records: bytes | memoryview | bytearray,
    config: LogConfig,
    *,
    now_ms: int,
    log_append_time: bool,
    walk_records: bool = False,
) -> list[tuple[int, HeaderFields]]:
    """What the leader checks before it assigns offsets; all or nothing, nothing decoded.

    Framing (`validate_record_set`), then per batch: its size against
    `max_message_bytes` (MESSAGE_TOO_LARGE), what its header may lie about
    (`record_batch.content_problem`: producer id/epoch/sequence ranges, timestamps >= -1,
    a record count the body can hold; INVALID_RECORD) and, for CreateTime topics, its
    first and max timestamps against `message.timestamp.before/after.max.ms` around
    `now_ms` (INVALID_TIMESTAMP; records are not decoded, so the first record's and the
    largest timestamp stand for the batch).

    Records are not decoded (as the design says): an uncompressed batch whose body is
    not a valid record list is stored and refused by consumers (`CorruptBatchError`).
    Kafka's LogValidator walks every record; `walk_records=True` does too (uncompressed
    batches only, as Kafka cannot without decompressing either): `benchmarks.storage_bench`
    measures what it would cost per append.

    Works on raw header fields (`record_batch.header_fields`): one `unpack_from` per
    batch and no struct built, as this runs for every batch of every produce.
    """
    scanned = validate_record_set(records)
    limit = config.max_message_bytes - LENGTH_PREFIX_SIZE  # on batch_length
    earliest_ms = now_ms - config.timestamp_before_max_ms
    latest_ms = now_ms + config.timestamp_after_max_ms
    for position, fields in scanned:
        if fields[F_BATCH_LENGTH] > limit:
            raise RecordTooLargeError(
                f"batch of {fields[F_BATCH_LENGTH] + LENGTH_PREFIX_SIZE} bytes exceeds "
                f"max.message.bytes={config.max_message_bytes}"
            )
        problem = fields_content_problem(fields)
        if problem is not None:
            raise InvalidRecordError(f"batch at byte {position}: {problem}")
        if not log_append_time:
            first_ms = fields[F_FIRST_TIMESTAMP]
            max_ms = fields[F_MAX_TIMESTAMP]
            if not (
                (earliest_ms <= first_ms <= latest_ms or first_ms == NO_TIMESTAMP)
                and (earliest_ms <= max_ms <= latest_ms or max_ms == NO_TIMESTAMP)
            ):
                name, timestamp_ms = (
                    ("first", first_ms)
                    if first_ms != NO_TIMESTAMP and not earliest_ms <= first_ms <= latest_ms
                    else ("max", max_ms)
                )
                raise InvalidTimestampError(
                    f"batch at byte {position}: {name} timestamp {timestamp_ms} is outside "
                    f"[{earliest_ms}, {latest_ms}] (message.timestamp.before.max.ms="
                    f"{config.timestamp_before_max_ms}, message.timestamp.after.max.ms="
                    f"{config.timestamp_after_max_ms} around the broker's clock)"
                )
        if walk_records and fields[F_ATTRIBUTES] & _COMPRESSION_MASK == Compression.NONE:
            end = position + fields[F_BATCH_LENGTH] + LENGTH_PREFIX_SIZE
            try:
                decode_rows(memoryview(records)[position:end])
            except CorruptBatchError as exc:
                raise InvalidRecordError(f"batch at byte {position}: {exc}") from exc
    return scanned


class PartitionLog:
    """The log of one partition: `DATA/<topic>-<partition>/` with its segments."""

    def __init__(
        self,
        directory: Path,
        config: LogConfig,
        *,
        topic: str,
        partition: int,
        segments: list[LogSegment],
        epoch_cache: LeaderEpochCache,
        log_start_offset: int,
        log_end_offset: int,
        high_watermark: int,
        recovery_point: int,
        files: FileBudget | None = None,
        disk: Disk = OS_DISK,
    ) -> None:
        """Use `PartitionLog.open`; this only binds already-recovered state."""
        self.directory = directory
        self._files = files
        #: Where the log's files live (production: `OS_DISK`).
        self.disk = disk
        self.config = config
        self.topic = topic
        self.partition = partition
        self.epoch_cache = epoch_cache
        self._segments = segments
        self._bases = [s.base_offset for s in segments]
        self.log_start_offset = log_start_offset
        self.log_end_offset = log_end_offset
        self.high_watermark = high_watermark
        self.recovery_point = recovery_point
        self._lock = threading.RLock()
        #: Rolled segments whose index is written by the next flush, off the append path.
        self._index_pending: list[LogSegment] = []
        self._unflushed_messages = 0
        self._first_unflushed_ms = -1
        self._dir_dirty = False
        self._closed = False
        #: Recovery at open cut more than a torn last batch (corruption, missing or
        #: misplaced segments): records this replica once had may be gone.
        self.recovery_found_damage = False

    def __repr__(self) -> str:
        return (
            f"PartitionLog({self.name}, start={self.log_start_offset}, "
            f"hw={self.high_watermark}, leo={self.log_end_offset})"
        )

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"

    @property
    def active_segment_base(self) -> int:
        """Base offset of the segment appends go to (changes when the log rolls)."""
        return self._bases[-1]

    # ------------------------------------------------------------------ open
    @classmethod
    def open(
        cls,
        directory: Path,
        config: LogConfig,
        *,
        topic: str,
        partition: int,
        recovery_point: int,
        log_start_offset: int,
        high_watermark: int,
        clean_shutdown: bool,
        now_ms: int,
        files: FileBudget | None = None,
        disk: Disk = OS_DISK,
    ) -> PartitionLog:
        """Open (creating if needed) and, after an unclean stop, recover a partition log.

        Unclean: every batch from the segment holding the recovery point on is validated
        (header, CRC, offset continuity); a torn or corrupt tail is cut off (logged at
        WARNING), later segments are deleted, indexes are rebuilt and the epoch cache is
        rebuilt for the scanned range. Clean: files are trusted, but the active segment's
        last batch is still checked and any inconsistency falls back to recovery.

        The files live on `disk`; `files`, when given, must open them on the same disk.
        """
        disk.mkdir(directory, parents=True, exist_ok=True)
        name = f"{topic}-{partition}"
        for leftover in directory.glob("*" + TMP_SUFFIX):
            disk.unlink(leftover, missing_ok=True)
        bases: list[int] = []
        for entry in directory.iterdir():
            base = parse_segment_name(entry.name)
            if base is not None:
                bases.append(base)
            elif entry.suffix == INDEX_SUFFIX and not entry.with_suffix(".log").exists():
                disk.unlink(entry, missing_ok=True)
        bases.sort()
        epoch_path = directory / CHECKPOINT_NAME
        rebuild_epochs = bool(bases) and not epoch_path.exists()
        if rebuild_epochs:
            logger.warning("%s: no %s; rebuilding it from the log", name, CHECKPOINT_NAME)
        try:
            epoch_cache = LeaderEpochCache.load(epoch_path, disk=disk)
        except LogStorageError as exc:
            logger.warning("%s: %s; rebuilding the epoch cache from the log", name, exc)
            epoch_cache = LeaderEpochCache(epoch_path, disk=disk)
            rebuild_epochs = True
        if not bases:
            start = max(log_start_offset, 0)
            segment = LogSegment(
                directory, start, rolling_base_ms=now_ms, create=True, files=files, disk=disk
            )
            fsync_dir(directory, disk=disk)
            epoch_cache.truncate_from_end(start)
            epoch_cache.truncate_from_start(start)
            epoch_cache.flush()
            return cls(
                directory,
                config,
                topic=topic,
                partition=partition,
                segments=[segment],
                epoch_cache=epoch_cache,
                log_start_offset=start,
                log_end_offset=start,
                high_watermark=start,
                recovery_point=start,
                files=files,
                disk=disk,
            )
        segments = [
            LogSegment(directory, b, rolling_base_ms=now_ms, files=files, disk=disk) for b in bases
        ]
        try:
            log_end_offset, recovered, damaged = _load_segments(
                name,
                segments,
                config,
                recovery_point=recovery_point,
                clean_shutdown=clean_shutdown and not rebuild_epochs,
                epoch_cache=epoch_cache,
                full_scan=rebuild_epochs,
            )
        except BaseException:
            for segment in segments:
                segment.close()
            raise
        segments = [s for s in segments if not s.closed]
        active = segments[-1]
        first_ts = active.first_batch_timestamp_ms()
        if first_ts is not None:
            active.rolling_base_ms = min(now_ms, first_ts)
        epoch_cache.truncate_from_end(log_end_offset)
        start = min(max(log_start_offset, segments[0].base_offset), log_end_offset)
        epoch_cache.truncate_from_start(start)
        if recovered:
            # What recovery validated may only be in the page cache (a process crash):
            # make it durable before the recovery point claims it.
            for segment in segments:
                segment.sync()
            fsync_dir(directory, disk=disk)
            recovery_point = log_end_offset
        epoch_cache.flush()
        log = cls(
            directory,
            config,
            topic=topic,
            partition=partition,
            segments=segments,
            epoch_cache=epoch_cache,
            log_start_offset=start,
            log_end_offset=log_end_offset,
            high_watermark=min(max(high_watermark, start), log_end_offset),
            recovery_point=min(max(recovery_point, 0), log_end_offset),
            files=files,
            disk=disk,
        )
        log.recovery_found_damage = damaged
        return log

    # ---------------------------------------------------------------- append
    def append_as_leader(
        self,
        records: bytes,
        *,
        leader_epoch: int,
        now_ms: int,
        log_append_time: bool = False,
    ) -> AppendInfo:
        """Validate, assign offsets from the LEO, stamp base offset and leader epoch, write.

        Raises `InvalidRecordError` (empty, or a header that lies: see
        `validate_leader_record_set`), `CorruptRecordError`, `RecordTooLargeError` (a
        batch above `max_message_bytes`), `InvalidTimestampError` or `LogStorageError`;
        nothing is written then.
        """
        if leader_epoch < 0:
            raise ValueError(f"leader epoch must be >= 0, got {leader_epoch}")
        # The one copy of the record bytes: stamped in place, written as one buffer.
        stamped = bytearray(records)
        with self._lock:
            config = self.config
            first_offset = self.log_end_offset
            checked = None
            if not log_append_time and not self._closed:
                # Every check and the restamp in one pass per batch; on any refusal the
                # checks' homes below run on the original bytes and raise the precise
                # error (a closed log reports a bad record set first, as it always has).
                checked = check_and_stamp_create_time(
                    stamped,
                    first_offset=first_offset,
                    leader_epoch=leader_epoch,
                    max_batch_length=config.max_message_bytes - LENGTH_PREFIX_SIZE,
                    earliest_ms=now_ms - config.timestamp_before_max_ms,
                    latest_ms=now_ms + config.timestamp_after_max_ms,
                )
            if checked is None:
                try:
                    headers = validate_leader_record_set(
                        records, config, now_ms=now_ms, log_append_time=log_append_time
                    )
                except (RecordTooLargeError, InvalidRecordError, InvalidTimestampError) as exc:
                    raise type(exc)(f"{self.name}: {exc}") from None
                self._check_open()
                stamped = bytearray(records)
                batches = stamp_all_in_place(
                    stamped,
                    headers,
                    first_offset=first_offset,
                    leader_epoch=leader_epoch,
                    log_append_time_ms=now_ms if log_append_time else None,
                )
                positions = [b[0] for b in batches]
                base_offsets = [b[1] for b in batches]
                max_timestamp_ms = max(max(b[2] for b in batches), -1)
                offset = batches[-1][1] + headers[-1][1][F_RECORD_COUNT]
            else:
                positions, base_offsets, offset, max_timestamp_ms = checked
            self._maybe_roll(len(stamped), now_ms)
            self._write([stamped], positions, base_offsets, max_timestamp_ms)
            self.epoch_cache.assign(leader_epoch, first_offset)
            record_count = offset - first_offset
            self._after_append(offset, record_count, now_ms)
            return AppendInfo(
                first_offset=first_offset,
                last_offset=offset - 1,
                record_count=record_count,
                batch_count=len(positions),
                max_timestamp_ms=max_timestamp_ms,
                log_append_time_ms=now_ms if log_append_time else -1,
                size_bytes=len(stamped),
            )

    def append_as_follower(
        self, records: bytes, *, now_ms: int, refuse_older_epoch: bool = True
    ) -> AppendInfo:
        """Append the leader's batches as they are (offsets and epochs already stamped).

        The first base offset must equal the LEO and batches must be contiguous
        (`InconsistentOffsetError` otherwise), and no batch may carry an older leader
        epoch than the latest one in the epoch cache or the batch before it
        (`InconsistentEpochError`: the answer is stale, and accepting it would drop
        newer epoch entries); nothing is written on any error. `refuse_older_epoch=False`
        (DELIBERATELY UNSAFE, the simulator's hole-4 canary only) accepts such a batch and
        lets the epoch cache drop the newer entries, as before the fix.
        """
        headers = validate_record_set(records)
        with self._lock:
            self._check_open()
            expected = self.log_end_offset
            latest_epoch = self.epoch_cache.latest_epoch()
            epoch = -1 if latest_epoch is None else latest_epoch
            for _, fields in headers:
                base_offset = fields[F_BASE_OFFSET]
                batch_epoch = fields[F_LEADER_EPOCH]
                if base_offset != expected:
                    raise InconsistentOffsetError(
                        f"{self.name}: follower append has a batch at offset "
                        f"{base_offset}, expected {expected} (log end "
                        f"{self.log_end_offset})"
                    )
                if refuse_older_epoch and 0 <= batch_epoch < epoch:
                    raise InconsistentEpochError(
                        f"{self.name}: follower append has a batch of leader epoch "
                        f"{batch_epoch} at offset {base_offset} after epoch "
                        f"{epoch}; refusing it (a stale fetch answer)"
                    )
                if batch_epoch > epoch:
                    epoch = batch_epoch
                expected = base_offset + fields[F_LAST_OFFSET_DELTA] + 1
            self._maybe_roll(len(records), now_ms)
            max_timestamp_ms = max(f[F_MAX_TIMESTAMP] for _, f in headers)
            self._write(
                [records],
                [pos for pos, _ in headers],
                [f[F_BASE_OFFSET] for _, f in headers],
                max(max_timestamp_ms, -1),
            )
            for _, fields in headers:
                if fields[F_LEADER_EPOCH] >= 0:
                    self.epoch_cache.assign(fields[F_LEADER_EPOCH], fields[F_BASE_OFFSET])
            record_count = expected - self.log_end_offset
            first_offset = self.log_end_offset
            self._after_append(expected, record_count, now_ms)
            return AppendInfo(
                first_offset=first_offset,
                last_offset=expected - 1,
                record_count=record_count,
                batch_count=len(headers),
                max_timestamp_ms=max_timestamp_ms,
                log_append_time_ms=-1,
                size_bytes=len(records),
            )

    def _write(
        self,
        buffers: list[bytes | bytearray | memoryview],
        positions: list[int],
        base_offsets: list[int],
        max_timestamp_ms: int,
    ) -> None:
        try:
            self._segments[-1].append(
                buffers,
                positions,
                base_offsets,
                max_timestamp_ms=max_timestamp_ms,
                index_interval_bytes=self.config.index_interval_bytes,
            )
        except OSError as exc:
            raise LogStorageError(f"{self.name}: cannot write segment: {exc}") from exc

    def _after_append(self, next_offset: int, record_count: int, now_ms: int) -> None:
        self.log_end_offset = next_offset
        if self._unflushed_messages == 0:
            self._first_unflushed_ms = now_ms
        self._unflushed_messages += record_count
        # Only the configured policy fsyncs on the append path; rolled segments are left
        # to the periodic `maybe_flush` so a produce never waits for a whole segment.
        if self.config.fsync_on_append or self._flush_policy_due(now_ms):
            self.flush()

    def _maybe_roll(self, incoming_bytes: int, now_ms: int) -> None:
        active = self._segments[-1]
        if active.size == 0:
            active.rolling_base_ms = now_ms  # an empty segment ages from its first append
            return
        too_big = active.size + incoming_bytes > self.config.segment_bytes
        too_old = now_ms - active.rolling_base_ms >= self.config.segment_ms
        if too_big or too_old:
            self._roll(now_ms)

    def _roll(self, now_ms: int) -> None:
        """Close the active segment and start one at the LEO. The closed segment's index
        is written by the next flush (`_persist_rolled_indexes`), as its fsync is: an
        append never waits for the disk (a missing index is rebuilt at recovery)."""
        old = self._segments[-1]
        try:
            segment = LogSegment(
                self.directory,
                self.log_end_offset,
                rolling_base_ms=now_ms,
                create=True,
                files=self._files,
                disk=self.disk,
            )
            # The rolled segment is cold from now on: give its descriptor back.
            old.idle()
        except OSError as exc:
            raise LogStorageError(f"{self.name}: cannot roll segment: {exc}") from exc
        self._index_pending.append(old)
        self._segments.append(segment)
        self._bases.append(segment.base_offset)
        self._dir_dirty = True
        logger.debug("%s: rolled new segment at offset %s", self.name, segment.base_offset)

    # ------------------------------------------------------------------ read
    def read(
        self,
        offset: int,
        *,
        max_bytes: int,
        max_offset: int | None = None,
        min_one_batch: bool = True,
    ) -> ReadResult:
        """Whole batches from the one holding `offset`, up to `max_bytes` (at least one
        batch if `min_one_batch`), stopping before any batch whose last offset is >=
        `max_offset`. Raises `OffsetOutOfRangeError` outside [log start, LEO]."""
        with self._lock:
            self._check_open()
            if offset < self.log_start_offset or offset > self.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"offset {offset} is out of range for {self.name}: log start "
                    f"{self.log_start_offset}, log end {self.log_end_offset}"
                )
            empty = ReadResult(records=b"", first_offset=-1, next_offset=offset)
            if offset == self.log_end_offset:
                return empty
            index = max(bisect.bisect_right(self._bases, offset) - 1, 0)
            for segment in self._segments[index:]:
                found = segment.find_batch(offset)
                if found is None:
                    continue
                records, first_offset, next_offset = segment.read(
                    found[0],
                    max_bytes=max_bytes,
                    max_offset=max_offset,
                    min_one_batch=min_one_batch,
                )
                if not records:
                    return empty
                return ReadResult(
                    records=records, first_offset=first_offset, next_offset=next_offset
                )
            return empty

    def offset_for_timestamp(self, timestamp_ms: int) -> tuple[int, int] | None:
        """`(offset, timestamp)` of the first batch whose max timestamp >= `timestamp_ms`
        (the offset is at least the log start offset); None if there is none."""
        with self._lock:
            self._check_open()
            for segment in self._segments:
                if segment.max_timestamp_ms < timestamp_ms:
                    continue
                position = 0
                while position < segment.size:
                    peek = segment.peek_at(position)
                    if (
                        peek.max_timestamp_ms >= timestamp_ms
                        and peek.last_offset >= self.log_start_offset
                    ):
                        return max(peek.base_offset, self.log_start_offset), peek.max_timestamp_ms
                    position += peek.size
            return None

    # --------------------------------------------------------- offsets / truncation
    def update_high_watermark(self, hw: int) -> None:
        """Set the HW, clamped to [log start, LEO]."""
        with self._lock:
            self.high_watermark = min(max(hw, self.log_start_offset), self.log_end_offset)

    def truncate_to(self, offset: int) -> None:
        """Remove every batch whose last offset >= `offset` (batch granularity)."""
        if offset < 0:
            raise ValueError(f"cannot truncate {self.name} to negative offset {offset}")
        with self._lock:
            self._check_open()
            if offset >= self.log_end_offset:
                return
            if offset < self.log_start_offset:
                self.truncate_fully_and_start_at(offset)
                return
            index = max(bisect.bisect_right(self._bases, offset) - 1, 0)
            segment = self._segments[index]
            found = segment.find_batch(offset)
            if found is None:  # offset is this segment's end: cut at the next segment
                if index + 1 >= len(self._segments):
                    return
                index += 1
                segment = self._segments[index]
                position, new_end = 0, segment.base_offset
            else:
                position, new_end = found[0], found[1].base_offset
            if new_end < self.log_start_offset:
                self.truncate_fully_and_start_at(new_end)
                return
            level = logging.WARNING if new_end < self.high_watermark else logging.INFO
            logger.log(
                level,
                "%s: truncating to offset %s (log end was %s, high watermark %s)",
                self.name,
                new_end,
                self.log_end_offset,
                self.high_watermark,
            )
            for doomed in self._segments[index + 1 :]:
                doomed.delete_files()
            del self._segments[index + 1 :]
            del self._bases[index + 1 :]
            try:
                segment.truncate_to_position(position)
            except OSError as exc:
                raise LogStorageError(f"{self.name}: cannot truncate: {exc}") from exc
            self._dir_dirty = True
            self.log_end_offset = new_end
            self.epoch_cache.truncate_from_end(new_end)
            self.epoch_cache.flush()
            self.high_watermark = min(self.high_watermark, new_end)
            self.recovery_point = min(self.recovery_point, new_end)

    def truncation_suffix(
        self, offset: int, *, split_offset: int, read_max_bytes: int
    ) -> LogSuffix:
        """What `truncate_to(offset)` would remove (`offset` <= the log start: the whole
        log, as `truncate_fully_and_start_at` removes), read only if it is at most
        `read_max_bytes`: each segment's removed range is read once, as whole batches.
        Whole segments count, so bytes before the log start in its first segment are
        included when the whole log goes; a log without records (log start = LEO)
        removes nothing."""
        with self._lock:
            self._check_open()
            end = self.log_end_offset
            if offset >= end or self.log_start_offset >= end:  # no record would go
                return LogSuffix(
                    start_offset=end,
                    end_offset=end,
                    size_bytes=0,
                    bytes_below_split=0,
                    chunks=[],
                )
            where = self._locate(offset) if offset >= self.log_start_offset else None
            if where is None or where[2] < self.log_start_offset:
                where = (0, 0, self.log_start_offset)
            index, position, start = where
            size = self._bytes_between((index, position), (len(self._segments), 0))
            if split_offset <= start:
                below = 0
            elif split_offset >= end:
                below = size
            else:
                split = self._locate(split_offset)
                assert split is not None
                split_index, split_position, split_base = split
                if split_base < split_offset:  # the batch holding it has committed records
                    split_position += self._segments[split_index].peek_at(split_position).size
                below = self._bytes_between((index, position), (split_index, split_position))
            chunks: list[bytes] | None = None
            if size <= read_max_bytes:
                chunks = []
                for number, segment in enumerate(self._segments[index:]):
                    skip = position if number == 0 else 0
                    if segment.size > skip:
                        chunks.append(segment.read_at(skip, segment.size - skip))
            return LogSuffix(
                start_offset=start,
                end_offset=end,
                size_bytes=size,
                bytes_below_split=below,
                chunks=chunks,
            )

    def _locate(self, offset: int) -> tuple[int, int, int] | None:
        """(segment index, byte position, base offset) of the batch holding `offset`, for
        log start <= `offset` < LEO; None outside."""
        if not self.log_start_offset <= offset < self.log_end_offset:
            return None
        index = max(bisect.bisect_right(self._bases, offset) - 1, 0)
        for number in range(index, len(self._segments)):
            found = self._segments[number].find_batch(offset)
            if found is not None:
                return number, found[0], found[1].base_offset
        return None

    def _bytes_between(self, start: tuple[int, int], stop: tuple[int, int]) -> int:
        """Bytes from (segment index, position) `start` up to `stop` (exclusive); a stop
        index of len(segments) means the log end."""
        (first, first_position), (last, last_position) = start, stop
        if first == last:
            return last_position - first_position
        total = self._segments[first].size - first_position
        total += sum(segment.size for segment in self._segments[first + 1 : last])
        return total + last_position

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete every segment and start an empty log at `offset` (log start = HW = LEO)."""
        if offset < 0:
            raise ValueError(f"cannot start {self.name} at negative offset {offset}")
        with self._lock:
            self._check_open()
            logger.info(
                "%s: truncating fully and starting at offset %s (log was [%s, %s))",
                self.name,
                offset,
                self.log_start_offset,
                self.log_end_offset,
            )
            for segment in self._segments:
                segment.delete_files()
            try:
                segment = LogSegment(
                    self.directory,
                    offset,
                    rolling_base_ms=0,
                    create=True,
                    files=self._files,
                    disk=self.disk,
                )
                fsync_dir(self.directory, disk=self.disk)
            except OSError as exc:
                raise LogStorageError(f"{self.name}: cannot restart log: {exc}") from exc
            self._segments = [segment]
            self._bases = [offset]
            self.log_start_offset = self.log_end_offset = offset
            self.high_watermark = self.recovery_point = offset
            self._unflushed_messages = 0
            self.epoch_cache.clear()
            self.epoch_cache.flush()

    def maybe_increment_log_start_offset(self, offset: int) -> None:
        """Raise the log start offset (a follower adopting the leader's); never lowers it.

        `offset` may not pass the LEO (`OffsetOutOfRangeError`). The HW moves up with it
        if needed: a leader's log start is below its HW, so those offsets are committed.
        A leader-side caller deleting records must check its own HW first. Segments wholly
        below the new log start are removed by the next `delete_old_segments`.
        """
        with self._lock:
            self._check_open()
            if offset <= self.log_start_offset:
                return
            if offset > self.log_end_offset:
                raise OffsetOutOfRangeError(
                    f"cannot move the log start offset of {self.name} to {offset}: above "
                    f"the log end offset {self.log_end_offset}"
                )
            logger.info("%s: log start offset %s -> %s", self.name, self.log_start_offset, offset)
            self.log_start_offset = offset
            self.high_watermark = max(self.high_watermark, offset)
            self.epoch_cache.truncate_from_start(offset)
            self.epoch_cache.flush()

    def delete_old_segments(self, now_ms: int) -> int:
        """Retention: delete the oldest closed segments that are wholly below the log start
        offset, older than `retention_ms`, or beyond `retention_bytes`. Never the active
        segment, never a segment reaching past the HW. Returns how many were deleted."""
        with self._lock:
            self._check_open()
            config = self.config
            total = self.size_bytes()
            doomed = 0
            for i, segment in enumerate(self._segments[:-1]):
                end = self._bases[i + 1]
                if end > self.high_watermark:
                    break
                if end <= self.log_start_offset:
                    reason = "below the log start offset"
                elif (
                    config.retention_ms >= 0
                    and now_ms - segment.max_timestamp_ms > config.retention_ms
                ):
                    reason = f"older than retention_ms={config.retention_ms}"
                elif config.retention_bytes >= 0 and total - segment.size >= config.retention_bytes:
                    reason = f"beyond retention_bytes={config.retention_bytes}"
                else:
                    break
                logger.info(
                    "%s: deleting segment [%s, %s) %s", self.name, segment.base_offset, end, reason
                )
                total -= segment.size
                doomed += 1
            if not doomed:
                return 0
            for segment in self._segments[:doomed]:
                segment.delete_files()
            del self._segments[:doomed]
            del self._bases[:doomed]
            self._dir_dirty = True
            if self._bases[0] > self.log_start_offset:
                self.log_start_offset = self._bases[0]
                self.epoch_cache.truncate_from_start(self.log_start_offset)
                self.epoch_cache.flush()
            return doomed

    # ------------------------------------------------------------------ flush
    def flush(self) -> None:
        """fsync every segment written since the last flush; recovery point = LEO."""
        self._flush(whole_log=True)

    def _flush(self, *, whole_log: bool) -> None:
        """fsync the whole log, or only the segments closed by a roll (Kafka flushes those
        right after rolling), then advance the recovery point to what is now durable."""
        with self._lock:
            if self._closed:
                return
            if whole_log:
                end = self.log_end_offset
                dirty = [s for s in self._segments if s.dirty]
                self._unflushed_messages = 0
                self._first_unflushed_ms = -1
            else:
                end = self._segments[-1].base_offset
                dirty = [s for s in self._segments[:-1] if s.dirty]
            dir_dirty, self._dir_dirty = self._dir_dirty, False
            indexes = [
                (segment, segment.index.encoded(), segment.truncations)
                for segment in self._index_pending
                if not segment.closed and segment is not self._segments[-1]
            ]
            self._index_pending = []
        try:
            self._persist_rolled_indexes(indexes)
            for segment in dirty:
                try:
                    segment.flush()
                except OSError:
                    if not segment.closed:
                        raise  # a real fsync failure, not a segment deleted meanwhile
            if dir_dirty:
                fsync_dir(self.directory, disk=self.disk)
            with self._lock:
                # Epochs starting below the new recovery point must survive a crash: recovery
                # rebuilds the cache only from the recovery point on.
                self.epoch_cache.flush()
        except OSError as exc:
            raise LogStorageError(f"{self.name}: fsync failed: {exc}") from exc
        with self._lock:
            self.recovery_point = max(self.recovery_point, min(end, self.log_end_offset))

    def _persist_rolled_indexes(self, indexes: list[tuple[LogSegment, bytes, int]]) -> None:
        """Write the indexes of rolled segments (taken under the lock) outside it; one
        whose segment was cut or deleted meanwhile is stale and removed again."""
        for segment, data, truncations in indexes:
            try:
                checkpoint_write(segment.index.path, data, disk=self.disk)
            except OSError:
                with self._lock:
                    self._index_pending.append(segment)
                raise
            with self._lock:
                if (
                    segment.truncations != truncations
                    or segment is self._segments[-1]
                    or (segment.closed and not segment.log_path.exists())
                ):
                    # Cut, active again, or deleted (retention) meanwhile; a segment
                    # closed by a clean shutdown keeps it (the same entries).
                    segment.index.discard_file()

    def maybe_flush(self, now_ms: int) -> bool:
        """Flush if `flush_messages` or `flush_ms` says so; True if it flushed.

        Without a due flush, segments closed by a roll are still fsynced (as Kafka does
        after each roll), so the recovery point advances under the default policy and an
        unclean restart only rescans the active segment.
        """
        if self._flush_policy_due(now_ms):
            self.flush()
            return True
        if self._index_pending or any(s.dirty for s in self._segments[:-1]):
            self._flush(whole_log=False)
            return True
        return False

    def _flush_policy_due(self, now_ms: int) -> bool:
        config = self.config
        pending = self._unflushed_messages
        return pending > 0 and (
            (0 <= config.flush_messages <= pending)
            or (config.flush_ms >= 0 and now_ms - self._first_unflushed_ms >= config.flush_ms)
        )

    def update_config(self, config: LogConfig) -> None:
        """Apply new topic settings (they take effect from the next append / retention run)."""
        with self._lock:
            self.config = config

    # -------------------------------------------------------------- lifecycle
    def close(self) -> None:
        """Flush, persist indexes and the epoch checkpoint, release the files."""
        with self._lock:
            if self._closed:
                return
            self.flush()
            try:
                for segment in self._segments:
                    if segment is self._segments[-1] or not segment.index.path.exists():
                        segment.index.persist()
                self.epoch_cache.flush()
            except OSError as exc:
                raise LogStorageError(f"{self.name}: cannot close: {exc}") from exc
            finally:
                for segment in self._segments:
                    segment.close()
                self._closed = True

    def abandon(self) -> None:
        """Release the files without flushing or persisting anything: exactly what a crash
        leaves on disk (used by crash tests and after a fatal storage error)."""
        with self._lock:
            for segment in self._segments:
                segment.close()
            self._closed = True

    def delete(self) -> None:
        """Close and remove the partition directory."""
        with self._lock:
            if not self._closed:
                for segment in self._segments:
                    segment.close()
                self._closed = True
            self.disk.rmtree(self.directory)
            if self.directory.parent.exists():
                fsync_dir(self.directory.parent, disk=self.disk)

    def _check_open(self) -> None:
        if self._closed:
            raise LogStorageError(f"{self.name}: the log is closed")

    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    def segment_base_offsets(self) -> list[int]:
        return list(self._bases)


# ------------------------------------------------------------------ recovery
def _load_segments(
    name: str,
    segments: list[LogSegment],
    config: LogConfig,
    *,
    recovery_point: int,
    clean_shutdown: bool,
    epoch_cache: LeaderEpochCache,
    full_scan: bool,
) -> tuple[int, bool, bool]:
    """Load indexes and find the log end; recover where needed.

    Returns `(log_end_offset, recovered, damaged)` (`damaged`: recovery cut more than a
    torn last batch); segments deleted by recovery are closed (`closed`) and must be
    dropped by the caller.
    """
    bases = [s.base_offset for s in segments]
    if full_scan:
        first_unsafe = 0
    elif clean_shutdown:
        first_unsafe = len(segments)
    else:
        first_unsafe = max(bisect.bisect_right(bases, recovery_point) - 1, 0)
    # Trusted segments: load or rebuild the index; a problem makes recovery start there.
    for i in range(first_unsafe):
        if not _load_trusted_index(name, segments[i], config, is_active=i == len(segments) - 1):
            first_unsafe = i
            break
    if first_unsafe == len(segments):
        end = _clean_log_end(segments[-1])
        if end is not None:
            return end, False, False
        logger.warning("%s: active segment failed its end check; recovering it", name)
        first_unsafe = len(segments) - 1
    end, damaged = _recover(name, segments, first_unsafe, config, epoch_cache)
    return end, True, damaged


def _load_trusted_index(
    name: str, segment: LogSegment, config: LogConfig, *, is_active: bool
) -> bool:
    """Load the segment's index, rebuilding it from headers if the file is bad."""
    if segment.index.load(segment.base_offset, segment.size) and _index_matches(segment):
        return True
    logger.info("%s: rebuilding index of %s", name, segment.log_path.name)
    try:
        entries = list(segment.iter_batches(0, verify_crc=False))
    except CorruptBatchError as exc:
        logger.warning("%s: %s", name, exc)
        return False
    if entries and entries[0][1].base_offset != segment.base_offset:
        return False
    segment.rebuild_index(entries, config.index_interval_bytes)
    if not is_active:
        segment.index.persist()
    return True


def _index_matches(segment: LogSegment) -> bool:
    last = segment.index.last_entry()
    if last is None:
        segment.reset_index_counter(0)
        return True
    offset, position = last
    try:
        header = next(segment.iter_batches(position, verify_crc=False))[1]
    except (CorruptBatchError, StopIteration):
        return False
    if header.base_offset != offset:
        return False
    segment.reset_index_counter(position)
    return True


def _clean_log_end(active: LogSegment) -> int | None:
    """LEO of a trusted active segment: walk from its last index entry to the end of the
    file and CRC-check the last batch. None if anything is off."""
    last = active.index.last_entry()
    start = last[1] if last else 0
    try:
        end = active.next_offset_after(start)
    except CorruptBatchError:
        return None
    return active.base_offset if end is None else end


def _recover(
    name: str,
    segments: list[LogSegment],
    first: int,
    config: LogConfig,
    epoch_cache: LeaderEpochCache,
) -> tuple[int, bool]:
    """Validate every batch from segment `first` on; cut the log at the first bad one.

    Returns the log end and whether that cut more than a torn (incomplete) last batch of
    the last segment, which is all a process crash can leave behind.
    """
    expected = segments[first].base_offset
    damaged = False
    epoch_cache.truncate_from_end(expected)
    logger.info(
        "%s: recovering from offset %s (%d segment(s) to scan)",
        name,
        expected,
        len(segments) - first,
    )
    for i in range(first, len(segments)):
        segment = segments[i]
        if segment.base_offset != expected:
            logger.warning(
                "%s: segment %s starts at %s but the log ends at %s; deleting it and %d later",
                name,
                segment.log_path.name,
                segment.base_offset,
                expected,
                len(segments) - i - 1,
            )
            _delete_from(segments, i)
            damaged = True
            break
        scanned: list[tuple[int, BatchHeader]] = []
        error: str | None = None
        try:
            for position, header in segment.iter_batches(0, verify_crc=True):
                if header.base_offset != expected:
                    error = (
                        f"{segment.log_path.name} position {position}: batch at offset "
                        f"{header.base_offset}, expected {expected}"
                    )
                    break
                scanned.append((position, header))
                expected = header.next_offset
        except CorruptBatchError as exc:
            error = str(exc)
        for _, header in scanned:
            if header.leader_epoch >= 0:
                epoch_cache.assign(header.leader_epoch, header.base_offset)
        segment.rebuild_index(scanned, config.index_interval_bytes)
        if error is not None:
            valid = scanned[-1][0] + scanned[-1][1].size if scanned else 0
            logger.warning(
                "%s: corrupt or torn batch (%s); truncating %s from %s to %s bytes (log end "
                "now %s) and deleting %d later segment(s)",
                name,
                error,
                segment.log_path.name,
                segment.size,
                valid,
                expected,
                len(segments) - i - 1,
            )
            segment.truncate_to_position(valid)
            torn_tail = i == len(segments) - 1 and "truncated batch" in error
            damaged = damaged or not torn_tail
            _delete_from(segments, i + 1)
            break
        if i < len(segments) - 1:
            segment.index.persist()
    return expected, damaged


def _delete_from(segments: list[LogSegment], first: int) -> None:
    for segment in segments[first:]:
        segment.delete_files()
