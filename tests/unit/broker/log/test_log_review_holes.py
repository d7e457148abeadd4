"""Adversarial review of issue 15's clean-shutdown proof on the real `LogManager`
(findings, strict xfail)."""

from __future__ import annotations

import shutil
from pathlib import Path

from broker.log.manager import LogManager
from tests.unit.broker.log.storage_helpers import SMALL, fill


def test_a_partition_directory_missing_after_a_clean_shutdown_voids_the_proof(
    tmp_path: Path,
) -> None:
    """The proof (`proven_broker_epoch`) is one file for the whole data directory. At
    start `LogManager._open_all` opens the partition directories it finds and silently
    skips those its own checkpoints list but that are gone; the broker then registers
    proving continuity (`restart_loss` -> NONE: it keeps its ISR and ELR memberships),
    and the next LeaderAndIsr makes `get_or_create` an empty log for the missing
    partition. As the last ISR or an ELR member it is then elected cleanly with an empty
    log and the other replicas truncate to 0. Schedule: t-0 holds 10 records (HW 10,
    recovery point 10); clean shutdown at broker epoch 7; the partition directory is
    removed while the broker is down (an operator clearing a corrupt partition so it
    "re-replicates", as Kafka's docs suggest, or a botched restore); restart: the proof
    says 7 and the partition is simply absent. Fix: a partition that the checkpoints
    (or the clean-shutdown file, listing each partition's LEO) name but that is missing
    or shorter voids the proof (-1), or is reported as a lost replica so the controller
    removes it from the ISR and ELR (the KAFKA_STORAGE_ERROR path of
    `offline_replicas`).

    Fixed: `LogManager` lists such partitions in `missing` and then proves nothing."""
    manager = LogManager(tmp_path, SMALL, now_ms=0, node_id=1, boot_id="boot-a")
    log = manager.get_or_create("t", 0)
    fill(log, 5)
    log.flush()
    log.update_high_watermark(log.log_end_offset)
    held = log.log_end_offset
    manager.record_registration(7)
    manager.shutdown(broker_epoch=7)
    shutil.rmtree(tmp_path / "t-0")

    again = LogManager(tmp_path, SMALL, now_ms=0, node_id=1, boot_id="boot-a")
    try:
        assert again.get("t", 0) is None  # the replica's records are gone ...
        assert held > 0
        assert again.proven_broker_epoch == -1, (  # ... yet the directory proves epoch 7
            f"proves broker epoch {again.proven_broker_epoch} without the {held} records "
            "of t-0 its checkpoints list"
        )
    finally:
        again.shutdown()


def test_a_wiped_directory_that_kept_its_identity_file_gets_a_new_identity(
    tmp_path: Path,
) -> None:
    """Issue 14 hole 5's fix gives each data directory an identity so that the controller
    can tell a wiped disk (a new identity: every replica lost, `RestartLoss.EVERYTHING`)
    from a power loss (no proof: only the unflushed tail, `RestartLoss.UNFLUSHED`, which
    `_replica_loss` excuses for flush.policy=fsync topics). But when the data is gone and
    `meta.properties` is not (`rm -rf data/*-*`, a restore that copied the small files
    only, an operator clearing partitions), `LogManager` sees a fresh directory (no data,
    no stop record) and keeps the old identity: the broker registers with the same
    directory id and no proof, exactly as after a power loss. For a flush.policy=fsync
    topic the controller then keeps it in the ISR as intact, and as the last member it
    leads with an empty log. Fix: a fresh directory never keeps an identity; mint a new
    one (a directory that never registered holds nothing, so nothing is lost by it).
    Fixed in `directory_state.directory_identity`; this test failed before the fix."""
    manager = LogManager(tmp_path, SMALL, now_ms=0, node_id=1, boot_id="boot-a")
    original = manager.directory_id
    fill(manager.get_or_create("t", 0), 5)
    manager.record_registration(7)
    manager.shutdown(broker_epoch=7)
    for entry in tmp_path.iterdir():  # everything but the identity file goes
        if entry.name == "meta.properties":
            continue
        if entry.is_dir():
            shutil.rmtree(entry)
        else:
            entry.unlink()

    again = LogManager(tmp_path, SMALL, now_ms=0, node_id=1, boot_id="boot-a")
    try:
        assert again.proven_broker_epoch == -1
        assert again.directory_id != original, (
            "the wiped directory presents its old identity: indistinguishable from a power loss"
        )
    finally:
        again.shutdown()


def test_a_deleted_partition_does_not_void_the_proof(tmp_path: Path) -> None:
    """The control of the test above: a partition deleted on purpose before a clean
    shutdown is not "missing" (the shutdown's checkpoints no longer list it)."""
    manager = LogManager(tmp_path, SMALL, now_ms=0, node_id=1, boot_id="boot-a")
    fill(manager.get_or_create("t", 0), 5)
    fill(manager.get_or_create("t", 1), 5)
    manager.record_registration(7)
    manager.delete("t", 0)
    manager.shutdown(broker_epoch=7)

    again = LogManager(tmp_path, SMALL, now_ms=0, node_id=1, boot_id="boot-a")
    try:
        assert again.get("t", 0) is None
        assert again.get("t", 1) is not None
        assert again.missing == []
        assert again.proven_broker_epoch == 7
    finally:
        again.shutdown()
