"""A scripted cluster of Raft cores for scenario tests: FIFO network, manual time, storage.

Unlike the simulation (random schedules), a test here decides every step: which messages
are delivered (all, in order, except blocked links), when time advances, whether a node's
persistence completes at once (`auto_sync`) or only when the test says so.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import TypeVar

from controller.raft.actions import PERSISTENCE_ACTIONS, Action, Send
from controller.raft.config import RaftConfig
from controller.raft.core import RaftNode
from controller.raft.messages import Message
from controller.raft.storage import InMemoryStorage, perform

CLUSTER_ID = "test-cluster"
T = TypeVar("T")


def harness_config(
    node_id: int, voters: tuple[int, ...], *, fetch_max_entries: int = 4
) -> RaftConfig:
    return RaftConfig(
        node_id=node_id,
        voters=voters,
        cluster_id=CLUSTER_ID,
        election_timeout_ms=100,
        fetch_timeout_ms=200,
        check_quorum_timeout_ms=300,
        fetch_max_wait_ms=50,
        request_timeout_ms=150,
        retry_backoff_ms=10,
        begin_quorum_retry_ms=50,
        fetch_max_entries=fetch_max_entries,
        snapshot_chunk_bytes=8,
    )


class Harness:
    def __init__(
        self,
        voters: tuple[int, ...] = (1, 2, 3),
        *,
        new_directories: frozenset[int] = frozenset(),
        manual_sync: frozenset[int] = frozenset(),
        fetch_max_entries: int = 4,
    ) -> None:
        self.voters = voters
        self.fetch_max_entries = fetch_max_entries
        self.now = 0
        self.storages = {
            node: InMemoryStorage(
                cluster_id=CLUSTER_ID,
                directory_id=f"dir-{node}",
                can_vote=node not in new_directories,
            )
            for node in voters
        }
        self.nodes: dict[int, RaftNode] = {}
        self.inbox: list[Message] = []
        self.blocked: set[tuple[int, int]] = set()
        self.drop: Callable[[Message], bool] = lambda message: False
        self.log: dict[int, list[Action]] = {node: [] for node in voters}
        self.manual_sync = set(manual_sync)
        self._issued = dict.fromkeys(voters, 0)
        self._incarnation = dict.fromkeys(voters, 0)
        for node in voters:
            self.start(node)

    # ---- nodes ------------------------------------------------------------------------------

    def start(self, node_id: int) -> None:
        self._incarnation[node_id] += 1
        self._issued[node_id] = 0
        core = RaftNode(
            harness_config(node_id, self.voters, fetch_max_entries=self.fetch_max_entries),
            self.storages[node_id].load(),
            rng=random.Random(node_id * 1000 + self._incarnation[node_id]),
        )
        self.nodes[node_id] = core
        self.handle(node_id, core.start(self.now))

    def crash(self, node_id: int, *, keep_unsynced: int = 0) -> None:
        del self.nodes[node_id]
        self.storages[node_id].crash(keep_unsynced=keep_unsynced)
        self.inbox = [m for m in self.inbox if m.destination != node_id]

    def handle(self, node_id: int, actions: list[Action]) -> None:
        self.log[node_id].extend(actions)
        for action in actions:
            if isinstance(action, Send):
                self.inbox.append(action.message)
            elif isinstance(action, PERSISTENCE_ACTIONS):
                perform(self.storages[node_id], action)
                self._issued[node_id] = action.seq
        if node_id not in self.manual_sync:
            self.sync(node_id)

    def sync(self, node_id: int) -> None:
        storage = self.storages[node_id]
        core = self.nodes.get(node_id)
        if core is None or not storage.unsynced_count:
            return
        storage.sync()
        self.handle(node_id, core.persisted(self._issued[node_id], self.now))

    # ---- network and time -------------------------------------------------------------------

    def deliver(self, *, limit: int = 10_000) -> None:
        """Deliver queued messages in order (and those they cause) until none is left."""
        for _ in range(limit):
            if not self.inbox:
                return
            message = self.inbox.pop(0)
            core = self.nodes.get(message.destination)
            if (
                core is None
                or (message.source, message.destination) in self.blocked
                or self.drop(message)
            ):
                continue
            self.handle(message.destination, core.receive(message, self.now))
        raise AssertionError(f"messages still flowing after {limit} deliveries")

    def advance(self, ms: int, *, step_ms: int = 5) -> None:
        """Let `ms` of time pass in steps: tick every due node, deliver everything."""
        end = self.now + ms
        while self.now < end:
            self.now = min(end, self.now + step_ms)
            for node_id, core in list(self.nodes.items()):
                deadline = core.deadline_ms()
                if deadline is not None and deadline <= self.now:
                    self.handle(node_id, core.tick(self.now))
            self.deliver()

    def run_until(self, predicate: Callable[[], bool], *, max_ms: int = 5_000) -> None:
        start = self.now
        while not predicate():
            if self.now - start >= max_ms:
                raise AssertionError(f"condition not reached within {max_ms} ms")
            self.advance(5)

    def tick(self, node_id: int, *, after_ms: int = 0) -> None:
        """Let `after_ms` pass without anyone noticing, then tick only `node_id`, deliver."""
        self.now += after_ms
        self.handle(node_id, self.nodes[node_id].tick(self.now))
        self.deliver()

    def campaign(self, node_id: int) -> None:
        """Jump to `node_id`'s election deadline and tick only it, then deliver: it stands
        before anyone else does."""
        core = self.nodes[node_id]
        deadline = core.deadline_ms()
        assert deadline is not None
        self.now = max(self.now, deadline)
        self.handle(node_id, core.tick(self.now))
        self.deliver()

    def isolate(self, node_id: int) -> None:
        for other in self.voters:
            if other != node_id:
                self.blocked |= {(node_id, other), (other, node_id)}

    def heal(self) -> None:
        self.blocked.clear()

    # ---- looking ----------------------------------------------------------------------------

    def ready_leader(self) -> int | None:
        leaders = [node for node, core in self.nodes.items() if core.is_ready_leader]
        return leaders[0] if len(leaders) == 1 else None

    def elect(self, *, max_ms: int = 3_000) -> int:
        self.run_until(lambda: self.ready_leader() is not None, max_ms=max_ms)
        leader = self.ready_leader()
        assert leader is not None
        return leader

    def propose(self, node_id: int, *payloads: bytes) -> int:
        base, actions = self.nodes[node_id].propose(list(payloads), self.now)
        self.handle(node_id, actions)
        return base

    def actions_of(self, node_id: int, kind: type[T]) -> list[T]:
        return [action for action in self.log[node_id] if isinstance(action, kind)]

    def sent(self, node_id: int, kind: type[T]) -> list[T]:
        return [
            action.message
            for action in self.log[node_id]
            if isinstance(action, Send) and isinstance(action.message, kind)
        ]
