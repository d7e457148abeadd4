"""When a follower may apply a leader's fetch answer (pure).

Caller: `broker.replica.fetcher.ReplicaFetcher`, for every partition of every response.

A fetch takes time: while it is in flight a LeaderAndIsr may make this broker follow
another leader, or the same leader in a newer epoch, and the log may be truncated. An
answer (records, a diverging epoch, an out-of-range reset) describes the leader's log as
seen from the position the request was built from; applied to any other position it
can append another leader's records, truncate by a stale epoch, or rewrite the epoch
cache. So an answer is applied only when the partition is still a follower of the same
leader, in the same leader epoch, at the same fetch offset as when the request was built
(Kafka's `AbstractFetcherThread` checks the fetch offset and the current leader epoch
of its `PartitionFetchState` the same way); otherwise it is dropped and the partition
is fetched again from where it stands now.
"""

from __future__ import annotations

import msgspec


class FetchPosition(msgspec.Struct, frozen=True, kw_only=True):
    """Where a follower partition stood: whom it followed, in which epoch, from where."""

    leader_id: int
    leader_epoch: int
    fetch_offset: int


def response_applies(
    sent: FetchPosition, current: FetchPosition | None, *, same_position: bool = True
) -> bool:
    """Whether an answer to a request built at `sent` may be applied now.

    `current` is the partition's position now, None when it is no longer a follower.
    `same_position=False` (DELIBERATELY UNSAFE, the simulator's hole-4 canary only): the
    rule before the fix, any answer applies while the partition is a follower.
    """
    if not same_position:
        return current is not None
    return current is not None and current == sent
