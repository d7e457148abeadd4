"""Values the Raft core exchanges: log entries, snapshots, vote state and the quorum messages.

Everything here is an immutable `msgspec.Struct`; messages form one tagged union (`Message`)
so a transport can encode them with msgspec (the later gRPC service maps them field by
field). Conventions, as in Kafka's KRaft:

- Offsets start at 0; an *end offset* is exclusive (the offset of the next entry), so the
  high watermark `hw` means "every entry below `hw` is committed".
- Epochs start at 1 (the first election); epoch 0 means "no epoch yet" (an empty log).
- `None` stands for "unknown" (no leader, no high watermark known yet).
- Every message carries the sender's `cluster_id` (a node refuses another cluster's
  messages), `source` and `destination` node ids and the sender's view of the epoch.
  Requests carry a `correlation_id` that the response echoes: a node acts only on the
  response to its latest request, so duplicated, reordered or late responses are ignored.

Error codes use Kafka's numbers (`RaftError`) so they can be cross-referenced.
"""

from __future__ import annotations

import enum

import msgspec


class RaftError(enum.IntEnum):
    """Errors in Raft responses, numbered as Kafka's `Errors.java`."""

    NONE = 0
    NOT_LEADER_OR_FOLLOWER = 6
    INVALID_REQUEST = 42
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    SNAPSHOT_NOT_FOUND = 98
    POSITION_OUT_OF_RANGE = 99
    INCONSISTENT_CLUSTER_ID = 104


class EntryKind(enum.IntEnum):
    DATA = 0  # a state-machine record (opaque payload)
    LEADER_CHANGE = 1  # the marker a new leader appends first; payload is a `LeaderChange`


class Entry(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One log entry. Its offset is its position in the log; `epoch` is the leader's."""

    epoch: int
    payload: bytes
    kind: EntryKind = EntryKind.DATA


class LeaderChange(msgspec.Struct, frozen=True, kw_only=True):
    """Payload of a LEADER_CHANGE entry (Kafka's LeaderChangeMessage)."""

    leader_id: int
    voters: tuple[int, ...]


_leader_change_encoder = msgspec.msgpack.Encoder()
_leader_change_decoder = msgspec.msgpack.Decoder(LeaderChange)


def leader_change_entry(epoch: int, leader_id: int, voters: tuple[int, ...]) -> Entry:
    payload = _leader_change_encoder.encode(LeaderChange(leader_id=leader_id, voters=voters))
    return Entry(epoch, payload, EntryKind.LEADER_CHANGE)


def decode_leader_change(entry: Entry) -> LeaderChange:
    if entry.kind is not EntryKind.LEADER_CHANGE:
        raise ValueError(f"not a leader-change entry: {entry.kind.name}")
    return _leader_change_decoder.decode(entry.payload)


class SnapshotId(msgspec.Struct, frozen=True, kw_only=True):
    """A snapshot covers every entry below `end_offset`; `epoch` is that of entry end-1."""

    end_offset: int
    epoch: int


class Snapshot(msgspec.Struct, frozen=True, kw_only=True):
    """A state-machine snapshot (KIP-630): opaque bytes plus the log position it covers."""

    end_offset: int
    epoch: int
    data: bytes

    @property
    def snapshot_id(self) -> SnapshotId:
        return SnapshotId(end_offset=self.end_offset, epoch=self.epoch)


class VoteState(msgspec.Struct, frozen=True, kw_only=True):
    """What a node must remember across a crash (Kafka's quorum-state file).

    `voted_for` is the candidate this node voted for in `epoch` (it never votes for anyone
    else in that epoch); `leader_id` the leader it knows for `epoch`. `can_vote` is False
    for a data directory formatted into an existing cluster (new or wiped disk): such a
    node neither grants votes nor stands until it has caught up from a leader (issue 18,
    item 4).
    """

    epoch: int = 0
    voted_for: int | None = None
    leader_id: int | None = None
    can_vote: bool = True


class EpochEndOffset(msgspec.Struct, frozen=True, kw_only=True):
    """An epoch and where it ends (exclusive) on the answering node's log."""

    epoch: int
    end_offset: int


# ---- messages -----------------------------------------------------------------------------


class VoteRequest(msgspec.Struct, frozen=True, kw_only=True, tag="vote"):
    """Vote or pre-vote (KIP-996). For a pre-vote `epoch` is the epoch the sender would
    stand in (its epoch + 1); a pre-vote changes no state on the receiver."""

    cluster_id: str
    source: int
    destination: int
    correlation_id: int
    epoch: int
    last_epoch: int
    end_offset: int
    pre_vote: bool


class VoteResponse(msgspec.Struct, frozen=True, kw_only=True, tag="vote_response"):
    cluster_id: str
    source: int
    destination: int
    correlation_id: int
    epoch: int  # the responder's current epoch
    leader_id: int | None
    granted: bool
    pre_vote: bool
    error: RaftError = RaftError.NONE


class BeginQuorumEpoch(msgspec.Struct, frozen=True, kw_only=True, tag="begin_epoch"):
    """A new leader announces itself (resent until the voter fetches in its epoch)."""

    cluster_id: str
    source: int
    destination: int
    epoch: int


class BeginQuorumEpochResponse(msgspec.Struct, frozen=True, kw_only=True, tag="begin_epoch_rsp"):
    """Sent only to a leader of an older epoch, so it learns it has been replaced."""

    cluster_id: str
    source: int
    destination: int
    epoch: int
    leader_id: int | None


class EndQuorumEpoch(msgspec.Struct, frozen=True, kw_only=True, tag="end_epoch"):
    """A resigning leader asks the voters to elect a successor now (graceful resign)."""

    cluster_id: str
    source: int
    destination: int
    epoch: int
    preferred_successors: tuple[int, ...]


class FetchRequest(msgspec.Struct, frozen=True, kw_only=True, tag="fetch"):
    """KIP-595 pull: the follower's log end and the epoch of its last entry.

    `fetch_offset` is durable on the follower when it sends this (the leader counts it
    towards the high watermark); `high_watermark` is what the follower knows, so the
    leader answers at once when it has a newer one.
    """

    cluster_id: str
    source: int
    destination: int
    correlation_id: int
    epoch: int
    fetch_offset: int
    last_fetched_epoch: int
    high_watermark: int | None
    directory_id: str


class FetchResponse(msgspec.Struct, frozen=True, kw_only=True, tag="fetch_response"):
    """Entries from the request's `fetch_offset`, or where the follower diverges, or the
    snapshot it must load first (its fetch offset is below the leader's log start)."""

    cluster_id: str
    source: int
    destination: int
    correlation_id: int
    epoch: int
    leader_id: int | None
    error: RaftError
    fetch_offset: int
    entries: tuple[Entry, ...] = ()
    high_watermark: int | None = None
    log_start_offset: int = 0
    diverging: EpochEndOffset | None = None
    snapshot_id: SnapshotId | None = None


class FetchSnapshotRequest(msgspec.Struct, frozen=True, kw_only=True, tag="fetch_snapshot"):
    cluster_id: str
    source: int
    destination: int
    correlation_id: int
    epoch: int
    snapshot_id: SnapshotId
    position: int


class FetchSnapshotResponse(msgspec.Struct, frozen=True, kw_only=True, tag="fetch_snapshot_rsp"):
    cluster_id: str
    source: int
    destination: int
    correlation_id: int
    epoch: int
    leader_id: int | None
    error: RaftError
    snapshot_id: SnapshotId
    position: int
    chunk: bytes = b""
    size_bytes: int = 0


Message = (
    VoteRequest
    | VoteResponse
    | BeginQuorumEpoch
    | BeginQuorumEpochResponse
    | EndQuorumEpoch
    | FetchRequest
    | FetchResponse
    | FetchSnapshotRequest
    | FetchSnapshotResponse
)
