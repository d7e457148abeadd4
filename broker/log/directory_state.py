"""What a data directory says about itself: its identity and how its last owner stopped.

Caller: `LogManager` (at start, after each registration, at clean shutdown). Files, all
written atomically (tmp + fsync + rename):

- `meta.properties`: written once, when the directory is formatted (first used):
  `directory.id` (a random UUID, Kafka's `meta.properties` field) and `node.id` (the broker
  id). A broker never opens another broker's directory; a directory with data but no
  identity (written by an older minikafka) is given one, and a directory without data or
  a record of a previous stop (wiped but for this file) a new one. The controller treats a
  broker that comes back with another directory id as having lost every replica it held.
- `clean-shutdown`: written last at a clean shutdown, holding the broker epoch of the
  registration that stopped (KIP-966's proof). Removed durably at the next start, so a
  crash at any later point is never taken for a clean stop.
- `incarnation`: the boot id of the machine and the broker epoch, rewritten after every
  registration. After a crash (no clean-shutdown file) the next start compares boot ids:
  the same boot means the operating system kept its page cache, so every write the dead
  process completed is still there, and the broker may prove continuity with that epoch
  as if it had stopped cleanly (unless recovery found damage beyond a torn last batch).
  Another boot (a power loss, a reboot) proves nothing.

A new, empty directory proves nothing either: its broker registers as unclean, so it
can never lead a partition with an empty log while the others truncate to it.
"""

from __future__ import annotations

import enum
import logging
import os
import uuid
from pathlib import Path
from typing import Final

import msgspec

from broker.log import checkpoint
from broker.log.disk import OS_DISK, Disk
from broker.log.errors import LogStorageError

logger = logging.getLogger(__name__)

META_NAME: Final = "meta.properties"
CLEAN_SHUTDOWN_NAME: Final = "clean-shutdown"
INCARNATION_NAME: Final = "incarnation"
BOOT_ID_PATH: Final = Path("/proc/sys/kernel/random/boot_id")
#: Marker files of the directory itself (not data).
STATE_FILES: Final = frozenset({META_NAME, CLEAN_SHUTDOWN_NAME, INCARNATION_NAME})


class PreviousStop(enum.Enum):
    CLEAN = "clean shutdown"
    CRASH_SAME_BOOT = "crash; the operating system kept running"
    CRASH_OTHER_BOOT = "crash or power loss; the machine restarted since"
    UNKNOWN = "no record of the previous stop"
    NEW_DIRECTORY = "new, empty data directory"


class StopRecord(msgspec.Struct, frozen=True, kw_only=True):
    """How the previous owner of the directory stopped, and the broker epoch it proves
    (-1: none)."""

    stop: PreviousStop
    broker_epoch: int = -1


def current_boot_id(override: str | None = None) -> str:
    """This machine's boot id (`override` when given: the fault suite's simulated reboots);
    empty when the system does not expose one (then no crash counts as intact)."""
    if override:
        return override
    try:
        return BOOT_ID_PATH.read_text().strip()
    except OSError:
        return ""


def _properties(text: str) -> dict[str, str]:
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        values[key.strip()] = value.strip()
    return values


def _render(values: dict[str, str], comment: str) -> bytes:
    lines = [f"# {comment}", *(f"{key}={value}" for key, value in values.items())]
    return ("\n".join(lines) + "\n").encode()


def _read(path: Path, disk: Disk) -> dict[str, str] | None:
    try:
        return _properties(disk.read_bytes(path).decode())
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise LogStorageError(f"cannot read {path}: {exc}") from exc


def directory_identity(
    data_dir: Path, *, node_id: int | None, fresh: bool, disk: Disk = OS_DISK
) -> str:
    """The directory's id, formatting it (writing `meta.properties`) when it has none.

    A `fresh` directory (no data, no record of a previous owner) never keeps an identity
    it still has: it was wiped but for its identity file, or never registered (it held
    nothing), and a new identity tells the controller that whatever its broker held
    there is gone (a kept one would pass for a power loss).

    Raises `LogStorageError` when the directory belongs to another broker id.
    """
    path = data_dir / META_NAME
    meta = _read(path, disk)
    if meta is not None and meta.get("directory.id"):
        owner = meta.get("node.id")
        if node_id is not None and owner not in (None, "", str(node_id)):
            raise LogStorageError(
                f"data directory {data_dir} belongs to broker {owner}, not {node_id} "
                f"(its {META_NAME} says node.id={owner})"
            )
        if not fresh:
            return meta["directory.id"]
        logger.warning(
            "data directory %s holds no data and no record of a previous stop but has the "
            "identity %s: giving it a new one (its broker's replicas there count as lost)",
            data_dir,
            meta["directory.id"],
        )
    directory_id = uuid.uuid4().hex
    values = {"version": "1", "directory.id": directory_id}
    if node_id is not None:
        values["node.id"] = str(node_id)
    if not fresh:
        logger.warning(
            "data directory %s holds data but no %s: giving it the identity %s",
            data_dir,
            META_NAME,
            directory_id,
        )
    checkpoint.atomic_write(
        path, _render(values, "minikafka data directory (written once)"), disk=disk
    )
    return directory_id


def consume_stop_record(
    data_dir: Path, *, boot_id: str, fresh: bool, disk: Disk = OS_DISK
) -> StopRecord:
    """How the directory's previous owner stopped; removes the clean-shutdown file durably
    (a later crash must never look clean)."""
    if fresh:
        return StopRecord(stop=PreviousStop.NEW_DIRECTORY)
    marker = data_dir / CLEAN_SHUTDOWN_NAME
    clean = _read(marker, disk)
    if clean is not None:
        disk.unlink(marker)
        checkpoint.fsync_dir(data_dir, disk=disk)
        return StopRecord(stop=PreviousStop.CLEAN, broker_epoch=_epoch(clean))
    incarnation = _read(data_dir / INCARNATION_NAME, disk)
    if incarnation is None:
        return StopRecord(stop=PreviousStop.UNKNOWN)
    if boot_id and incarnation.get("boot.id") == boot_id:
        return StopRecord(stop=PreviousStop.CRASH_SAME_BOOT, broker_epoch=_epoch(incarnation))
    return StopRecord(stop=PreviousStop.CRASH_OTHER_BOOT)


def _epoch(values: dict[str, str]) -> int:
    try:
        return int(values.get("broker.epoch", "-1"))
    except ValueError:
        return -1


def record_incarnation(
    data_dir: Path, *, boot_id: str, broker_epoch: int, disk: Disk = OS_DISK
) -> None:
    """Remember, durably, which machine boot and registration own the directory now."""
    checkpoint.atomic_write(
        data_dir / INCARNATION_NAME,
        _render(
            {"boot.id": boot_id, "broker.epoch": str(broker_epoch), "pid": str(os.getpid())},
            "the running broker's boot id and registration (see directory_state.py)",
        ),
        disk=disk,
    )


def write_clean_shutdown(data_dir: Path, *, broker_epoch: int, disk: Disk = OS_DISK) -> None:
    checkpoint.atomic_write(
        data_dir / CLEAN_SHUTDOWN_NAME,
        _render({"broker.epoch": str(broker_epoch)}, "written last at a clean shutdown"),
        disk=disk,
    )
