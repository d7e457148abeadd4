"""The Raft messages on the wire: every kind survives `to_wire` -> bytes -> `from_wire`
unchanged, optional values included; a message without a body or with an unknown error
number is refused."""

from __future__ import annotations

from typing import TypedDict

import pytest
from hypothesis import given
from hypothesis import strategies as st

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
from controller.raft_wire import WireError, from_wire, to_wire
from minikafka.v1 import raft_pb2


class _Header(TypedDict):
    cluster_id: str
    source: int
    destination: int
    epoch: int


H = _Header(cluster_id="c", source=1, destination=2, epoch=7)
SNAP = SnapshotId(end_offset=40, epoch=3)

MESSAGES: list[tuple[str, Message]] = [
    ("vote", VoteRequest(**H, correlation_id=9, last_epoch=6, end_offset=41, pre_vote=True)),
    (
        "vote response, leader unknown",
        VoteResponse(**H, correlation_id=9, leader_id=None, granted=False, pre_vote=False),
    ),
    (
        "vote response, leader known, error",
        VoteResponse(
            **H,
            correlation_id=9,
            leader_id=0,
            granted=False,
            pre_vote=True,
            error=RaftError.INCONSISTENT_CLUSTER_ID,
        ),
    ),
    ("begin epoch", BeginQuorumEpoch(**H)),
    ("begin epoch response", BeginQuorumEpochResponse(**H, leader_id=3)),
    ("begin epoch response, no leader", BeginQuorumEpochResponse(**H, leader_id=None)),
    ("end epoch", EndQuorumEpoch(**H, preferred_successors=(3, 2))),
    (
        "fetch, no high watermark",
        FetchRequest(
            **H,
            correlation_id=1 << 50,
            fetch_offset=0,
            last_fetched_epoch=0,
            high_watermark=None,
            directory_id="d",
        ),
    ),
    (
        "fetch, high watermark 0",
        FetchRequest(
            **H,
            correlation_id=2,
            fetch_offset=5,
            last_fetched_epoch=4,
            high_watermark=0,
            directory_id="d",
        ),
    ),
    (
        "fetch response with entries",
        FetchResponse(
            **H,
            correlation_id=2,
            leader_id=1,
            error=RaftError.NONE,
            fetch_offset=5,
            entries=(Entry(4, b"x"), Entry(7, b"", EntryKind.LEADER_CHANGE)),
            high_watermark=5,
            log_start_offset=2,
        ),
    ),
    (
        "fetch response diverging",
        FetchResponse(
            **H,
            correlation_id=2,
            leader_id=1,
            error=RaftError.NONE,
            fetch_offset=5,
            diverging=EpochEndOffset(epoch=3, end_offset=0),
        ),
    ),
    (
        "fetch response snapshot",
        FetchResponse(
            **H,
            correlation_id=2,
            leader_id=None,
            error=RaftError.FENCED_LEADER_EPOCH,
            fetch_offset=5,
            snapshot_id=SNAP,
        ),
    ),
    ("fetch snapshot", FetchSnapshotRequest(**H, correlation_id=3, snapshot_id=SNAP, position=8)),
    (
        "fetch snapshot response",
        FetchSnapshotResponse(
            **H,
            correlation_id=3,
            leader_id=1,
            error=RaftError.NONE,
            snapshot_id=SNAP,
            position=8,
            chunk=b"\x00\xff" * 4,
            size_bytes=64,
        ),
    ),
]


@pytest.mark.parametrize("message", [m for _, m in MESSAGES], ids=[n for n, _ in MESSAGES])
def test_round_trip(message: Message) -> None:
    wire = raft_pb2.RaftMessage.FromString(to_wire(message).SerializeToString())
    assert from_wire(wire) == message


@given(
    offset=st.integers(0, 2**62),
    epoch=st.integers(0, 2**31 - 1),
    hw=st.one_of(st.none(), st.integers(0, 2**62)),
    payloads=st.lists(st.binary(max_size=64), max_size=5),
)
def test_fetch_response_round_trip(
    offset: int, epoch: int, hw: int | None, payloads: list[bytes]
) -> None:
    message = FetchResponse(
        **H,
        correlation_id=offset,
        leader_id=epoch % 5,
        error=RaftError.NONE,
        fetch_offset=offset,
        entries=tuple(Entry(epoch, payload) for payload in payloads),
        high_watermark=hw,
    )
    assert from_wire(to_wire(message)) == message


def test_refusals() -> None:
    with pytest.raises(WireError, match="without a body"):
        from_wire(raft_pb2.RaftMessage(cluster_id="c"))
    bad_error = raft_pb2.RaftMessage(vote_response=raft_pb2.RaftVoteResponse(error=12345))
    with pytest.raises(WireError, match="unknown Raft error 12345"):
        from_wire(bad_error)
    bad_kind = raft_pb2.RaftMessage(
        fetch_response=raft_pb2.RaftFetchResponse(entries=[raft_pb2.RaftEntry(kind=9)])
    )
    with pytest.raises(WireError, match="unknown entry kind 9"):
        from_wire(bad_kind)
