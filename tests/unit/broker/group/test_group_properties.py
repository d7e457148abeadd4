"""Hypothesis: any interleaving of joins, leaves (dynamic and static), fences (stale or
future epochs), heartbeats with and without acknowledgement, subscription changes, topic
growth, the passing of time (session and rebalance timeouts) and coordinator changes (the
group reloaded from its membership record, deadlines restarted).

Checked after every step: the coordinator's held sets never overlap, and what each live
client believes it owns is held for it by the coordinator, so no two live members of the
group ever own one partition. Checked whenever the group is let settle: it becomes STABLE,
every member holds exactly its target, and every partition of a subscribed topic is
assigned. The group epoch never goes back.
"""

from __future__ import annotations

import msgspec
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from broker.group.membership import (
    check_invariants,
    expire,
    heartbeat,
    restart_deadlines,
    without_deadlines,
)
from broker.group.model import (
    Group,
    GroupConfig,
    GroupState,
    HeartbeatRequest,
    HeartbeatResult,
    TopicPartition,
    group_state,
)
from broker.group.offsets import encode_group, replay_groups
from minikafka.errors import ErrorCode

CONFIG = GroupConfig(
    session_timeout_ms=10_000,
    min_session_timeout_ms=1_000,
    max_session_timeout_ms=60_000,
    heartbeat_interval_ms=1_000,
    max_size=4,
)
CLIENTS = ("c0", "c1", "c2", "c3", "c4")
STATIC = {"c0": "host-0", "c1": "host-1"}  # the other clients are dynamic members
TOPICS = frozenset({"t", "u"})
REBALANCE_TIMEOUT_MS = 3_000
JOIN_REFUSALS = {ErrorCode.GROUP_MAX_SIZE_REACHED, ErrorCode.UNRELEASED_INSTANCE_ID}
HEARTBEAT_REFUSALS = {ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID}


class Client(msgspec.Struct, kw_only=True):
    """What one consumer process believes."""

    incarnation: int = 0
    member_id: str = ""
    epoch: int = -1
    #: What it consumes: its assignment, plus what it was told to give up and has not yet
    #: finished giving up (committing, closing) before its next acknowledging heartbeat.
    owned: frozenset[TopicPartition] = frozenset()
    revoking: frozenset[TopicPartition] = frozenset()
    topics: frozenset[str] = frozenset({"t"})
    left_static: bool = False

    @property
    def joined(self) -> bool:
        return self.epoch > 0


class GroupMachine(RuleBasedStateMachine):
    @initialize(assignor=st.sampled_from(["range", "uniform"]))
    def start(self, assignor: str) -> None:
        self.config = msgspec.structs.replace(CONFIG, default_assignor=assignor)
        self.group = Group(group_id="g")
        self.now_ms = 0
        self.counts = {"t": 3, "u": 4}
        self.clients = {name: Client() for name in CLIENTS}
        self.highest_group_epoch = 0

    # ---- helpers -------------------------------------------------------------------------

    def send(self, name: str, epoch: int, **fields: object) -> HeartbeatResult:
        client = self.clients[name]
        request = HeartbeatRequest(
            member_id=client.member_id,
            member_epoch=epoch,
            instance_id=STATIC.get(name),
            rebalance_timeout_ms=REBALANCE_TIMEOUT_MS,
            **fields,  # type: ignore[arg-type]
        )
        before = self.group
        self.group, result = heartbeat(
            self.group,
            request,
            partition_counts=self.counts,
            now_ms=self.now_ms,
            config=self.config,
        )
        if result.error:
            assert self.group == before, "a refused heartbeat changed the group"
        return result

    def apply(self, name: str, result: HeartbeatResult, *, joining: bool = False) -> None:
        client = self.clients[name]
        if result.error and joining:
            assert result.error in JOIN_REFUSALS, result
            self.clients[name] = Client(incarnation=client.incarnation, topics=client.topics)
        elif result.error:
            # Fenced or forgotten: the client loses its partitions and rejoins at once with
            # its member id and epoch 0, as Kafka's consumer does.
            assert result.error in HEARTBEAT_REFUSALS, result
            client.epoch, client.owned, client.revoking = -1, frozenset(), frozenset()
            rejoin = self.send(name, 0, subscribed_topics=client.topics, owned=frozenset())
            self.apply(name, rejoin, joining=True)
        elif result.assignment is not None:
            client.epoch = result.member_epoch
            client.revoking = client.owned - result.assignment
            client.owned = client.owned | result.assignment

    def beat(self, name: str, *, acknowledge: bool, **fields: object) -> None:
        """A heartbeat; with `acknowledge` the client first finishes giving up what it
        was told to, else it reports what it still consumes."""
        client = self.clients[name]
        if acknowledge:
            client.owned, client.revoking = client.owned - client.revoking, frozenset()
        self.apply(name, self.send(name, client.epoch, owned=client.owned, **fields))

    def live(self, name: str) -> bool:
        member = self.group.members.get(self.clients[name].member_id)
        return member is not None and not member.left_temporarily and self.clients[name].joined

    def join(self, name: str) -> None:
        client = self.clients[name]
        client.incarnation += 1
        client.member_id = f"{name}-{client.incarnation}"
        client.left_static = False
        client.owned, client.revoking = frozenset(), frozenset()  # lost, as a new member
        joined = self.send(name, 0, subscribed_topics=client.topics, owned=frozenset())
        self.apply(name, joined, joining=True)

    # ---- rules ---------------------------------------------------------------------------

    @rule(name=st.sampled_from(CLIENTS), topics=st.frozensets(st.sampled_from(sorted(TOPICS))))
    def join_group(self, name: str, topics: frozenset[str]) -> None:
        if self.clients[name].joined and self.live(name):
            return
        self.clients[name].topics = topics
        self.join(name)

    @rule(name=st.sampled_from(CLIENTS), acknowledge=st.booleans())
    def heartbeat(self, name: str, acknowledge: bool) -> None:
        client = self.clients[name]
        if not client.joined:
            return
        self.beat(name, acknowledge=acknowledge)

    @rule(name=st.sampled_from(CLIENTS), delta=st.sampled_from([-2, -1, 1, 3]))
    def heartbeat_with_wrong_epoch(self, name: str, delta: int) -> None:
        client = self.clients[name]
        if not client.joined or client.epoch + delta <= 0:
            return
        member = self.group.members.get(client.member_id)
        result = self.send(name, client.epoch + delta, owned=client.owned)
        if not result.error:
            assert member is not None
            assert client.epoch + delta == member.previous_member_epoch
        self.apply(name, result)

    @rule(name=st.sampled_from(CLIENTS))
    def leave(self, name: str) -> None:
        client = self.clients[name]
        if not client.joined:
            return
        self.send(name, -1)
        self.clients[name] = Client(incarnation=client.incarnation, topics=client.topics)

    @rule(name=st.sampled_from(sorted(STATIC)))
    def leave_static(self, name: str) -> None:
        client = self.clients[name]
        if not client.joined:
            return
        self.send(name, -2)
        self.clients[name] = Client(
            incarnation=client.incarnation, topics=client.topics, left_static=True
        )

    @rule(
        name=st.sampled_from(CLIENTS),
        topics=st.frozensets(st.sampled_from(sorted(TOPICS))),
        acknowledge=st.booleans(),
    )
    def change_subscription(self, name: str, topics: frozenset[str], acknowledge: bool) -> None:
        client = self.clients[name]
        if not client.joined:
            return
        client.topics = topics
        self.beat(name, acknowledge=acknowledge, subscribed_topics=topics)

    @rule(topic=st.sampled_from(sorted(TOPICS)))
    def add_partition(self, topic: str) -> None:
        self.counts = {**self.counts, topic: self.counts[topic] + 1}

    @rule()
    def coordinator_moves(self) -> None:
        """A new coordinator loads the group as last written (every durable change is
        written before it is answered) and restarts the deadlines."""
        record = encode_group("g", without_deadlines(self.group))
        loaded = replay_groups({}, [record])["g"]
        self.group = restart_deadlines(loaded, now_ms=self.now_ms)

    @rule(elapsed_ms=st.integers(0, 12_000))
    def time_passes(self, elapsed_ms: int) -> None:
        self.now_ms += elapsed_ms
        self.group, _ = expire(self.group, now_ms=self.now_ms, config=self.config)

    @precondition(lambda self: any(c.joined or c.left_static for c in self.clients.values()))
    @rule()
    def settle(self) -> None:
        """Static members that left come back, then everybody heartbeats (acknowledging)
        without time passing until nothing changes: the group must then be stable."""
        for name, client in self.clients.items():
            if client.left_static:
                self.join(name)
        for _ in range(3 * len(CLIENTS) + 3):
            before = self.group
            for name, client in self.clients.items():
                if client.joined:
                    self.beat(name, acknowledge=True)
            if self.group == before:
                break
        else:
            raise AssertionError("the group did not settle")
        if not self.group.members:
            return
        assert group_state(self.group) is GroupState.STABLE
        for member in self.group.members.values():
            assert member.assigned == self.group.target[member.member_id]
        subscribed = {t for m in self.group.members.values() for t in m.subscribed_topics}
        everything = {TopicPartition(t, p) for t in subscribed for p in range(self.counts[t])}
        assigned = {tp for m in self.group.members.values() for tp in m.assigned}
        assert assigned == everything

    # ---- invariants ----------------------------------------------------------------------

    @invariant()
    def coordinator_records_are_consistent(self) -> None:
        if hasattr(self, "group"):
            assert check_invariants(self.group) == []

    @invariant()
    def group_epoch_never_goes_back(self) -> None:
        if hasattr(self, "group"):
            assert self.group.group_epoch >= self.highest_group_epoch
            self.highest_group_epoch = self.group.group_epoch

    @invariant()
    def live_members_never_share_a_partition(self) -> None:
        if not hasattr(self, "group"):
            return
        owner: dict[TopicPartition, str] = {}
        for name, client in self.clients.items():
            if not self.live(name):
                continue
            member = self.group.members[client.member_id]
            assert client.owned <= member.held, f"{name} owns what the coordinator gave away"
            for tp in client.owned:
                assert tp not in owner, f"{tp} owned by {owner[tp]} and {name}"
                owner[tp] = name


GroupMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestGroupMachine = GroupMachine.TestCase
