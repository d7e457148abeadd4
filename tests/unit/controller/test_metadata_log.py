"""Controller records in the Raft log: the replay of committed entries (markers skipped,
metadata offset = Raft offset + 1), snapshots that rebuild the same state, and refusals."""

from __future__ import annotations

import pytest

from controller.metadata_log import (
    MetadataDecodeError,
    MetadataReplay,
    decode_snapshot,
    encode_record,
    encode_snapshot,
)
from controller.model import BrokerRegistration, TopicRecord
from controller.raft.messages import Entry, leader_change_entry
from controller.records import (
    BrokerRecord,
    ClusterIdRecord,
    ControllerEpochRecord,
    Record,
    TopicUpsertRecord,
)

RECORDS: list[Record] = [
    ClusterIdRecord(cluster_id="c"),
    ControllerEpochRecord(controller_id=2, controller_epoch=1),
    BrokerRecord(
        registration=BrokerRegistration(
            broker_id=1, host="h", port=1, incarnation_id="i", broker_epoch=4
        )
    ),
    TopicUpsertRecord(topic=TopicRecord(name="t", num_partitions=1, configs={"a": "b"})),
]


def _entries(epoch: int, records: list[Record]) -> list[Entry]:
    return [Entry(epoch, encode_record(record)) for record in records]


def test_replay_skips_markers_and_numbers_metadata_from_one() -> None:
    replay = MetadataReplay()
    applied = replay.apply(0, [leader_change_entry(1, 2, (1, 2, 3)), *_entries(1, RECORDS)])
    assert applied == RECORDS
    assert replay.applied_end == 5
    state = replay.state
    assert state.cluster_id == "c"
    assert state.controller_epoch == 1
    # Raft offsets 1..4 hold the records: metadata offsets 2..5 (the broker's is 4).
    assert state.metadata_offset == 5
    assert state.broker_offsets == {1: 4}
    assert set(state.topics) == {"t"}


def test_a_snapshot_rebuilds_the_same_state() -> None:
    replay = MetadataReplay()
    replay.apply(0, _entries(1, RECORDS))
    again = MetadataReplay()
    again.load(encode_snapshot(replay.state), replay.applied_end)
    assert again.state == replay.state
    assert again.applied_end == replay.applied_end
    assert decode_snapshot(encode_snapshot(replay.state)) == replay.state


def test_refusals() -> None:
    replay = MetadataReplay()
    with pytest.raises(MetadataDecodeError, match="do not continue"):
        replay.apply(3, _entries(1, RECORDS))
    with pytest.raises(MetadataDecodeError, match="undecodable controller record"):
        replay.apply(0, [Entry(1, b"\xc1")])
    with pytest.raises(MetadataDecodeError, match="undecodable metadata snapshot"):
        decode_snapshot(b"nonsense")
