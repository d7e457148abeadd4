"""How controller records and state live in the Raft log: entry payloads and snapshot bytes.

- A controller `Record` is one DATA entry whose payload is the msgpack of the tagged
  `Record` union. The entry at Raft offset `o` has metadata offset `o + 1` (the journal's
  offsets started at 1, so a converted journal continues where it ended).
- A Raft snapshot's data is the msgpack `journal.Snapshot(offset, records, broker_offsets)`:
  the records that rebuild the state (`state_machine.snapshot_records`), replayed onto an
  empty state exactly as the journal's `metadata.snapshot` was.
- `MetadataReplay` folds committed entries into a `ClusterState` (leader-change markers
  carry no record and only move the applied offset).

Pure functions and one small fold; no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from controller.history import PartitionHistory
from controller.journal import Snapshot as StateSnapshot
from controller.model import ClusterState
from controller.raft.messages import Entry, EntryKind
from controller.records import Record
from controller.state_machine import replay, snapshot_records

_encoder = msgspec.msgpack.Encoder()
_record_decoder: msgspec.msgpack.Decoder[Record] = msgspec.msgpack.Decoder(Record)
_snapshot_decoder = msgspec.msgpack.Decoder(StateSnapshot)


class MetadataDecodeError(Exception):
    """A committed entry or snapshot that is not controller metadata: the node must stop."""


def encode_record(record: Record) -> bytes:
    return _encoder.encode(record)


def decode_record(payload: bytes) -> Record:
    try:
        return _record_decoder.decode(payload)
    except msgspec.DecodeError as error:
        raise MetadataDecodeError(f"undecodable controller record: {error}") from error


def metadata_offset(raft_offset: int) -> int:
    """The metadata offset (as brokers see it) of the entry at `raft_offset`."""
    return raft_offset + 1


def encode_snapshot(state: ClusterState) -> bytes:
    return _encoder.encode(
        StateSnapshot(
            offset=state.metadata_offset,
            records=snapshot_records(state),
            broker_offsets=state.broker_offsets,
        )
    )


def decode_snapshot(data: bytes) -> ClusterState:
    """The state a snapshot's bytes rebuild (as `Journal.open` rebuilds `metadata.snapshot`)."""
    try:
        snapshot = _snapshot_decoder.decode(data)
    except msgspec.DecodeError as error:
        raise MetadataDecodeError(f"undecodable metadata snapshot: {error}") from error
    return state_from_snapshot(snapshot)


def state_from_snapshot(snapshot: StateSnapshot) -> ClusterState:
    state = ClusterState()
    for record in snapshot.records:
        state = replay(state, snapshot.offset, record)
    offsets = {**state.broker_offsets, **snapshot.broker_offsets}
    return msgspec.structs.replace(state, broker_offsets=offsets)


class MetadataReplay:
    """The committed state of the metadata log: `apply` committed entries in offset order,
    `load` a snapshot. `applied_end` is the Raft end offset of what has been applied."""

    def __init__(self, history: PartitionHistory | None = None) -> None:
        self.state = ClusterState()
        self.applied_end = 0
        #: Sees every record replayed and every snapshot loaded (`minikafka timeline`), on
        #: the active controller and the standbys alike.
        self.history = history

    def load(self, data: bytes, end_offset: int) -> None:
        self.state = decode_snapshot(data)
        self.applied_end = end_offset
        if self.history is not None:
            self.history.seed(self.state)

    def apply(self, base_offset: int, entries: Sequence[Entry]) -> list[Record]:
        """Apply entries starting at Raft offset `base_offset`; returns their records."""
        if base_offset != self.applied_end:
            raise MetadataDecodeError(
                f"entries at {base_offset} do not continue the applied log (ends at "
                f"{self.applied_end})"
            )
        state = self.state
        records: list[Record] = []
        for index, entry in enumerate(entries):
            if entry.kind is not EntryKind.DATA:
                continue
            record = decode_record(entry.payload)
            offset = metadata_offset(base_offset + index)
            if self.history is not None:
                self.history.observe(state, offset, record)
            state = replay(state, offset, record)
            records.append(record)
        self.state = state
        self.applied_end = base_offset + len(entries)
        return records
