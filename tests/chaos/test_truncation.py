"""Log truncation and fencing: R13-R15, R17-R19 (KIP-101, KIP-279, KAFKA-6880, stale
control messages and stale producers), R23 (power loss of one broker), R24 (every
broker crashes, or loses power, at once) and R25 (segment corruption on a minority)."""

from __future__ import annotations

import pytest

from minikafka.errors import ErrorCode
from minikafka.record_batch import build_batch
from minikafka.v1 import broker_pb2, broker_pb2_grpc, controller_pb2
from tests.chaos.checker import UNCLEAN_EXPECTED
from tests.chaos.harness import Run, seeds
from tests.support.cluster import wait_until

pytestmark = pytest.mark.chaos

TOPIC = "t"


def more_acks(run: Run, count: int = 20) -> None:
    w = run.workloads[0]
    w.wait_acked(w.acked + count, timeout_s=45)


def start(
    run: Run,
    *,
    partitions: int = 1,
    rf: int = 3,
    min_isr: str = "2",
    configs: dict[str, str] | None = None,
    lazy_fs: bool = False,
) -> None:
    run.start_cluster(lazy_fs=lazy_fs)
    tps = run.topic(
        TOPIC,
        partitions=partitions,
        rf=rf,
        configs={"min_insync_replicas": min_isr, **(configs or {})},
    )
    assert run.cluster is not None
    run.cluster.wait_full_isr(TOPIC, partitions)
    run.workload(tps, producers=2, consumers=1).start().wait_acked(20)


def elect_preferred(run: Run) -> None:
    """Preferred election, retried until the preferred replica is back in the ISR."""
    assert run.cluster is not None
    cluster = run.cluster
    wait_until(
        lambda: (
            cluster.elect(TOPIC, 0, "preferred") in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED)
        ),
        timeout_s=30,
        what="a successful preferred election",
    )


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds())
def test_r13_follower_restart_then_immediate_leader_loss(run: Run, seed: int) -> None:
    """KIP-101 scenario 1 (RF=2): restart the follower, kill the leader the moment the
    follower is back; the follower must not have truncated acknowledged records to a
    stale HW."""
    start(run, rf=2, min_isr="1")
    cluster = run.cluster
    assert cluster is not None
    for _ in range(3):
        leader, _, _ = cluster.leader_of(TOPIC, 0)
        (follower,) = [b for b in cluster.replicas_of(TOPIC, 0) if b != leader]
        cluster.kill(follower)
        cluster.start_broker(follower)
        cluster.kill(leader)
        cluster.start_broker(leader)
        cluster.wait_full_isr(TOPIC, 1)
        more_acks(run, 10)
    run.converge_and_check(TOPIC, 1)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds())
def test_r14_both_replicas_crash_leader_tail_lost_restart_in_opposite_order(
    run: Run, seed: int
) -> None:
    """KIP-101 scenario 2: kill -9 both replicas, cut the leader's tail (unflushed data),
    restart the follower first; the logs must converge without divergence.

    The leader goes first and the follower only once it leads: the follower is then the
    last in-sync (eligible) replica and, restarted on the same machine, proves its log
    intact and leads again. (Killed the other way round, the follower left the ISR while
    the leader still acknowledged writes alone at min.insync.replicas=1, and the leader,
    whose tail is cut, cannot prove it kept them: with ELR the partition then rightly
    stays offline until an unclean election, which is R22/R46's subject, not this one's.
    Killing both at once let the fencing order pick one of the two at random.)"""
    start(run, rf=2, min_isr="1")
    cluster = run.cluster
    assert cluster is not None
    leader, _, _ = cluster.leader_of(TOPIC, 0)
    (follower,) = [b for b in cluster.replicas_of(TOPIC, 0) if b != leader]
    more_acks(run, 20)
    cluster.kill(leader)
    assert cluster.wait_leader(TOPIC, 0, not_in=(leader,), timeout_s=20) == follower
    cluster.kill(follower)
    cluster.truncate_tail(leader, TOPIC, 0, rng=run.rng)
    cluster.start_broker(follower)
    cluster.start_broker(leader)
    cluster.wait_full_isr(TOPIC, 1, timeout_s=60)
    more_acks(run, 20)
    run.converge_and_check(TOPIC, 1)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds())
def test_r15_fast_double_failover_a_b_a(run: Run, seed: int) -> None:
    """KIP-279: leadership A -> B -> A in quick succession while the third replica is
    paused (it misses both epochs); every replica converges to the same log."""
    start(run)
    cluster = run.cluster
    assert cluster is not None
    for _ in range(3):
        a, epoch, _ = cluster.leader_of(TOPIC, 0)
        c = next(x for x in cluster.replicas_of(TOPIC, 0) if x != a)
        cluster.pause(c)
        assert cluster.terminate(a) == 0  # A -> B
        cluster.start_broker(a)
        elect_preferred(run)  # B -> A as soon as A is back in the ISR
        cluster.resume(c)
        assert cluster.leader_of(TOPIC, 0)[0] == a
        assert cluster.leader_of(TOPIC, 0)[1] >= epoch + 2
        cluster.wait_full_isr(TOPIC, 1)
        more_acks(run, 10)
    run.converge_and_check(TOPIC, 1)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds())
def test_r17_zombie_follower_is_fenced_and_truncates(run: Run, seed: int) -> None:
    """SIGSTOP a follower across two leader changes, then SIGCONT: its fetches carry an
    old epoch; it must truncate and catch up before re-entering the ISR."""
    start(run)
    cluster = run.cluster
    assert cluster is not None
    leader, epoch, _ = cluster.leader_of(TOPIC, 0)
    zombie = next(x for x in cluster.replicas_of(TOPIC, 0) if x != leader)
    cluster.pause(zombie)
    assert cluster.terminate(leader) == 0  # change 1
    cluster.wait_leader(TOPIC, 0, not_in=(leader, zombie))
    cluster.start_broker(leader)
    elect_preferred(run)  # change 2
    more_acks(run, 10)
    assert cluster.leader_of(TOPIC, 0)[1] >= epoch + 2
    cluster.resume(zombie)
    cluster.wait_full_isr(TOPIC, 1)
    more_acks(run, 10)
    run.converge_and_check(TOPIC, 1)


def leader_end_offset(run: Run, broker_id: int) -> int:
    assert run.cluster is not None
    reply = run.cluster.stub(broker_id).ListOffsets(
        broker_pb2.ListOffsetsRequest(
            partitions=[
                broker_pb2.ListOffsetsPartition(
                    topic=TOPIC, partition=0, timestamp_ms=-1, current_leader_epoch=-1
                )
            ]
        ),
        timeout=5,
    )
    assert reply.partitions[0].error_code == ErrorCode.NONE
    return int(reply.partitions[0].offset)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_r18_stale_control_messages_are_rejected(run: Run, seed: int) -> None:
    start(run)
    cluster = run.cluster
    assert cluster is not None
    described = cluster.describe()
    epochs = {b.endpoint.broker_id: b.broker_epoch for b in described.brokers}
    leader, leader_epoch, isr = cluster.leader_of(TOPIC, 0)
    follower = next(b for b in isr if b != leader)
    part = (
        cluster.controller_stub()
        .DescribeCluster(controller_pb2.DescribeClusterRequest(topics=[TOPIC]), timeout=5)
        .topics[0]
        .partitions[0]
    )
    control = broker_pb2_grpc.BrokerControlServiceStub(
        cluster._channel_to(cluster.brokers[follower].address)
    )

    def leader_and_isr(
        controller_epoch: int, new_leader_epoch: int
    ) -> broker_pb2.LeaderAndIsrResponse:
        cluster.record("stale-leader-and-isr", controller_epoch=controller_epoch)
        return control.LeaderAndIsr(
            broker_pb2.LeaderAndIsrRequest(
                controller_id=0,
                controller_epoch=controller_epoch,
                broker_epoch=epochs[follower],
                partitions=[
                    broker_pb2.PartitionState(
                        topic=TOPIC,
                        partition=0,
                        leader=follower,
                        leader_epoch=new_leader_epoch,
                        isr=[follower],
                        partition_epoch=part.partition_epoch + 5,
                        replicas=list(part.replicas),
                    )
                ],
            ),
            timeout=5,
        )

    # An older controller epoch, twice (duplicated), then an older leader epoch.
    for _ in range(2):
        reply = leader_and_isr(described.controller_epoch - 1, leader_epoch + 5)
        assert reply.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
    reply = leader_and_isr(described.controller_epoch, leader_epoch - 1)
    codes = {reply.error_code, *(p.error_code for p in reply.partitions)}
    assert codes & {ErrorCode.STALE_CONTROLLER_EPOCH, ErrorCode.FENCED_LEADER_EPOCH} or codes == {
        ErrorCode.NONE
    }
    # No state change: the follower did not start leading, the leader still does.
    assert cluster.leader_of(TOPIC, 0)[:2] == (leader, leader_epoch)
    batch = build_batch([(1000, None, b"probe", None)])
    produced = cluster.stub(follower).Produce(
        broker_pb2.ProduceRequest(
            acks=-1,
            timeout_ms=3000,
            partitions=[
                broker_pb2.PartitionProduceData(
                    topic=TOPIC, partition=0, records=batch, current_leader_epoch=-1
                )
            ],
        ),
        timeout=10,
    )
    assert produced.partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # A stale AlterPartition (old partition epoch) to the controller changes nothing.
    cluster.record("stale-alter-partition")
    altered = cluster.controller_stub().AlterPartition(
        controller_pb2.AlterPartitionRequest(
            broker_id=leader,
            broker_epoch=epochs[leader],
            partitions=[
                controller_pb2.AlterPartitionItem(
                    topic=TOPIC,
                    partition=0,
                    leader_epoch=leader_epoch,
                    partition_epoch=part.partition_epoch - 1,
                    new_isr=[leader],
                )
            ],
        ),
        timeout=5,
    )
    codes = {altered.error_code, *(p.error_code for p in altered.partitions)}
    assert codes - {ErrorCode.NONE}, "a stale AlterPartition was accepted"
    assert cluster.leader_of(TOPIC, 0)[2] == isr
    more_acks(run, 10)
    run.converge_and_check(TOPIC, 1)


@pytest.mark.timeout(240)
@pytest.mark.parametrize("seed", seeds())
def test_r19_producer_with_stale_leader_epoch(run: Run, seed: int) -> None:
    start(run)
    cluster = run.cluster
    assert cluster is not None
    old_leader, old_epoch, _ = cluster.leader_of(TOPIC, 0)
    assert cluster.terminate(old_leader) == 0
    new_leader = cluster.wait_leader(TOPIC, 0, not_in=(old_leader,))
    cluster.start_broker(old_leader)
    cluster.wait_full_isr(TOPIC, 1)
    run.workloads[0].stop()
    before = leader_end_offset(run, new_leader)
    batch = build_batch([(1000, None, b"stale", None)])
    for target, allowed in (
        (old_leader, {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH}),
        (new_leader, {ErrorCode.FENCED_LEADER_EPOCH}),
    ):
        cluster.record("stale-produce", broker=target, leader_epoch=old_epoch)
        reply = cluster.stub(target).Produce(
            broker_pb2.ProduceRequest(
                acks=-1,
                timeout_ms=3000,
                partitions=[
                    broker_pb2.PartitionProduceData(
                        topic=TOPIC, partition=0, records=batch, current_leader_epoch=old_epoch
                    )
                ],
            ),
            timeout=10,
        )
        assert reply.partitions[0].error_code in allowed
    assert leader_end_offset(run, new_leader) == before  # nothing appended (I10)
    run.converge_and_check(TOPIC, 1)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds())
@pytest.mark.parametrize("victim", ["leader", "follower"])
def test_r23_power_loss_of_one_broker(run: Run, seed: int, victim: str) -> None:
    """kill -9 one broker and cut the unflushed tail of its log; it must truncate by
    epoch, catch up from the leader and rejoin the ISR; nothing acknowledged is lost."""
    start(run, partitions=2)
    cluster = run.cluster
    assert cluster is not None
    leader, _, _ = cluster.leader_of(TOPIC, 0)
    broker = leader if victim == "leader" else next(b for b in cluster.brokers if b != leader)
    more_acks(run, 20)
    cluster.kill(broker)
    for p in range(2):
        cluster.truncate_tail(broker, TOPIC, p, rng=run.rng)
    more_acks(run, 10)
    cluster.start_broker(broker)
    cluster.wait_full_isr(TOPIC, 2, timeout_s=60)
    more_acks(run, 10)
    run.converge_and_check(TOPIC, 2)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds())
@pytest.mark.parametrize("flush_policy", ["none", "fsync"])
def test_r24_every_broker_crashes_at_once(run: Run, seed: int, flush_policy: str) -> None:
    """kill -9 all brokers together, restart them in a random order: every log recovers
    from an unclean shutdown, only a last-ISR replica may lead (unclean election is
    off), the replicas converge without divergence and nothing acknowledged is lost.
    (The machine stays up, so the page cache survives; the power-loss variants below
    lose it too.)"""
    every_broker_goes_down(run, flush_policy, power_loss=False)
    run.converge_and_check(TOPIC, 2)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds())
@pytest.mark.parametrize("victim", ["leader", "follower"])
def test_r23_power_loss_of_one_broker_on_a_lazy_file_system(
    run: Run, seed: int, victim: str
) -> None:
    """Default flush policy (no fsync): one broker's machine loses power, so everything
    it had not fsynced is gone, checkpoints included. It must come back out of the ISR,
    truncate by epoch, catch up and rejoin; the other replicas kept every acknowledged
    record, so nothing acknowledged is lost."""
    start(run, partitions=2, lazy_fs=True)
    cluster = run.cluster
    assert cluster is not None
    leader, _, _ = cluster.leader_of(TOPIC, 0)
    broker = leader if victim == "leader" else next(b for b in cluster.brokers if b != leader)
    more_acks(run, 20)
    cluster.power_loss(broker)
    more_acks(run, 10)
    cluster.start_broker(broker)
    cluster.wait_full_isr(TOPIC, 2, timeout_s=60)
    more_acks(run, 10)
    run.converge_and_check(TOPIC, 2)


def every_broker_goes_down(
    run: Run, flush_policy: str, *, power_loss: bool, unclean_recovery: bool = False
) -> None:
    """kill -9 every broker at once (with `power_loss`, each lazy file system then drops
    what its broker had not fsynced: the machines lost power); restart them in a random
    order, wait for the full ISR and for more acknowledged writes.

    `unclean_recovery`: no restarted broker can prove it kept its unflushed tail, so each
    leaves every ISR and ELR and the partitions stay offline (KIP-966) until the
    operator's unclean election, which this then runs for every partition."""
    start(run, partitions=2, configs={"flush.policy": flush_policy}, lazy_fs=power_loss)
    cluster = run.cluster
    assert cluster is not None
    more_acks(run, 20)
    order = sorted(cluster.brokers)
    for broker in order:
        cluster.kill(broker)
    if power_loss:
        for broker in order:
            cluster.power_loss(broker)
    run.rng.shuffle(order)
    for broker in order:
        cluster.start_broker(broker)
    if unclean_recovery:
        cluster.wait_active(len(order))
        for partition in range(2):
            leader, epoch, isr = cluster.leader_of(TOPIC, partition)
            assert leader == -1, f"{TOPIC}-{partition}: {leader} leads (epoch {epoch}, ISR {isr})"
            assert cluster.elect(TOPIC, partition, "unclean") == ErrorCode.NONE
    cluster.wait_full_isr(TOPIC, 2, timeout_s=90)
    more_acks(run, 20)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds())
def test_r24_power_loss_of_every_broker_with_fsync_loses_nothing(run: Run, seed: int) -> None:
    """flush.policy=fsync (I18a): a record counts towards the HW only once fsynced, so
    the last in-sync replica comes back from the power failure with every acknowledged
    record; it leads, the others truncate to it, and nothing acknowledged is lost."""
    every_broker_goes_down(run, "fsync", power_loss=True)
    run.converge_and_check(TOPIC, 2)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds())
def test_r24_power_loss_of_every_broker_without_fsync_loses_acknowledged_writes(
    run: Run, seed: int
) -> None:
    """The default flush policy relies on replication, not fsync: when every replica
    loses power at once, acknowledged records that none had fsynced are gone. No replica
    can prove otherwise, so the partitions stay offline (no leader) until the operator's
    unclean election; then the loss shows and the offsets are reused, as the README's
    flush-policy table says. The checker must see the loss; this is also the nemesis's
    proof that it really drops unsynced writes."""
    every_broker_goes_down(run, "none", power_loss=True, unclean_recovery=True)
    result = run.converge_and_check(TOPIC, 2, expected=UNCLEAN_EXPECTED)
    assert {"lost-write", "unseen"} & set(result.expected_types), result.to_text()
    print("R24 EXPECTED LOSS (no fsync, every replica lost power):", result.counts)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("seed", seeds())
@pytest.mark.parametrize("victim", ["leader", "follower"])
def test_r25_segment_corruption_on_a_minority(run: Run, seed: int, victim: str) -> None:
    """Flip a byte in the last batch and append a torn copy while the broker is down:
    recovery must drop the damage (never serve it), re-fetch and rejoin."""
    start(run)
    cluster = run.cluster
    assert cluster is not None
    leader, _, _ = cluster.leader_of(TOPIC, 0)
    broker = leader if victim == "leader" else next(b for b in cluster.brokers if b != leader)
    more_acks(run, 20)
    cluster.kill(broker)
    cluster.corrupt_tail(broker, TOPIC, 0, rng=run.rng)
    more_acks(run, 10)
    cluster.start_broker(broker)
    cluster.wait_full_isr(TOPIC, 1, timeout_s=60)
    more_acks(run, 10)
    result = run.converge_and_check(TOPIC, 1)
    assert "unexpected" not in result.error_types  # corrupt bytes never served (I15)
