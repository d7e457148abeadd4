"""The Raft core's messages to and from the wire (`raft.proto` `RaftMessage`), field by field.

Pure translation, no rules: `to_wire(message)` and `from_wire(wire)` are inverse
(`tests/unit/controller/test_raft_wire.py` checks the round trip for every message kind).
Optional values of the core (`None`: unknown leader, unknown high watermark, no divergence,
no snapshot) use proto3 field presence. `from_wire` raises `WireError` for a message it
cannot map (no body, an unknown entry kind or error number).
"""

from __future__ import annotations

from typing import TypedDict

from controller.raft.messages import (
    BeginQuorumEpoch,
    BeginQuorumEpochResponse,
    EndQuorumEpoch,
    Entry,
    EntryKind,
    EpochEndOffset,
    FetchRequest,
    FetchResponse,
    FetchSnapshotRequest,
    FetchSnapshotResponse,
    Message,
    RaftError,
    SnapshotId,
    VoteRequest,
    VoteResponse,
)
from minikafka.v1 import raft_pb2


class WireError(ValueError):
    """A RaftMessage that does not map to a core message."""


def _snapshot_id(value: SnapshotId) -> raft_pb2.RaftSnapshotId:
    return raft_pb2.RaftSnapshotId(end_offset=value.end_offset, epoch=value.epoch)


def to_wire(message: Message) -> raft_pb2.RaftMessage:
    wire = raft_pb2.RaftMessage(
        cluster_id=message.cluster_id,
        source=message.source,
        destination=message.destination,
        epoch=message.epoch,
    )
    if isinstance(message, VoteRequest):
        wire.vote.CopyFrom(
            raft_pb2.RaftVoteRequest(
                correlation_id=message.correlation_id,
                last_epoch=message.last_epoch,
                end_offset=message.end_offset,
                pre_vote=message.pre_vote,
            )
        )
    elif isinstance(message, VoteResponse):
        wire.vote_response.CopyFrom(
            raft_pb2.RaftVoteResponse(
                correlation_id=message.correlation_id,
                leader_id=message.leader_id,
                granted=message.granted,
                pre_vote=message.pre_vote,
                error=int(message.error),
            )
        )
    elif isinstance(message, BeginQuorumEpoch):
        wire.begin_quorum_epoch.SetInParent()
    elif isinstance(message, BeginQuorumEpochResponse):
        wire.begin_quorum_epoch_response.CopyFrom(
            raft_pb2.RaftBeginQuorumEpochResponse(leader_id=message.leader_id)
        )
    elif isinstance(message, EndQuorumEpoch):
        wire.end_quorum_epoch.CopyFrom(
            raft_pb2.RaftEndQuorumEpoch(preferred_successors=message.preferred_successors)
        )
    elif isinstance(message, FetchRequest):
        wire.fetch.CopyFrom(
            raft_pb2.RaftFetchRequest(
                correlation_id=message.correlation_id,
                fetch_offset=message.fetch_offset,
                last_fetched_epoch=message.last_fetched_epoch,
                high_watermark=message.high_watermark,
                directory_id=message.directory_id,
            )
        )
    elif isinstance(message, FetchResponse):
        response = raft_pb2.RaftFetchResponse(
            correlation_id=message.correlation_id,
            leader_id=message.leader_id,
            error=int(message.error),
            fetch_offset=message.fetch_offset,
            entries=[
                raft_pb2.RaftEntry(epoch=e.epoch, payload=e.payload, kind=int(e.kind))
                for e in message.entries
            ],
            high_watermark=message.high_watermark,
            log_start_offset=message.log_start_offset,
        )
        if message.diverging is not None:
            response.diverging.CopyFrom(
                raft_pb2.RaftEpochEndOffset(
                    epoch=message.diverging.epoch, end_offset=message.diverging.end_offset
                )
            )
        if message.snapshot_id is not None:
            response.snapshot_id.CopyFrom(_snapshot_id(message.snapshot_id))
        wire.fetch_response.CopyFrom(response)
    elif isinstance(message, FetchSnapshotRequest):
        wire.fetch_snapshot.CopyFrom(
            raft_pb2.RaftFetchSnapshotRequest(
                correlation_id=message.correlation_id,
                snapshot_id=_snapshot_id(message.snapshot_id),
                position=message.position,
            )
        )
    else:
        wire.fetch_snapshot_response.CopyFrom(
            raft_pb2.RaftFetchSnapshotResponse(
                correlation_id=message.correlation_id,
                leader_id=message.leader_id,
                error=int(message.error),
                snapshot_id=_snapshot_id(message.snapshot_id),
                position=message.position,
                chunk=message.chunk,
                size_bytes=message.size_bytes,
            )
        )
    return wire


def _error(number: int) -> RaftError:
    try:
        return RaftError(number)
    except ValueError:
        raise WireError(f"unknown Raft error {number}") from None


def _kind(number: int) -> EntryKind:
    try:
        return EntryKind(number)
    except ValueError:
        raise WireError(f"unknown entry kind {number}") from None


_WithLeader = (
    raft_pb2.RaftVoteResponse
    | raft_pb2.RaftBeginQuorumEpochResponse
    | raft_pb2.RaftFetchResponse
    | raft_pb2.RaftFetchSnapshotResponse
)


def _leader(field: _WithLeader) -> int | None:
    return field.leader_id if field.HasField("leader_id") else None


class _Header(TypedDict):
    cluster_id: str
    source: int
    destination: int
    epoch: int


def from_wire(wire: raft_pb2.RaftMessage) -> Message:
    header = _Header(
        cluster_id=wire.cluster_id,
        source=wire.source,
        destination=wire.destination,
        epoch=wire.epoch,
    )
    body = wire.WhichOneof("body")
    if body == "vote":
        vote = wire.vote
        return VoteRequest(
            **header,
            correlation_id=vote.correlation_id,
            last_epoch=vote.last_epoch,
            end_offset=vote.end_offset,
            pre_vote=vote.pre_vote,
        )
    if body == "vote_response":
        answer = wire.vote_response
        return VoteResponse(
            **header,
            correlation_id=answer.correlation_id,
            leader_id=_leader(answer),
            granted=answer.granted,
            pre_vote=answer.pre_vote,
            error=_error(answer.error),
        )
    if body == "begin_quorum_epoch":
        return BeginQuorumEpoch(**header)
    if body == "begin_quorum_epoch_response":
        return BeginQuorumEpochResponse(
            **header, leader_id=_leader(wire.begin_quorum_epoch_response)
        )
    if body == "end_quorum_epoch":
        return EndQuorumEpoch(
            **header,
            preferred_successors=tuple(wire.end_quorum_epoch.preferred_successors),
        )
    if body == "fetch":
        fetch = wire.fetch
        return FetchRequest(
            **header,
            correlation_id=fetch.correlation_id,
            fetch_offset=fetch.fetch_offset,
            last_fetched_epoch=fetch.last_fetched_epoch,
            high_watermark=fetch.high_watermark if fetch.HasField("high_watermark") else None,
            directory_id=fetch.directory_id,
        )
    if body == "fetch_response":
        response = wire.fetch_response
        return FetchResponse(
            **header,
            correlation_id=response.correlation_id,
            leader_id=_leader(response),
            error=_error(response.error),
            fetch_offset=response.fetch_offset,
            entries=tuple(
                Entry(entry.epoch, entry.payload, _kind(entry.kind)) for entry in response.entries
            ),
            high_watermark=(
                response.high_watermark if response.HasField("high_watermark") else None
            ),
            log_start_offset=response.log_start_offset,
            diverging=(
                EpochEndOffset(
                    epoch=response.diverging.epoch, end_offset=response.diverging.end_offset
                )
                if response.HasField("diverging")
                else None
            ),
            snapshot_id=(
                SnapshotId(
                    end_offset=response.snapshot_id.end_offset, epoch=response.snapshot_id.epoch
                )
                if response.HasField("snapshot_id")
                else None
            ),
        )
    if body == "fetch_snapshot":
        request = wire.fetch_snapshot
        return FetchSnapshotRequest(
            **header,
            correlation_id=request.correlation_id,
            snapshot_id=SnapshotId(
                end_offset=request.snapshot_id.end_offset, epoch=request.snapshot_id.epoch
            ),
            position=request.position,
        )
    if body == "fetch_snapshot_response":
        chunk = wire.fetch_snapshot_response
        return FetchSnapshotResponse(
            **header,
            correlation_id=chunk.correlation_id,
            leader_id=_leader(chunk),
            error=_error(chunk.error),
            snapshot_id=SnapshotId(
                end_offset=chunk.snapshot_id.end_offset, epoch=chunk.snapshot_id.epoch
            ),
            position=chunk.position,
            chunk=chunk.chunk,
            size_bytes=chunk.size_bytes,
        )
    raise WireError("RaftMessage without a body")
