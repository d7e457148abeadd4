"""Metadata journal: round trip, torn final record, mid-file corruption, snapshots, restarts.

These touch the file system (tmp_path) but no sockets: the journal is synchronous storage.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from controller.journal import (
    JOURNAL_FILE,
    SNAPSHOT_FILE,
    Journal,
    JournalCorruptError,
    JournalFailedError,
)
from controller.model import BrokerRegistration, ClusterState, PartitionRegistration, TopicRecord
from controller.records import (
    BrokerRecord,
    ControllerEpochRecord,
    PartitionRecord,
    ProducerIdsRecord,
    Record,
    RemoveTopicRecord,
    TopicUpsertRecord,
)
from controller.state_machine import bootstrap, replay


def broker(broker_id: int, epoch: int) -> BrokerRecord:
    return BrokerRecord(
        registration=BrokerRegistration(
            broker_id=broker_id,
            host="127.0.0.1",
            port=9000 + broker_id,
            incarnation_id=f"inc-{epoch}",
            broker_epoch=epoch,
        )
    )


RECORDS: list[Record] = [
    ControllerEpochRecord(controller_id=0, controller_epoch=1),
    broker(1, 1),
    broker(2, 2),
    TopicUpsertRecord(topic=TopicRecord(name="t", num_partitions=1, configs={"retention.ms": "5"})),
    PartitionRecord(
        topic="t",
        partition=0,
        registration=PartitionRegistration(replicas=(1, 2), leader=1, isr=(1, 2)),
    ),
    ProducerIdsRecord(next_producer_id=3),
]


def append_one_by_one(journal: Journal, state: ClusterState, records: list[Record]) -> ClusterState:
    for record in records:
        offset = journal.append([record])
        state = replay(state, offset, record)
    return state


def test_round_trip(tmp_path: Path) -> None:
    journal, state = Journal.open(tmp_path)
    assert state == ClusterState()
    assert journal.append(RECORDS) == len(RECORDS)
    expected = ClusterState()
    for offset, record in enumerate(RECORDS, start=1):
        expected = replay(expected, offset, record)
    journal.close()
    reopened, state = Journal.open(tmp_path)
    assert state == expected
    assert reopened.last_offset == len(RECORDS)
    assert state.partitions[("t", 0)].isr == (1, 2)
    assert state.last_broker_epoch == 2
    assert state.next_producer_id == 3
    reopened.close()


@pytest.mark.parametrize(
    "cut_bytes",
    [1, 3, 7, 8, 9, 20],
    ids=["one-byte", "mid-length", "mid-crc", "header-only", "one-payload-byte", "most-payload"],
)
def test_torn_final_record_is_truncated(tmp_path: Path, cut_bytes: int) -> None:
    journal, state = Journal.open(tmp_path)
    state = append_one_by_one(journal, state, RECORDS[:-1])
    size_before_last = (tmp_path / JOURNAL_FILE).stat().st_size
    journal.append([RECORDS[-1]])
    journal.close()
    path = tmp_path / JOURNAL_FILE
    full = path.read_bytes()
    last_frame = len(full) - size_before_last
    assert cut_bytes < last_frame
    path.write_bytes(full[: size_before_last + cut_bytes])

    reopened, recovered = Journal.open(tmp_path)
    assert recovered == state  # everything but the torn record
    assert path.stat().st_size == size_before_last  # the torn tail was cut off
    # The next append reuses the torn record's offset: it was never acknowledged.
    assert reopened.append([RECORDS[-1]]) == len(RECORDS)
    reopened.close()
    _, again = Journal.open(tmp_path)
    assert again.next_producer_id == 3


def test_corrupt_final_record_crc_is_truncated(tmp_path: Path) -> None:
    journal, state = Journal.open(tmp_path)
    state = append_one_by_one(journal, state, RECORDS[:-1])
    journal.append([RECORDS[-1]])
    journal.close()
    path = tmp_path / JOURNAL_FILE
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # flip a bit in the last payload byte
    path.write_bytes(bytes(data))
    _, recovered = Journal.open(tmp_path)
    assert recovered == state


def test_corruption_before_the_end_refuses_to_start(tmp_path: Path) -> None:
    journal, _ = Journal.open(tmp_path)
    journal.append(RECORDS)
    journal.close()
    path = tmp_path / JOURNAL_FILE
    data = bytearray(path.read_bytes())
    data[12] ^= 0xFF  # inside the first record's payload
    path.write_bytes(bytes(data))
    with pytest.raises(JournalCorruptError, match="committed metadata is damaged"):
        Journal.open(tmp_path)


def test_snapshot_then_more_records(tmp_path: Path) -> None:
    journal, state = Journal.open(tmp_path)
    state = append_one_by_one(journal, state, RECORDS)
    journal.write_snapshot(state)
    assert (tmp_path / JOURNAL_FILE).stat().st_size == 0
    assert journal.records_since_snapshot == 0
    later: list[Record] = [broker(1, 3), RemoveTopicRecord(name="t")]
    state = append_one_by_one(journal, state, later)
    journal.close()
    reopened, recovered = Journal.open(tmp_path)
    assert recovered == state
    assert recovered.deleted_topics == ("t",)
    assert reopened.last_offset == len(RECORDS) + 2
    reopened.close()


def test_crash_between_snapshot_and_journal_reset(tmp_path: Path) -> None:
    """Entries already covered by the snapshot are skipped, not applied twice."""
    journal, state = Journal.open(tmp_path)
    state = append_one_by_one(journal, state, RECORDS)
    journal_bytes = (tmp_path / JOURNAL_FILE).read_bytes()
    journal.write_snapshot(state)
    journal.close()
    (tmp_path / JOURNAL_FILE).write_bytes(journal_bytes)  # as if the truncate never happened
    reopened, recovered = Journal.open(tmp_path)
    assert recovered == state
    assert reopened.last_offset == len(RECORDS)
    reopened.close()


def test_corrupt_snapshot_refuses_to_start(tmp_path: Path) -> None:
    journal, state = Journal.open(tmp_path)
    state = append_one_by_one(journal, state, RECORDS)
    journal.write_snapshot(state)
    journal.close()
    path = tmp_path / SNAPSHOT_FILE
    data = bytearray(path.read_bytes())
    data[-2] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(JournalCorruptError, match="CRC"):
        Journal.open(tmp_path)


def test_restarts_never_reuse_epochs(tmp_path: Path) -> None:
    """Controller and broker epochs keep growing across restarts, snapshots and torn tails."""
    controller_epochs: list[int] = []
    broker_epochs: list[int] = []
    for restart in range(4):
        journal, state = Journal.open(tmp_path)
        records = bootstrap(state, controller_id=0, new_cluster_id="cluster")
        state = append_one_by_one(journal, state, records)
        controller_epochs.append(state.controller_epoch)
        registration = broker(1, state.last_broker_epoch + 1)
        state = append_one_by_one(journal, state, [registration])
        broker_epochs.append(state.brokers[1].broker_epoch)
        if restart == 1:
            journal.write_snapshot(state)
        journal.close()
        if restart == 2:
            # A crash while writing a record that was never acknowledged.
            with open(tmp_path / JOURNAL_FILE, "ab") as file:
                file.write(b"\x40\x00\x00\x00\x01\x02")
                file.flush()
                os.fsync(file.fileno())
    assert controller_epochs == [1, 2, 3, 4]
    assert broker_epochs == [1, 2, 3, 4]
    _, final = Journal.open(tmp_path)
    assert final.cluster_id == "cluster"


def test_failed_write_is_cut_off_and_journal_refuses_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    journal, state = Journal.open(tmp_path)
    state = append_one_by_one(journal, state, RECORDS[:2])

    def broken_fsync(descriptor: int) -> None:
        raise OSError(5, "Input/output error")

    with monkeypatch.context() as patch:
        patch.setattr("controller.journal.os.fsync", broken_fsync)
        with pytest.raises(OSError, match="Input/output"):
            journal.append(RECORDS[2:4])
    with pytest.raises(JournalFailedError):
        journal.append(RECORDS[4:])
    journal.close()
    _, recovered = Journal.open(tmp_path)
    assert recovered == state  # the failed records were never committed
