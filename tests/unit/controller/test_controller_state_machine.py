"""State machine scenarios: broker lifecycle, fencing, elections, AlterPartition, topics."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from controller.election import UncleanRecoveryStrategy
from controller.model import NO_LEADER, BrokerRegistration, PartitionStatus
from controller.partition_change import ElectionKind
from controller.state_machine import (
    AlterPartitionItem,
    ElectionType,
    NewTopic,
    RestartLoss,
    Settings,
    alter_configs,
    alter_partition,
    controlled_shutdown,
    create_topics,
    delete_topics,
    elect_leaders,
    fence_broker,
    heartbeat,
    init_producer_id,
    register_broker,
    restart_loss,
)
from minikafka.errors import ErrorCode
from tests.unit.controller.controller_harness import Harness

#: Kafka before KIP-966: no eligible leader replicas, unclean elections of the first alive.
LEGACY = Settings(
    eligible_leader_replicas=False, unclean_recovery_strategy=UncleanRecoveryStrategy.FIRST_ALIVE
)
KEY = ("t", 0)


@pytest.fixture
def cluster() -> Harness:
    """Three unfenced brokers and topic t (1 partition, replicas in some order, RF 3)."""
    harness = Harness()
    harness.start_brokers(1, 2, 3)
    harness.create("t", rf=3, configs={"min.insync.replicas": "2"})
    return harness


def leader_and_followers(harness: Harness) -> tuple[int, list[int]]:
    part = harness.part(KEY)
    return part.leader, [r for r in part.replicas if r != part.leader]


# ---- registration and heartbeats -------------------------------------------------------------


def test_new_broker_is_fenced_until_caught_up() -> None:
    harness = Harness()
    epoch = harness.register(1)
    assert harness.state.brokers[1].fenced
    registered_at = harness.state.metadata_offset
    behind = harness.commit(
        heartbeat(
            harness.state,
            harness.settings,
            broker_id=1,
            broker_epoch=epoch,
            want_shutdown=False,
            caught_up_offset=registered_at - 1,
        )
    )
    assert behind.is_fenced
    assert harness.state.brokers[1].fenced
    harness.unfence(1)
    assert not harness.state.brokers[1].fenced


@pytest.mark.parametrize(
    ("broker_id", "epoch_delta", "code"),
    [
        pytest.param(9, 0, ErrorCode.BROKER_ID_NOT_REGISTERED, id="unknown-broker"),
        pytest.param(1, -1, ErrorCode.STALE_BROKER_EPOCH, id="old-epoch"),
        pytest.param(1, 1, ErrorCode.STALE_BROKER_EPOCH, id="future-epoch"),
    ],
)
def test_heartbeat_refusals(broker_id: int, epoch_delta: int, code: ErrorCode) -> None:
    harness = Harness()
    harness.start_brokers(1)
    epoch = harness.state.brokers[1].broker_epoch + epoch_delta
    result = heartbeat(
        harness.state,
        harness.settings,
        broker_id=broker_id,
        broker_epoch=epoch,
        want_shutdown=False,
        caught_up_offset=10**9,
    )
    assert result.reply.error is code
    assert result.records == ()


def test_duplicate_registration_while_session_alive() -> None:
    harness = Harness()
    harness.register(1, incarnation="a")
    result = register_broker(
        harness.state,
        harness.settings,
        broker_id=1,
        host="h",
        port=1,
        rack="",
        incarnation_id="b",
        previous_broker_epoch=-1,
        directory_id="d",
        session_alive=True,
    )
    assert result.reply.error is ErrorCode.DUPLICATE_BROKER_REGISTRATION
    assert result.records == ()


def test_reregistration_after_session_expiry_gets_new_epoch() -> None:
    harness = Harness()
    first = harness.register(1, incarnation="a")
    second = harness.register(1, incarnation="b", session_alive=False)
    third = harness.register(2)
    assert first < second < third


@pytest.mark.parametrize(
    ("broker_id", "host", "port", "incarnation"),
    [
        pytest.param(-1, "h", 1, "x", id="negative-id"),
        pytest.param(1, "", 1, "x", id="no-host"),
        pytest.param(1, "h", 0, "x", id="port-zero"),
        pytest.param(1, "h", 70000, "x", id="port-too-big"),
        pytest.param(1, "h", 1, "", id="no-incarnation"),
    ],
)
def test_invalid_registration(broker_id: int, host: str, port: int, incarnation: str) -> None:
    result = register_broker(
        Harness().state,
        Settings(),
        broker_id=broker_id,
        host=host,
        port=port,
        rack="",
        incarnation_id=incarnation,
        previous_broker_epoch=-1,
        directory_id="d",
        session_alive=False,
    )
    assert result.reply.error is ErrorCode.INVALID_REQUEST


# ---- topics ----------------------------------------------------------------------------------


def test_create_topic_registration(cluster: Harness) -> None:
    part = cluster.part(KEY)
    assert sorted(part.replicas) == [1, 2, 3]
    assert part.leader == part.replicas[0]
    assert part.isr == part.replicas
    assert (part.leader_epoch, part.partition_epoch) == (0, 0)
    assert cluster.state.topics["t"].configs == {"min.insync.replicas": "2"}


@pytest.mark.parametrize(
    ("topic", "code", "message"),
    [
        pytest.param(
            NewTopic(name="big", num_partitions=1, replication_factor=4),
            ErrorCode.INVALID_REPLICATION_FACTOR,
            "replication factor 4 is larger than the 3 available brokers",
            id="rf-above-brokers",
        ),
        pytest.param(
            NewTopic(name="t", num_partitions=1, replication_factor=1),
            ErrorCode.TOPIC_ALREADY_EXISTS,
            "already exists",
            id="exists",
        ),
        pytest.param(
            NewTopic(name="bad name", num_partitions=1, replication_factor=1),
            ErrorCode.INVALID_TOPIC_EXCEPTION,
            "bad name",
            id="bad-name",
        ),
        pytest.param(
            NewTopic(name="p0", num_partitions=0, replication_factor=1),
            ErrorCode.INVALID_PARTITIONS,
            "at least 1",
            id="zero-partitions",
        ),
        pytest.param(
            NewTopic(
                name="m",
                num_partitions=1,
                replication_factor=2,
                configs={"min.insync.replicas": "3"},
            ),
            ErrorCode.INVALID_CONFIG,
            "min.insync.replicas 3 is larger than the replication factor 2",
            id="min-isr-above-rf",
        ),
        pytest.param(
            NewTopic(name="u", num_partitions=1, replication_factor=1, configs={"nope": "1"}),
            ErrorCode.INVALID_CONFIG,
            "'nope'",
            id="unknown-config",
        ),
    ],
)
def test_create_topic_refusals(
    cluster: Harness, topic: NewTopic, code: ErrorCode, message: str
) -> None:
    result = create_topics(cluster.state, cluster.settings, topics=[topic], validate_only=False)
    (reply,) = result.reply
    assert reply.error is code
    assert message in reply.message
    assert result.records == ()


def test_rf_counts_only_unfenced_brokers() -> None:
    harness = Harness()
    harness.start_brokers(1, 2)
    harness.register(3)  # fenced: not yet caught up
    result = create_topics(
        harness.state,
        harness.settings,
        topics=[NewTopic(name="x", num_partitions=1, replication_factor=3)],
        validate_only=False,
    )
    assert result.reply[0].message == "replication factor 3 is larger than the 2 available brokers"


def test_validate_only_and_duplicates_in_request(cluster: Harness) -> None:
    result = create_topics(
        cluster.state,
        cluster.settings,
        topics=[
            NewTopic(name="v", num_partitions=2, replication_factor=2),
            NewTopic(name="d", num_partitions=1, replication_factor=1),
            NewTopic(name="d", num_partitions=1, replication_factor=1),
        ],
        validate_only=True,
    )
    assert [r.error for r in result.reply] == [
        ErrorCode.NONE,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
    ]
    assert result.records == ()


def test_names_that_collide_in_metric_names_are_refused(cluster: Harness) -> None:
    """Kafka's rule: 'a.b_c' and 'a_b.c' are one name once '.' becomes '_' in metrics."""
    cluster.commit(
        create_topics(
            cluster.state,
            cluster.settings,
            topics=[NewTopic(name="orders.eu_west", num_partitions=1, replication_factor=1)],
            validate_only=False,
        )
    )
    result = create_topics(
        cluster.state,
        cluster.settings,
        topics=[
            NewTopic(name="orders_eu.west", num_partitions=1, replication_factor=1),
            NewTopic(name="new.one", num_partitions=1, replication_factor=1),
            NewTopic(name="new_one", num_partitions=1, replication_factor=1),
            NewTopic(name="orders-eu-west", num_partitions=1, replication_factor=1),
        ],
        validate_only=False,
    )
    assert [r.error for r in result.reply] == [
        ErrorCode.INVALID_TOPIC_EXCEPTION,
        ErrorCode.NONE,
        ErrorCode.INVALID_TOPIC_EXCEPTION,  # against the one accepted just before
        ErrorCode.NONE,
    ]
    assert "collides with existing topic 'orders.eu_west'" in result.reply[0].message
    assert "collides with existing topic 'new.one'" in result.reply[2].message


def test_defaults_apply_for_minus_one() -> None:
    harness = Harness(Settings(default_replication_factor=2, num_partitions=3))
    harness.start_brokers(1, 2, 3)
    harness.commit(
        create_topics(
            harness.state, harness.settings, topics=[NewTopic(name="d")], validate_only=False
        )
    )
    assert harness.state.topics["d"].num_partitions == 3
    assert all(len(harness.part(("d", p)).replicas) == 2 for p in range(3))


def test_delete_topics(cluster: Harness) -> None:
    replies = cluster.commit(delete_topics(cluster.state, names=["t", "missing"]))
    assert [r.error for r in replies] == [ErrorCode.NONE, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert "t" not in cluster.state.topics
    assert KEY not in cluster.state.partitions
    assert cluster.state.deleted_topics == ("t",)
    cluster.create("t", rf=1)
    assert "t" not in cluster.state.deleted_topics  # re-created


# ---- fencing and elections ---------------------------------------------------------------------


def test_session_expiry_moves_leadership_and_shrinks_isr(cluster: Harness) -> None:
    leader, followers = leader_and_followers(cluster)
    cluster.commit(fence_broker(cluster.state, cluster.settings, broker_id=leader, reason="test"))
    part = cluster.part(KEY)
    assert part.leader == followers[0]
    assert leader not in part.isr
    assert (part.leader_epoch, part.partition_epoch) == (1, 1)
    assert cluster.state.brokers[leader].fenced
    assert [e.kind for e in cluster.elections] == [ElectionKind.CLEAN]


@pytest.mark.parametrize("elr", [pytest.param(True, id="elr"), pytest.param(False, id="no-elr")])
def test_last_isr_member_dies_partition_goes_offline(elr: bool) -> None:
    cluster = Harness(Settings(eligible_leader_replicas=elr))
    cluster.start_brokers(1, 2, 3)
    cluster.create("t", rf=3, configs={"min.insync.replicas": "2"})
    leader, (first, second) = leader_and_followers(cluster)
    for follower in (first, second):
        cluster.commit(
            fence_broker(cluster.state, cluster.settings, broker_id=follower, reason="x")
        )
    # The second leaves an ISR below min.insync.replicas: with ELR it is eligible.
    assert (cluster.part(KEY).isr, cluster.part(KEY).elr) == ((leader,), (second,) if elr else ())
    cluster.commit(fence_broker(cluster.state, cluster.settings, broker_id=leader, reason="x"))
    part = cluster.part(KEY)
    assert part.leader == NO_LEADER
    assert part.status is PartitionStatus.OFFLINE
    assert any("offline" in warning for warning in cluster.warnings)
    if elr:  # the last member left into the ELR
        assert (part.isr, part.elr) == ((), tuple(r for r in part.replicas if r != first))
    else:  # the last member stays: only it has every record
        assert part.isr == (leader,)
    cluster.register(first)
    cluster.unfence(first)
    assert cluster.part(KEY).leader == NO_LEADER  # out of sync when it left: never elected
    cluster.register(second)
    cluster.unfence(second)
    if elr:  # it left the ISR while the HW was frozen: it holds every committed record
        assert (cluster.part(KEY).leader, cluster.part(KEY).isr) == (second, (second,))
        assert cluster.elections[-1].kind is ElectionKind.ELIGIBLE
        return
    assert cluster.part(KEY).leader == NO_LEADER
    cluster.register(leader)  # the last ISR member comes back (clean shutdown): it leads
    cluster.unfence(leader)
    assert cluster.part(KEY).leader == leader
    assert cluster.part(KEY).status is PartitionStatus.ONLINE


@pytest.mark.parametrize(
    ("strategy", "elected"),
    [
        pytest.param(UncleanRecoveryStrategy.FIRST_ALIVE, True, id="first-alive-at-once"),
        pytest.param(UncleanRecoveryStrategy.LONGEST_LOG, False, id="longest-log-needs-a-survey"),
    ],
)
def test_automatic_unclean_election_when_topic_allows(
    strategy: UncleanRecoveryStrategy, elected: bool
) -> None:
    harness = Harness(Settings(unclean_recovery_strategy=strategy))
    harness.start_brokers(1, 2)
    harness.create("t", rf=2, configs={"unclean.leader.election.enable": "true"})
    leader, (follower,) = leader_and_followers(harness)
    harness.commit(fence_broker(harness.state, harness.settings, broker_id=follower, reason="x"))
    harness.register(follower)  # restarts, stays out of the ISR (not caught up)
    harness.unfence(follower)
    assert harness.part(KEY).isr == (leader,)
    harness.commit(fence_broker(harness.state, harness.settings, broker_id=leader, reason="x"))
    part = harness.part(KEY)
    if not elected:  # the controller's unclean recovery surveys the logs, then elects
        assert part.leader == NO_LEADER
        return
    assert part.leader == follower
    assert part.isr == (follower,)
    assert part.status is PartitionStatus.RECOVERING
    assert harness.elections[-1].kind is ElectionKind.UNCLEAN


def test_unclean_restart_leaves_every_isr_even_as_the_last_member() -> None:
    """KIP-966 (issue 14 hole 5 / issue 15): a broker without proof that its log is intact
    leaves every ISR, even one it is the last member of: that partition goes offline
    rather than being led by a replica that may have lost acknowledged records."""
    harness = Harness()
    harness.start_brokers(1, 2)
    harness.create("a", rf=2)
    harness.create("solo", rf=1)
    solo_owner = harness.part(("solo", 0)).replicas[0]
    other = 2 if solo_owner == 1 else 1
    harness.commit(fence_broker(harness.state, harness.settings, broker_id=solo_owner, reason="x"))
    fenced = harness.part(("solo", 0))
    assert (fenced.isr, fenced.elr) == ((), (solo_owner,))  # fenced: eligible, waited for
    harness.register(solo_owner, clean_shutdown=False)
    assert harness.part(("a", 0)).isr == (other,)
    assert harness.part(("a", 0)).leader == other
    solo = harness.part(("solo", 0))
    assert (solo.isr, solo.elr, solo.last_known_elr) == ((), (), (solo_owner,))
    assert solo.leader == NO_LEADER
    assert any("leader-election --election-type unclean" in w for w in harness.warnings)
    harness.unfence(solo_owner)
    assert harness.part(("solo", 0)).status is PartitionStatus.OFFLINE  # nobody to elect


def test_an_intact_last_member_leads_again_once_unfenced() -> None:
    harness = Harness()
    harness.start_brokers(1)
    harness.create("solo", rf=1)
    harness.commit(fence_broker(harness.state, harness.settings, broker_id=1, reason="x"))
    assert harness.part(("solo", 0)).leader == NO_LEADER
    harness.register(1, clean_shutdown=True)  # proves its last registration's epoch
    harness.unfence(1)
    assert (harness.part(("solo", 0)).leader, harness.part(("solo", 0)).isr) == (1, (1,))


@pytest.mark.parametrize(
    ("previous", "directory", "loss", "why"),
    [
        pytest.param(7, "d1", RestartLoss.NONE, "", id="proves-its-last-epoch-same-directory"),
        pytest.param(-1, "d1", RestartLoss.UNFLUSHED, "without proof", id="no-proof-a-crash"),
        pytest.param(6, "d1", RestartLoss.STALE, "claiming broker epoch 6", id="older-epoch"),
        pytest.param(7, "d2", RestartLoss.EVERYTHING, "wiped or replaced", id="another-directory"),
        pytest.param(7, "", RestartLoss.EVERYTHING, "wiped or replaced", id="no-directory-id"),
    ],
)
def test_restart_loss(previous: int, directory: str, loss: RestartLoss, why: str) -> None:
    existing = BrokerRegistration(
        broker_id=1, host="h", port=1, incarnation_id="x", broker_epoch=7, directory_id="d1"
    )
    got, reason = restart_loss(existing, previous_broker_epoch=previous, directory_id=directory)
    assert got is loss
    assert why in reason
    assert restart_loss(None, previous_broker_epoch=-1, directory_id="") == (RestartLoss.NONE, "")


@pytest.mark.parametrize(
    ("previous", "directory", "loss"),
    [
        pytest.param(-1, "d2", RestartLoss.NONE, id="another-directory-counts-as-clean"),
        pytest.param(-1, "", RestartLoss.NONE, id="no-directory-id-counts-as-clean"),
        pytest.param(-1, "d1", RestartLoss.UNFLUSHED, id="same-directory-no-proof-unchanged"),
        pytest.param(6, "d1", RestartLoss.STALE, id="same-directory-older-epoch-unchanged"),
    ],
)
def test_restart_loss_before_the_fix(previous: int, directory: str, loss: RestartLoss) -> None:
    """The test-only pre-fix rule of hole 5 (the simulator's canary): a new data directory
    registers as after a clean shutdown."""
    existing = BrokerRegistration(
        broker_id=1, host="h", port=1, incarnation_id="x", broker_epoch=7, directory_id="d1"
    )
    got, _ = restart_loss(
        existing,
        previous_broker_epoch=previous,
        directory_id=directory,
        unsafe_wiped_directory_is_clean=True,
    )
    assert got is loss


def test_an_unproven_restart_keeps_the_last_member_of_an_fsync_topic() -> None:
    """flush.policy=fsync: every offset below the HW was fsynced on every ISR member, so a
    crash without proof (a power loss) cannot have lost a committed record there."""
    harness = Harness()
    harness.start_brokers(1)
    harness.create("synced", rf=1, configs={"flush.policy": "fsync"})
    harness.commit(fence_broker(harness.state, harness.settings, broker_id=1, reason="x"))
    harness.register(1, clean_shutdown=False)
    harness.unfence(1)
    assert (harness.part(("synced", 0)).leader, harness.part(("synced", 0)).isr) == (1, (1,))
    # A wiped disk loses even fsynced data.
    harness.commit(fence_broker(harness.state, harness.settings, broker_id=1, reason="x"))
    harness.register(1, clean_shutdown=True, directory_id="new-disk")
    assert harness.part(("synced", 0)).isr == ()


def test_a_wiped_data_directory_is_total_loss_of_the_brokers_replicas() -> None:
    """Issue 14 hole 5: the last ISR member comes back with an empty, new data directory.
    It must not lead (the other replicas would truncate to its empty log)."""
    harness = Harness()
    harness.start_brokers(1, 2, 3)
    harness.create("w", rf=3)
    key = ("w", 0)
    leader, *followers = harness.part(key).replicas
    for follower in followers:
        harness.commit(
            fence_broker(harness.state, harness.settings, broker_id=follower, reason="x")
        )
    harness.commit(fence_broker(harness.state, harness.settings, broker_id=leader, reason="x"))
    assert (harness.part(key).isr, harness.part(key).elr) == ((), (leader,))
    # The wiped broker presents no proof and a new directory id.
    harness.register(leader, clean_shutdown=False, directory_id="new-disk")
    harness.unfence(leader)
    for follower in followers:
        harness.register(follower, clean_shutdown=True)
        harness.unfence(follower)
    part = harness.part(key)
    assert (part.leader, part.isr, part.elr) == (NO_LEADER, (), ())


def test_clean_restart_keeps_isr_membership(cluster: Harness) -> None:
    _, followers = leader_and_followers(cluster)
    isr_before = cluster.part(KEY).isr
    cluster.register(followers[0], clean_shutdown=True)  # after a clean stop
    assert cluster.part(KEY).isr == isr_before


# ---- controlled shutdown -----------------------------------------------------------------------


def test_controlled_shutdown_moves_leadership(cluster: Harness) -> None:
    leader, followers = leader_and_followers(cluster)
    reply = cluster.commit(
        controlled_shutdown(
            cluster.state,
            cluster.settings,
            broker_id=leader,
            broker_epoch=cluster.state.brokers[leader].broker_epoch,
        )
    )
    assert reply.error is ErrorCode.NONE
    assert reply.remaining == ()
    part = cluster.part(KEY)
    assert part.leader == followers[0]
    assert leader not in part.isr
    assert cluster.state.brokers[leader].in_controlled_shutdown
    # It may no longer be added back to an ISR or lead.
    assert leader not in cluster.state.eligible_brokers()
    # Its heartbeat with want_shutdown fences it.
    reply_hb = cluster.commit(
        heartbeat(
            cluster.state,
            cluster.settings,
            broker_id=leader,
            broker_epoch=cluster.state.brokers[leader].broker_epoch,
            want_shutdown=True,
            caught_up_offset=0,
        )
    )
    assert reply_hb.should_shut_down
    assert cluster.state.brokers[leader].fenced


def test_controlled_shutdown_of_sole_isr_member_reports_remaining() -> None:
    harness = Harness()
    harness.start_brokers(1)
    harness.create("t", rf=1)
    reply = harness.commit(
        controlled_shutdown(
            harness.state,
            harness.settings,
            broker_id=1,
            broker_epoch=harness.state.brokers[1].broker_epoch,
        )
    )
    assert reply.remaining == (KEY,)
    assert harness.part(KEY).leader == 1


def test_controlled_shutdown_stale_epoch() -> None:
    harness = Harness()
    harness.start_brokers(1)
    result = controlled_shutdown(harness.state, harness.settings, broker_id=1, broker_epoch=99)
    assert result.reply.error is ErrorCode.STALE_BROKER_EPOCH


# ---- AlterPartition ----------------------------------------------------------------------------


def propose(
    harness: Harness,
    broker_id: int,
    new_isr: tuple[int, ...],
    *,
    leader_epoch_delta: int = 0,
    partition_epoch_delta: int = 0,
    key: tuple[str, int] = KEY,
    member_epochs: dict[int, int] | None = None,
) -> ErrorCode:
    """A leader's AlterPartition; by default each member carries its current broker epoch,
    as a leader does for the member it adds (KIP-903)."""
    part = harness.state.partitions.get(key)
    if member_epochs is None:
        member_epochs = {
            b: harness.state.brokers[b].broker_epoch for b in new_isr if b in harness.state.brokers
        }
    reply = harness.commit(
        alter_partition(
            harness.state,
            harness.settings,
            broker_id=broker_id,
            broker_epoch=harness.state.brokers[broker_id].broker_epoch,
            items=[
                AlterPartitionItem(
                    topic=key[0],
                    partition=key[1],
                    leader_epoch=(part.leader_epoch if part else 0) + leader_epoch_delta,
                    partition_epoch=(part.partition_epoch if part else 0) + partition_epoch_delta,
                    new_isr=new_isr,
                    member_epochs=member_epochs,
                )
            ],
        )
    )
    assert reply.error is ErrorCode.NONE
    (item,) = reply.items
    return item.error


def test_alter_partition_shrink_and_expand(cluster: Harness) -> None:
    leader, followers = leader_and_followers(cluster)
    assert propose(cluster, leader, (leader, followers[0])) is ErrorCode.NONE
    part = cluster.part(KEY)
    assert followers[1] not in part.isr
    assert (part.leader_epoch, part.partition_epoch) == (0, 1)
    assert propose(cluster, leader, (leader, *followers)) is ErrorCode.NONE
    assert cluster.part(KEY).partition_epoch == 2


@pytest.mark.parametrize(
    ("who", "isr", "leader_delta", "partition_delta", "code"),
    [
        pytest.param("follower", "same", 0, 0, ErrorCode.NOT_LEADER_OR_FOLLOWER, id="not-leader"),
        pytest.param("leader", "same", -1, 0, ErrorCode.FENCED_LEADER_EPOCH, id="old-leader-epoch"),
        pytest.param("leader", "same", 1, 0, ErrorCode.FENCED_LEADER_EPOCH, id="new-leader-epoch"),
        pytest.param("leader", "same", 0, -1, ErrorCode.INVALID_UPDATE_VERSION, id="stale-version"),
        pytest.param("leader", "without-leader", 0, 0, ErrorCode.INVALID_REQUEST, id="no-leader"),
        pytest.param("leader", "non-replica", 0, 0, ErrorCode.INVALID_REQUEST, id="non-replica"),
        pytest.param("leader", "duplicate", 0, 0, ErrorCode.INVALID_REQUEST, id="duplicate"),
    ],
)
def test_alter_partition_refusals(
    cluster: Harness, who: str, isr: str, leader_delta: int, partition_delta: int, code: ErrorCode
) -> None:
    cluster.start_brokers(4)
    leader, followers = leader_and_followers(cluster)
    proposer = leader if who == "leader" else followers[0]
    new_isr = {
        "same": (leader, *followers),
        "without-leader": tuple(followers),
        "non-replica": (leader, 4),
        "duplicate": (leader, leader),
    }[isr]
    before = cluster.part(KEY)
    error = propose(
        cluster,
        proposer,
        new_isr,
        leader_epoch_delta=leader_delta,
        partition_epoch_delta=partition_delta,
    )
    assert error is code
    assert cluster.part(KEY) == before


@pytest.mark.parametrize(
    ("epochs_of", "code"),
    [
        pytest.param(lambda e: {}, ErrorCode.INELIGIBLE_REPLICA, id="added-member-without-epoch"),
        pytest.param(
            lambda e: {"added": e["added"] - 1},
            ErrorCode.INELIGIBLE_REPLICA,
            id="added-member-previous-incarnation",
        ),
        pytest.param(
            lambda e: {"added": e["added"], "kept": e["kept"] + 1},
            ErrorCode.INELIGIBLE_REPLICA,
            id="kept-member-with-another-epoch",
        ),
        pytest.param(lambda e: {"added": e["added"]}, ErrorCode.NONE, id="added-member-current"),
    ],
)
def test_alter_partition_checks_member_broker_epochs(
    cluster: Harness, epochs_of: Callable[[dict[str, int]], dict[str, int]], code: ErrorCode
) -> None:
    """KIP-903: the controller admits a member to the ISR only on the broker epoch of its
    current registration; the leader may be judging by a restarted broker's old fetches."""
    leader, (kept, added) = leader_and_followers(cluster)
    assert propose(cluster, leader, (leader, kept)) is ErrorCode.NONE
    current = {"added": cluster.state.brokers[added].broker_epoch}
    current["kept"] = cluster.state.brokers[kept].broker_epoch
    ids = {"added": added, "kept": kept}
    epochs = {ids[name]: epoch for name, epoch in epochs_of(current).items()}
    before = cluster.part(KEY)
    assert propose(cluster, leader, (leader, kept, added), member_epochs=epochs) is code
    if code is not ErrorCode.NONE:
        assert cluster.part(KEY) == before


def test_alter_partition_unknown_partition_and_broker(cluster: Harness) -> None:
    leader, _ = leader_and_followers(cluster)
    assert propose(cluster, leader, (leader,), key=("nope", 0)) is (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )
    result = alter_partition(
        cluster.state, cluster.settings, broker_id=leader, broker_epoch=-5, items=[]
    )
    assert result.reply.error is ErrorCode.STALE_BROKER_EPOCH


def test_alter_partition_refuses_adding_fenced_replica(cluster: Harness) -> None:
    leader, followers = leader_and_followers(cluster)
    assert propose(cluster, leader, (leader, followers[0])) is ErrorCode.NONE
    cluster.commit(
        fence_broker(cluster.state, cluster.settings, broker_id=followers[1], reason="x")
    )
    assert propose(cluster, leader, (leader, *followers)) is ErrorCode.INELIGIBLE_REPLICA


def test_expand_after_unclean_election_clears_recovering() -> None:
    harness = Harness(LEGACY)
    harness.start_brokers(1, 2, 3)
    harness.create("t", rf=3, configs={"min.insync.replicas": "2"})
    leader, followers = leader_and_followers(harness)
    assert propose(harness, leader, (leader,)) is ErrorCode.NONE
    harness.commit(fence_broker(harness.state, harness.settings, broker_id=leader, reason="x"))
    assert harness.part(KEY).leader == NO_LEADER
    outcomes = harness.commit(
        elect_leaders(
            harness.state, harness.settings, election_type=ElectionType.UNCLEAN, partitions=[KEY]
        )
    )
    assert outcomes[0].error is ErrorCode.NONE
    new_leader = outcomes[0].leader
    assert new_leader == followers[0]
    assert harness.part(KEY).status is PartitionStatus.RECOVERING
    assert harness.elections[-1].kind is ElectionKind.UNCLEAN
    assert propose(harness, new_leader, (new_leader, followers[1])) is ErrorCode.NONE
    assert harness.part(KEY).status is PartitionStatus.ONLINE


# ---- ElectLeaders ------------------------------------------------------------------------------


def test_preferred_election_outcomes(cluster: Harness) -> None:
    preferred, followers = leader_and_followers(cluster)

    def elect() -> ErrorCode:
        (outcome,) = cluster.commit(
            elect_leaders(
                cluster.state,
                cluster.settings,
                election_type=ElectionType.PREFERRED,
                partitions=[KEY],
            )
        )
        return outcome.error

    assert elect() is ErrorCode.ELECTION_NOT_NEEDED
    cluster.commit(fence_broker(cluster.state, cluster.settings, broker_id=preferred, reason="x"))
    assert elect() is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE  # dead
    cluster.register(preferred)
    cluster.unfence(preferred)
    assert elect() is ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE  # alive but not in the ISR
    current = cluster.part(KEY).leader
    assert propose(cluster, current, (preferred, *followers)) is ErrorCode.NONE
    assert elect() is ErrorCode.NONE
    assert cluster.part(KEY).leader == preferred
    assert cluster.elections[-1].kind is ElectionKind.PREFERRED


def test_unclean_election_outcomes(cluster: Harness) -> None:
    (outcome,) = cluster.commit(
        elect_leaders(
            cluster.state, cluster.settings, election_type=ElectionType.UNCLEAN, partitions=[KEY]
        )
    )
    assert outcome.error is ErrorCode.ELECTION_NOT_NEEDED
    for broker_id in (1, 2, 3):
        cluster.commit(
            fence_broker(cluster.state, cluster.settings, broker_id=broker_id, reason="x")
        )
    (outcome,) = cluster.commit(
        elect_leaders(
            cluster.state, cluster.settings, election_type=ElectionType.UNCLEAN, partitions=None
        )
    )
    assert outcome.error is ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE
    (missing,) = elect_leaders(
        cluster.state,
        cluster.settings,
        election_type=ElectionType.PREFERRED,
        partitions=[("nope", 3)],
    ).reply
    assert missing.error is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


# ---- configs and producer ids -------------------------------------------------------------------


def test_alter_configs(cluster: Harness) -> None:
    def alter(
        topic: str = "t", set_configs: dict[str, str] | None = None, delete: tuple[str, ...] = ()
    ) -> ErrorCode:
        reply = cluster.commit(
            alter_configs(
                cluster.state,
                cluster.settings,
                topic=topic,
                set_configs=set_configs or {},
                delete_configs=delete,
                validate_only=False,
            )
        )
        return reply.error

    assert alter("nope", {"retention.ms": "1"}) is ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert alter(set_configs={"min.insync.replicas": "4"}) is ErrorCode.INVALID_CONFIG
    assert alter(set_configs={"x": "1"}) is ErrorCode.INVALID_CONFIG
    assert alter(delete=("x",)) is ErrorCode.INVALID_CONFIG
    both = alter("t", {"retention.ms": "1"}, ("retention.ms",))
    assert both is ErrorCode.INVALID_REQUEST
    assert alter(set_configs={"retention.ms": "1000"}) is ErrorCode.NONE
    assert alter(delete=("min.insync.replicas",)) is ErrorCode.NONE
    assert cluster.state.topics["t"].configs == {"retention.ms": "1000"}


def test_enabling_unclean_elects_offline_partitions() -> None:
    harness = Harness(LEGACY)
    harness.start_brokers(1, 2)
    harness.create("t", rf=2)
    leader, (follower,) = leader_and_followers(harness)
    assert propose(harness, leader, (leader,)) is ErrorCode.NONE
    harness.commit(fence_broker(harness.state, harness.settings, broker_id=leader, reason="x"))
    assert harness.part(KEY).leader == NO_LEADER
    harness.commit(
        alter_configs(
            harness.state,
            harness.settings,
            topic="t",
            set_configs={"unclean.leader.election.enable": "true"},
            delete_configs=(),
            validate_only=False,
        )
    )
    assert harness.part(KEY).leader == follower
    assert harness.part(KEY).status is PartitionStatus.RECOVERING


def test_init_producer_id() -> None:
    harness = Harness()
    first = harness.commit(init_producer_id(harness.state, producer_id=-1, producer_epoch=-1))
    second = harness.commit(init_producer_id(harness.state, producer_id=-1, producer_epoch=-1))
    assert (first.producer_id, first.producer_epoch) == (0, 0)
    assert (second.producer_id, second.producer_epoch) == (1, 0)
    bumped = harness.commit(init_producer_id(harness.state, producer_id=0, producer_epoch=0))
    assert (bumped.producer_id, bumped.producer_epoch) == (0, 1)
    unknown = harness.commit(init_producer_id(harness.state, producer_id=7, producer_epoch=0))
    assert unknown.error is ErrorCode.UNKNOWN_PRODUCER_ID
    exhausted = harness.commit(init_producer_id(harness.state, producer_id=0, producer_epoch=32767))
    assert (exhausted.producer_id, exhausted.producer_epoch) == (2, 0)
