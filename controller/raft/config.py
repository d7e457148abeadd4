"""Settings of one Raft node (all times in milliseconds of the caller's clock).

Defaults aim at the issue's fail-over target (a new leader well within 1 s of a kill -9),
so they are shorter than Kafka's (`controller.quorum.election.timeout.ms` = 1000,
`fetch.timeout.ms` = 2000); the simulation uses its own, smaller values.
"""

from __future__ import annotations

import msgspec


class RaftConfig(msgspec.Struct, frozen=True, kw_only=True):
    node_id: int
    voters: tuple[int, ...]
    cluster_id: str
    #: Unattached/Candidate/Prospective wait this long plus a random share of it again.
    election_timeout_ms: int = 300
    #: A follower that heard nothing valid from its leader for this long (plus a random
    #: share of the election timeout, drawn per leadership) stands (pre-vote).
    fetch_timeout_ms: int = 500
    #: A leader resigns when a majority of voters (itself included) has not fetched for this
    #: long (Kafka: 1.5 x fetch timeout).
    check_quorum_timeout_ms: int = 750
    #: The leader holds a fetch that finds nothing new for at most this long (long poll).
    fetch_max_wait_ms: int = 200
    #: A request without an answer after this long is sent again (it may have been lost).
    request_timeout_ms: int = 400
    retry_backoff_ms: int = 50
    #: BeginQuorumEpoch is repeated at this interval to voters that have not fetched in this
    #: epoch, or not within the fetch timeout.
    begin_quorum_retry_ms: int = 200
    fetch_max_entries: int = 1000
    fetch_max_bytes: int = 1024 * 1024
    snapshot_chunk_bytes: int = 256 * 1024

    def __post_init__(self) -> None:
        problems = []
        if len(set(self.voters)) != len(self.voters) or not self.voters:
            problems.append(f"voters must be distinct and non-empty: {self.voters}")
        if self.node_id not in self.voters:
            problems.append(f"node {self.node_id} is not one of the voters {self.voters}")
        if not self.cluster_id:
            problems.append("cluster_id is empty")
        for name in (
            "election_timeout_ms",
            "fetch_timeout_ms",
            "check_quorum_timeout_ms",
            "fetch_max_wait_ms",
            "request_timeout_ms",
            "retry_backoff_ms",
            "begin_quorum_retry_ms",
            "fetch_max_entries",
            "fetch_max_bytes",
            "snapshot_chunk_bytes",
        ):
            if getattr(self, name) <= 0:
                problems.append(f"{name} must be positive")
        if self.request_timeout_ms <= self.fetch_max_wait_ms:
            problems.append("request_timeout_ms must exceed fetch_max_wait_ms (long polls)")
        if self.fetch_timeout_ms <= self.fetch_max_wait_ms:
            problems.append("fetch_timeout_ms must exceed fetch_max_wait_ms")
        if self.check_quorum_timeout_ms < self.fetch_timeout_ms:
            problems.append("check_quorum_timeout_ms must be at least fetch_timeout_ms")
        if problems:
            raise ValueError("invalid Raft config: " + "; ".join(problems))
