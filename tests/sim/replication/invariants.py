"""Replica invariants the simulation checks while it runs (not only on the final history).

`CommittedPrefix` states: a replica never truncates its log below the high watermark it
has learned. Every offset below a replica's HW is committed (the leader's HW is the
smallest log end over an ISR of at least min.insync.replicas; a follower's is
min(leader's HW, its own log end) after a fetch the leader checked against its log), and
epoch-based truncation (KIP-101/279/320) cuts only a suffix the leader lacks, which never
holds a committed record. So a replica whose log end falls below the HW it once had has
removed committed records; whether that loses an acknowledged write too depends on what
fails next (hole 4: only if the truncated replica is elected before it re-fetches), so
this check sees such a schedule one step before the history checker could.

Where the protocol allows it, the expectation is dropped:

- an unclean election of the partition (committed records may be gone for good; the
  partition is not checked for the rest of the run);
- a power loss (the records no fsync covered are gone; the broker's HW is learned again
  from its log as it restarts) and a wiped data directory (everything is gone; likewise).

Pure: the simulation (`Simulation.check_replicas`) feeds it what each broker's logs
hold after every fetch answer that broker applied, and the nemesis tells it about power
losses, wipes and unclean elections.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec

PartitionKey = tuple[str, int]


class Breach(msgspec.Struct, frozen=True, kw_only=True):
    """A replica's log end below the HW it had learned."""

    broker_id: int
    key: PartitionKey
    log_end_offset: int
    learned_high_watermark: int

    def describe(self) -> str:
        topic, partition = self.key
        return (
            f"broker {self.broker_id} truncated {topic}/{partition} to {self.log_end_offset}, "
            f"below the high watermark {self.learned_high_watermark} it had learned "
            "(committed records removed)"
        )


class CommittedPrefix:
    """The highest HW each (broker, partition) replica has shown since it last lost its
    data, and the partitions no longer checked."""

    def __init__(self) -> None:
        self._learned: dict[tuple[int, PartitionKey], int] = {}
        self._unchecked: set[PartitionKey] = set()
        #: Brokers back from a power loss or wipe, with the partitions their own fetcher
        #: has applied an answer of since (checked against a leader's log).
        self._revalidating: dict[int, set[PartitionKey]] = {}

    def observe(
        self, broker_id: int, key: PartitionKey, *, log_end_offset: int, high_watermark: int
    ) -> Breach | None:
        """One replica's log as it is now: a breach if its log end is below the HW it had
        learned (that HW is kept, so the breach is reported once per truncation)."""
        if key in self._unchecked:
            return None
        revalidated = self._revalidating.get(broker_id)
        if revalidated is not None and key not in revalidated:
            return None
        learned = self._learned.get((broker_id, key), 0)
        if log_end_offset < learned:
            self._learned[(broker_id, key)] = log_end_offset
            return Breach(
                broker_id=broker_id,
                key=key,
                log_end_offset=log_end_offset,
                learned_high_watermark=learned,
            )
        # A log recovered after a crash may hold a HW checkpoint above its log end until it
        # is clamped: what is learned is only what the log holds.
        self._learned[(broker_id, key)] = max(learned, min(high_watermark, log_end_offset))
        return None

    def data_lost(self, broker_id: int) -> None:
        """A power loss or a wipe on `broker_id`: its logs may be shorter than their HW,
        and a truncation no fsync covered may be undone (the truncated records are back,
        under the HW checkpoint the broker synced after it fetched their replacements).
        Its partitions are not checked again until its own fetcher has applied an answer
        of each (the leader's divergence check runs on that answer: seed 169, where the
        restarted follower's recovered log held old-epoch records below its HW until its
        first fetch truncated them; it was out of the ISR meanwhile). An answer with an
        error checked nothing and does not count (seed 1633: the new leader answered
        UNKNOWN_LEADER_EPOCH until it took its epoch, then the divergence check truncated
        the old-epoch record the power loss had brought back)."""
        for replica in [replica for replica in self._learned if replica[0] == broker_id]:
            del self._learned[replica]
        self._revalidating[broker_id] = set()

    def fetched(self, broker_id: int, keys: Iterable[PartitionKey]) -> None:
        """`broker_id`'s fetcher applied an answer of `keys` without error (the leader
        checked the follower's log against its own)."""
        revalidated = self._revalidating.get(broker_id)
        if revalidated is not None:
            revalidated.update(keys)

    def unclean_election(self, key: PartitionKey) -> None:
        """An unclean election of `key`: committed records of it may be lost from now on."""
        self._unchecked.add(key)
