"""The `stale-answer` fault: a broker->broker fetch answer held until it looks fresh.

A replica fetch answer describes the leader's log as seen from the follower's position
when the request was built (leader, epoch, fetch offset). A follower must not apply it
once that position has changed (hole 4 of issue 17), and the cheapest test of a position
is the fetch offset: an answer arriving while the follower's log end differs from it is
refused even by a careless follower. The dangerous answer is the one that arrives when
the log end is back at the fetch offset after it moved (truncated after a leadership
change, then re-fetched from the new leader up to the same offset): only the leader and
epoch tell it apart then. Delivery times that line this up are rare (they depend on
batch boundaries and round trips), so this fault picks them: the trap catches the next
fetch answer carrying records on a leader->follower link and holds it until, for a
partition it carries records of, the follower's log end has moved away from the fetch
offset and come back to it, or until its bound (then it arrives anyway, a plain delay).
Nothing is lost and nothing is forged: a TCP connection can deliver an answer that late.

Armed by the nemesis's `stale-answer` action, and by `slow-rival` (only answers carrying
records of given partitions, held longer once one of them changed leader, re-armed after
each answer while the rival's link is slowed); only a canary adds them to
`SimParams.extra_actions` (the default seeds never draw them).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import msgspec
from google.protobuf.message import Message as ProtoMessage

from broker.replica.partition import Partition
from minikafka.v1 import broker_pb2
from tests.sim.replication.cluster import SimBroker

PartitionKey = tuple[str, int]


class Watch(msgspec.Struct, frozen=True, kw_only=True):
    """One partition of a held answer: the request's fetch offset, and whether the
    follower's log end has been elsewhere since the answer was held."""

    fetch_offset: int
    moved: bool = False


def looks_fresh(watch: Watch, log_end_offset: int) -> tuple[Watch, bool]:
    """The watch after seeing the follower's log end, and whether to deliver now: the log
    end is at the fetch offset again after it moved."""
    if log_end_offset != watch.fetch_offset:
        return msgspec.structs.replace(watch, moved=True), False
    return watch, watch.moved


class FreshLookingAnswer:
    """An `AnswerTrap` (network.py) on the link from a leader to `follower`."""

    def __init__(
        self,
        follower: SimBroker,
        bound_s: float,
        note: Callable[[str], None],
        *,
        keys: frozenset[PartitionKey] | None = None,
        after_move_s: float = 0.0,
        released: Callable[[FreshLookingAnswer], None] | None = None,
    ) -> None:
        self.follower = follower
        self.bound_s = bound_s
        self._note = note
        #: Only answers carrying records of one of these partitions (None: of any).
        self.keys = keys
        #: Once a watched partition has changed leader, the answer is held up to this
        #: much longer (the follower must first truncate and re-fetch from the new leader).
        self.after_move_s = after_move_s
        #: Called once the held answer is let go (the nemesis may re-arm the trap).
        self._released = released

    def catches(self, method: str, request: ProtoMessage, answer: ProtoMessage) -> bool:
        return (
            method == "Fetch"
            and isinstance(request, broker_pb2.ReplicaFetchRequest)
            and isinstance(answer, broker_pb2.FetchResponse)
            and any(
                part.records and (self.keys is None or (part.topic, part.partition) in self.keys)
                for part in answer.partitions
            )
        )

    async def release(self, request: ProtoMessage, answer: ProtoMessage) -> None:
        try:
            await self._hold(request, answer)
        finally:
            if self._released is not None:
                self._released(self)

    async def _hold(self, request: ProtoMessage, answer: ProtoMessage) -> None:
        assert isinstance(request, broker_pb2.ReplicaFetchRequest)
        assert isinstance(answer, broker_pb2.FetchResponse)
        offsets = {(part.topic, part.partition): part.fetch_offset for part in request.partitions}
        watches = {
            key: Watch(fetch_offset=offsets[key])
            for part in answer.partitions
            if part.records and (key := (part.topic, part.partition)) in offsets
        }
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.bound_s
        name = self.follower.name
        self._note(f"stale-answer: holding the answer to {name} for {sorted(watches)}")
        leaders = {
            key: partition.leader_id
            for key in watches
            if (partition := self._partition(key)) is not None
        }
        while (remaining := deadline - loop.time()) > 0:
            changes: list[asyncio.Future[None]] = []
            for key, watch in watches.items():
                partition = self._partition(key)
                if partition is None:
                    continue
                if (
                    self.after_move_s
                    and leaders.get(key, partition.leader_id) != partition.leader_id
                ):
                    leaders[key] = partition.leader_id
                    deadline = max(deadline, loop.time() + self.after_move_s)
                    self._note(
                        f"stale-answer: {name} {key[0]}/{key[1]} now follows broker "
                        f"{partition.leader_id}: held up to {self.after_move_s * 1000:.0f} ms more"
                    )
                watches[key], fresh = looks_fresh(watch, partition.log.log_end_offset)
                if fresh:
                    self._note(
                        f"stale-answer: {name} {key[0]}/{key[1]} is back at log end "
                        f"{watch.fetch_offset}: the held answer arrives"
                    )
                    return
                changes.append(partition.changed())
            if changes:
                await asyncio.wait(changes, timeout=remaining)
            else:
                await asyncio.sleep(remaining)
        self._note(f"stale-answer: the answer to {name} arrives at the bound")

    def _partition(self, key: PartitionKey) -> Partition | None:
        inner = self.follower.broker
        if not self.follower.alive or inner is None or not hasattr(inner, "replicas"):
            return None
        return inner.replicas.partitions.get(key)
