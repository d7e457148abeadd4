"""A sans-I/O Raft core for the controller quorum (KRaft: KIP-595, KIP-630, KIP-996).

The core (`core.RaftNode`) is a deterministic state machine: the caller feeds it events
(`start`, `tick(now_ms)`, `receive(message)`, `persisted(seq)`, `propose(payloads)`,
`create_snapshot(...)`, `resign()`) and performs the returned actions in order (`actions`):
messages to send, persistence to make durable (the core holds back every message that
depends on it), committed entries and snapshots for the state machine, role changes. It
has no sockets, no clock, no disk, no asyncio and no randomness of its own (election
jitter comes from the `random.Random` the caller passes in).

Modules, one responsibility each:

- `messages`: entries, snapshots, vote state and the quorum's messages (Vote with
  pre-vote, BeginQuorumEpoch, EndQuorumEpoch, Fetch, FetchSnapshot), Kafka error numbers.
- `actions`: what the core asks the shell to do, and the order contract.
- `rules`: the protocol rules as pure functions (majority, high watermark, vote and
  pre-vote granting, fetch validation and divergence, truncation).
- `roles`: the named roles (Unattached, Prospective, Candidate, Leader, Follower,
  Resigned) and the transition list; anything else raises `IllegalTransition`.
- `log`: the core's in-memory log and epoch cache.
- `config`: `RaftConfig` (voters, timeouts, fetch and snapshot-chunk sizes).
- `core`: `RaftNode`, the bookkeeping that ties the rules together.
- `storage`: the storage port (`RaftStorage`), `PersistentState`, `perform`, and the
  in-memory implementation with crash semantics used by the simulation.
- `file_storage`: the real storage (log file with length+CRC frames, atomic vote-state
  file, snapshot files, recovery that cuts a torn tail).

How the controller uses it (issue 18, items 2-5)
------------------------------------------------

- `controller.quorum.MetadataQuorum` is the shell: one task owns the node and performs its
  actions in order (messages to `controller.raft_transport`, persistence batched onto a
  worker thread with one fsync per batch, committed entries replayed into the controller's
  state, role changes to the engine).
- Each controller record is one DATA entry (`controller.metadata_log`); the entry at Raft
  offset `o` has metadata offset `o + 1`. Every controller replays committed entries only;
  the active controller is the ready leader (`LeaderReady`) and replies to a request once
  its records are applied. Its first records carry the controller epoch = the Raft epoch.
- Snapshots are `state_machine.snapshot_records` (the journal's `Snapshot` struct) taken
  every `snapshot_every_records` applied entries; `LoadSnapshot` rebuilds the state from
  them.
- The data directory (`controller.metadata_dir`) is `DIR/raft`, formatted with
  `FileRaftStorage.format`: `can_vote=True` only for a new cluster (no voter that answers
  holds metadata), `can_vote=False` for a directory that joins an existing one.

Known limit of the disk-safety rule (item 4): a wiped voter that had voted in an epoch
above the leader's it catches up from may, once caught up, vote again in that epoch. It
needs a candidate still waiting on the lost vote after the wipe, restart and catch-up;
KIP-853 closes it by keying voters with directory ids (dynamic membership).
"""
