"""LogManager: the data directory of one broker and every partition log in it.

Layout (DESIGN §4): `DATA/<topic>-<partition>/` per partition (split on the LAST '-'),
plus the broker-level files `recovery-point-offset-checkpoint`,
`replication-offset-checkpoint` (high watermarks), `log-start-offset-checkpoint`, the
`clean-shutdown` marker and the `.lock` held (fcntl.flock) while the broker runs.

The directory's identity and how its previous owner stopped (clean-shutdown file with
the broker epoch, boot id of a crash) live in `directory_state`: startup reads and removes
the clean-shutdown file durably, so a crash at any later point is seen as unclean;
`shutdown()` writes it back last. A brand-new (empty) data directory proves nothing: its
broker registers as one that may have lost data (never as a clean one).

Startup never crash-loops on one partition: a partition directory that cannot be opened
(corrupt, unreadable, out of file descriptors) is logged and kept OFFLINE (`offline`);
every other partition is served. An offline partition is never recreated empty over its
directory (`get_or_create` raises KAFKA_STORAGE_ERROR, which LeaderAndIsr answers, so the
controller moves leadership and ISR away), and its checkpoint entries are kept as read.
Segment files share one `FileBudget` (`--max-open-segment-files`), so a broker with more
partitions than file descriptors still starts.
Every file but the lock is written and read through the manager's `Disk`
(`broker.log.disk`: production's `OS_DISK`, the simulator's power-losing disk).
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import uuid
from pathlib import Path
from typing import Final

from broker.log import checkpoint, directory_state
from broker.log.config import LogConfig
from broker.log.disk import OS_DISK, Disk
from broker.log.errors import DataDirLockedError, LogStorageError
from broker.log.file_budget import MAX_OPEN_SEGMENT_FILES_DEFAULT, FileBudget
from broker.log.partition_log import PartitionLog

logger = logging.getLogger(__name__)

LOCK_NAME: Final = ".lock"
CLEAN_SHUTDOWN_NAME: Final = directory_state.CLEAN_SHUTDOWN_NAME
RECOVERY_POINT_NAME: Final = "recovery-point-offset-checkpoint"
HIGH_WATERMARK_NAME: Final = "replication-offset-checkpoint"
LOG_START_NAME: Final = "log-start-offset-checkpoint"
DELETE_SUFFIX: Final = "-delete"


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir(name: str) -> tuple[str, int] | None:
    """`(topic, partition)` of a `<topic>-<partition>` directory name, None otherwise."""
    topic, dash, number = name.rpartition("-")
    if not dash or not topic or not number.isdigit():
        return None
    return topic, int(number)


def _validate_topic(topic: str, partition: int) -> None:
    if not topic or topic in {".", ".."} or "/" in topic or any(c.isspace() for c in topic):
        raise ValueError(f"invalid topic name {topic!r}")
    if partition < 0:
        raise ValueError(f"invalid partition {partition} of topic {topic!r}")


class LogManager:
    """Owns the data directory: lock, checkpoints, and the `PartitionLog` of each partition.

    Caller: the broker app (startup, periodic checkpoint / retention / flush, shutdown)
    and the replica manager (get / create / delete logs on LeaderAndIsr / StopReplica).
    """

    def __init__(
        self,
        data_dir: Path,
        default_config: LogConfig,
        *,
        now_ms: int,
        node_id: int | None = None,
        boot_id: str | None = None,
        max_open_files: int = MAX_OPEN_SEGMENT_FILES_DEFAULT,
        disk: Disk = OS_DISK,
    ) -> None:
        self.data_dir = data_dir
        self.default_config = default_config
        #: Where every file of the directory lives (production: `OS_DISK`).
        self.disk = disk
        self.files = FileBudget(max_open_files, disk=disk)
        disk.mkdir(data_dir, parents=True, exist_ok=True)
        self._lock_fd = self._take_lock(data_dir)
        self._logs: dict[tuple[str, int], PartitionLog] = {}
        self.boot_id = directory_state.current_boot_id(boot_id)
        #: Partitions whose directory could not be opened: why, and their checkpoint
        #: values as read (high watermark, recovery point, log start), written back as is.
        self.offline: dict[tuple[str, int], str] = {}
        self._offline_checkpoints: dict[tuple[str, int], tuple[int, int, int]] = {}
        #: Partitions the checkpoints say held records but whose directory is gone: the
        #: directory cannot prove it kept them (`proven_broker_epoch` is then -1).
        self.missing: list[tuple[str, int]] = []
        try:
            fresh = self._is_fresh()
            self.directory_id = directory_state.directory_identity(
                data_dir, node_id=node_id, fresh=fresh, disk=disk
            )
            self.previous_stop = directory_state.consume_stop_record(
                data_dir, boot_id=self.boot_id, fresh=fresh, disk=disk
            )
            stop = self.previous_stop.stop
            self.had_clean_shutdown: bool = stop is directory_state.PreviousStop.CLEAN
            if not self.had_clean_shutdown and not fresh:
                logger.warning(
                    "data directory %s was not shut down cleanly (%s); recovering logs",
                    data_dir,
                    stop.value,
                )
            self._open_all(now_ms)
        except BaseException:
            for log in self._logs.values():
                log.close()
            os.close(self._lock_fd)
            raise

    @staticmethod
    def _take_lock(data_dir: Path) -> int:
        fd = os.open(data_dir / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DataDirLockedError(
                f"data directory {data_dir} is locked by another broker process; "
                "each broker needs its own --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        return fd

    def _is_fresh(self) -> bool:
        """No data and no record of a previous owner: only the lock, the identity file
        and leftovers of atomic writes."""
        return all(
            entry.name in (LOCK_NAME, directory_state.META_NAME)
            or entry.name.endswith(checkpoint.TMP_SUFFIX)
            for entry in self.data_dir.iterdir()
        )

    @property
    def proven_broker_epoch(self) -> int:
        """The broker epoch this directory proves it holds everything of (KIP-966), -1
        when it proves nothing: the epoch of a clean shutdown, or of a crash the operating
        system survived (same boot id) when recovery found no damage beyond a torn last
        batch. The broker sends it as its previous broker epoch when it registers."""
        stop = self.previous_stop
        if self.missing:
            return -1
        if stop.stop is directory_state.PreviousStop.CLEAN:
            return stop.broker_epoch
        if stop.stop is directory_state.PreviousStop.CRASH_SAME_BOOT and not any(
            log.recovery_found_damage for log in self._logs.values()
        ):
            return stop.broker_epoch
        return -1

    def record_registration(self, broker_epoch: int) -> None:
        """Remember durably that this boot's broker owns the directory as `broker_epoch`."""
        directory_state.record_incarnation(
            self.data_dir, boot_id=self.boot_id, broker_epoch=broker_epoch, disk=self.disk
        )

    def _read_checkpoint(self, name: str) -> dict[tuple[str, int], int]:
        try:
            return checkpoint.read_offsets(self.data_dir / name, disk=self.disk)
        except LogStorageError as exc:
            logger.warning("%s; ignoring it (logs are recovered conservatively)", exc)
            return {}

    def _open_all(self, now_ms: int) -> None:
        for leftover in self.data_dir.glob("*" + checkpoint.TMP_SUFFIX):
            self.disk.unlink(leftover, missing_ok=True)
        recovery_points = self._read_checkpoint(RECOVERY_POINT_NAME)
        high_watermarks = self._read_checkpoint(HIGH_WATERMARK_NAME)
        log_starts = self._read_checkpoint(LOG_START_NAME)
        being_deleted: set[tuple[str, int]] = set()
        for entry in sorted(self.data_dir.iterdir()):
            if not entry.is_dir():
                continue
            if entry.name.endswith(DELETE_SUFFIX):
                # `<topic>-<partition>.<uuid>-delete`: a deletion that did not finish
                deleted = parse_partition_dir(entry.name[: -len(DELETE_SUFFIX)].rpartition(".")[0])
                if deleted is not None:
                    being_deleted.add(deleted)
                self.disk.rmtree(entry)
                continue
            key = parse_partition_dir(entry.name)
            if key is None:
                logger.warning("ignoring unexpected directory %s in the data directory", entry)
                continue
            try:
                self._logs[key] = PartitionLog.open(
                    entry,
                    self.default_config,
                    topic=key[0],
                    partition=key[1],
                    recovery_point=recovery_points.get(key, 0),
                    log_start_offset=log_starts.get(key, 0),
                    high_watermark=high_watermarks.get(key, 0),
                    clean_shutdown=self.had_clean_shutdown,
                    now_ms=now_ms,
                    files=self.files,
                    disk=self.disk,
                )
            except Exception as exc:  # one bad partition must not stop the broker
                self.offline[key] = f"{type(exc).__name__}: {exc}"
                self._offline_checkpoints[key] = (
                    high_watermarks.get(key, 0),
                    recovery_points.get(key, 0),
                    log_starts.get(key, 0),
                )
                logger.error(
                    "partition %s-%s is OFFLINE: cannot open %s (%s); serving the others",
                    key[0],
                    key[1],
                    entry,
                    self.offline[key],
                )
        held = {
            key
            for table in (recovery_points, high_watermarks, log_starts)
            for key, offset in table.items()
            if offset > 0
        }
        self.missing = sorted(held - self._logs.keys() - self.offline.keys() - being_deleted)
        if self.missing:
            logger.warning(
                "partition directories %s are missing although the checkpoints list records "
                "in them: this directory proves no previous broker epoch (its replicas may "
                "have lost records)",
                ", ".join(f"{topic}-{partition}" for topic, partition in self.missing),
            )
        logger.info(
            "loaded %d partition log(s) from %s (clean shutdown: %s, offline: %d)",
            len(self._logs),
            self.data_dir,
            self.had_clean_shutdown,
            len(self.offline),
        )

    def get(self, topic: str, partition: int) -> PartitionLog | None:
        return self._logs.get((topic, partition))

    def get_or_create(
        self, topic: str, partition: int, config: LogConfig | None = None
    ) -> PartitionLog:
        """The partition's log, created empty if absent; `config` (if given) is applied."""
        log = self._logs.get((topic, partition))
        if log is not None:
            if config is not None and config != log.config:
                log.update_config(config)
            return log
        _validate_topic(topic, partition)
        reason = self.offline.get((topic, partition))
        if reason is not None:
            raise LogStorageError(
                f"partition {topic}-{partition} is offline on this broker: {reason}"
            )
        directory = self.data_dir / partition_dir_name(topic, partition)
        try:
            log = PartitionLog.open(
                directory,
                config or self.default_config,
                topic=topic,
                partition=partition,
                recovery_point=0,
                log_start_offset=0,
                high_watermark=0,
                clean_shutdown=True,
                now_ms=0,
                files=self.files,
                disk=self.disk,
            )
            checkpoint.fsync_dir(self.data_dir, disk=self.disk)
        except OSError as exc:
            raise LogStorageError(f"cannot create the log of {topic}-{partition}: {exc}") from exc
        self._logs[(topic, partition)] = log
        logger.info("created log for %s-%s in %s", topic, partition, directory)
        return log

    def all_logs(self) -> list[PartitionLog]:
        return list(self._logs.values())

    def delete(self, topic: str, partition: int) -> None:
        """Remove the partition's log and directory (rename first, so a crash mid-way
        leaves a `-delete` directory that the next start removes)."""
        log = self._logs.pop((topic, partition), None)
        if log is None:
            if self.offline.pop((topic, partition), None) is None:
                return
            self._offline_checkpoints.pop((topic, partition), None)
            directory = self.data_dir / partition_dir_name(topic, partition)
        else:
            # The data is going away: release the files without flushing them.
            log.abandon()
            directory = log.directory
        doomed = self.data_dir / f"{directory.name}.{uuid.uuid4().hex}{DELETE_SUFFIX}"
        self.disk.replace(directory, doomed)
        checkpoint.fsync_dir(self.data_dir, disk=self.disk)
        # Removing hundreds of MiB can take seconds: do it off the caller's thread (the
        # broker's event loop must keep heartbeating). A crash before it finishes leaves a
        # `-delete` directory that the next start removes.
        threading.Thread(target=self.disk.rmtree, args=(doomed,), daemon=True).start()
        logger.info("deleted log for %s-%s", topic, partition)

    def checkpoint(self) -> None:
        """Write the HW, recovery point and log start checkpoints atomically."""
        logs = list(self._logs.items())
        kept = self._offline_checkpoints
        checkpoint.write_offsets(
            self.data_dir / HIGH_WATERMARK_NAME,
            {**{k: v[0] for k, v in kept.items()}, **{k: log.high_watermark for k, log in logs}},
            disk=self.disk,
        )
        checkpoint.write_offsets(
            self.data_dir / RECOVERY_POINT_NAME,
            {**{k: v[1] for k, v in kept.items()}, **{k: log.recovery_point for k, log in logs}},
            disk=self.disk,
        )
        checkpoint.write_offsets(
            self.data_dir / LOG_START_NAME,
            {**{k: v[2] for k, v in kept.items()}, **{k: log.log_start_offset for k, log in logs}},
            disk=self.disk,
        )

    def run_retention(self, now_ms: int) -> int:
        """Apply retention to every log; returns the number of segments deleted."""
        return sum(log.delete_old_segments(now_ms) for log in list(self._logs.values()))

    def flush_due(self, now_ms: int) -> None:
        """Flush every log whose `flush_messages` / `flush_ms` policy says it is due."""
        for log in list(self._logs.values()):
            log.maybe_flush(now_ms)

    def abandon(self) -> None:
        """Release every file and the lock without flushing, checkpointing or writing the
        clean-shutdown marker: what a crash leaves behind (crash tests, fatal errors)."""
        for log in self._logs.values():
            log.abandon()
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    def shutdown(self, *, broker_epoch: int = -1) -> None:
        """Close every log, checkpoint, write the clean-shutdown file (with the broker
        epoch of the registration that stops, the proof the next start sends), release
        the lock."""
        if self._lock_fd < 0:
            return
        try:
            for log in self._logs.values():
                log.close()
            self.checkpoint()
            directory_state.write_clean_shutdown(
                self.data_dir, broker_epoch=broker_epoch, disk=self.disk
            )
        finally:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1
        logger.info("log manager for %s shut down cleanly", self.data_dir)
