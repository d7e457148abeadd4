"""What the Raft core asks its caller (the shell) to do, in the order it must be done.

Every core call returns a list of actions. The shell performs them **in list order**:

- Persistence actions (`PersistVote`, `AppendEntries`, `TruncateLog`, `WriteSnapshot`,
  `InstallSnapshot`) carry a sequence number `seq`, increasing by one per action. The shell
  hands them to the storage port in that order (`storage.perform`), makes them durable
  (`storage.sync`) and then calls `core.persisted(seq)` with the highest `seq` that is
  durable. It may batch many actions per fsync and complete them later; they must become
  durable in order (a crash may lose a suffix of unsynced actions, never a middle one).
- `Send` may go out at once: the core itself holds back every message that depends on a
  persistence action still in flight (a vote grant, a request in a new epoch, a fetch that
  reports the log end) and returns it from the `persisted` call that makes it safe.
- `ApplyEntries` / `LoadSnapshot` feed the state machine committed data only, in offset
  order; `RoleChanged` and `LeaderReady` report the node's role for the shell (metrics, the
  active controller); `Refused` names a message dropped for a reason worth logging.
"""

from __future__ import annotations

import enum

import msgspec

from controller.raft.messages import Entry, Message, Snapshot, VoteState


class Role(enum.Enum):
    UNATTACHED = "unattached"
    PROSPECTIVE = "prospective"
    CANDIDATE = "candidate"
    LEADER = "leader"
    FOLLOWER = "follower"
    RESIGNED = "resigned"


class Send(msgspec.Struct, frozen=True, gc=False):
    message: Message


class PersistVote(msgspec.Struct, frozen=True, kw_only=True):
    """Atomically replace the vote state (tmp + fsync + rename)."""

    seq: int
    vote: VoteState


class AppendEntries(msgspec.Struct, frozen=True, kw_only=True):
    """Append `entries` at `base_offset`, which is the current end of the stored log."""

    seq: int
    base_offset: int
    entries: tuple[Entry, ...]


class TruncateLog(msgspec.Struct, frozen=True, kw_only=True):
    """Remove every entry at or above `end_offset` (a diverging suffix)."""

    seq: int
    end_offset: int


class WriteSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """Store `snapshot` durably, then drop the log entries below its end offset."""

    seq: int
    snapshot: Snapshot


class InstallSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """Store `snapshot` (fetched from the leader) and empty the log: it now starts at the
    snapshot's end offset."""

    seq: int
    snapshot: Snapshot


PersistenceAction = PersistVote | AppendEntries | TruncateLog | WriteSnapshot | InstallSnapshot
PERSISTENCE_ACTIONS = (PersistVote, AppendEntries, TruncateLog, WriteSnapshot, InstallSnapshot)


class ApplyEntries(msgspec.Struct, frozen=True, kw_only=True):
    """Committed entries for the state machine, starting at `base_offset` (contiguous with
    the previous apply). LEADER_CHANGE entries carry no state-machine record."""

    base_offset: int
    entries: tuple[Entry, ...]


class LoadSnapshot(msgspec.Struct, frozen=True, kw_only=True):
    """Replace the state machine's state with `snapshot` (committed); applying continues at
    `snapshot.end_offset`."""

    snapshot: Snapshot


class RoleChanged(msgspec.Struct, frozen=True, kw_only=True):
    role: Role
    epoch: int
    leader_id: int | None


class LeaderReady(msgspec.Struct, frozen=True, kw_only=True):
    """This node leads `epoch` and its leader-change marker is committed: every entry of an
    earlier epoch has been applied, so it may serve (accept proposals) now."""

    epoch: int
    high_watermark: int


class Refused(msgspec.Struct, frozen=True, kw_only=True):
    source: int
    reason: str


Action = (
    Send
    | PersistVote
    | AppendEntries
    | TruncateLog
    | WriteSnapshot
    | InstallSnapshot
    | ApplyEntries
    | LoadSnapshot
    | RoleChanged
    | LeaderReady
    | Refused
)
