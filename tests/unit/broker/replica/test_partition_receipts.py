"""Loss receipts on the real replica layer (in-process brokers, real logs in a tmp dir).

The schedule: A leads epoch 1 and writes three batches, offsets [0,3) [3,6) [6,8); B
copies the first, F all three and learns HW 6 (offsets 3-5 committed as far as F knows).
B then leads epoch 2 without them (an unclean election), and F's next fetch from B
answers "diverging epoch 1 at offset 3": F discards [3,8). Before it truncates, F must
make the receipt durable; a crash in between must leave the receipt and the untruncated
log, and the next truncation must not write a second receipt.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import generate_latest

from broker.log import loss_receipt as lr
from broker.log import quarantine as q
from broker.log.errors import LogStorageError
from broker.log.loss_receipt import (
    EpochRange,
    StoredReceipt,
    quarantined_records,
    read_batches,
    read_receipts,
)
from broker.server.metrics import BrokerMetrics
from tests.support.inproc import ManualClock, Node, item

A, B, F = 1, 2, 3
REPLICAS = (A, B, F)
#: F's high watermark when B's epoch starts: offsets 3-5 were committed as F knew.
F_HW = 6


class Crash(Exception):
    """The broker dies here (a test stands in for kill -9 at this point)."""


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
def nodes(tmp_path: Path, clock: ManualClock) -> Iterator[dict[int, Node]]:
    made = {b: Node(b, tmp_path / f"broker-{b}", clock) for b in REPLICAS}
    yield made
    for node in made.values():
        node.close()


def copy(leader: Node, follower: Node, *, up_to: int, leader_hw: int) -> None:
    """Append the leader's batches below `up_to` to the follower, as a fetch would."""
    log = leader.partition().log
    start = follower.partition().log.log_end_offset
    records = log.read(start, max_bytes=1 << 20, max_offset=up_to).records
    follower.partition().append_as_follower(
        records, leader_high_watermark=leader_hw, leader_log_start_offset=0, now_ms=0
    )


async def diverge(nodes: dict[int, Node]) -> None:
    """The schedule of the module docstring, up to F following B in epoch 2."""
    a, b, f = nodes[A], nodes[B], nodes[F]
    for node in (a, b, f):
        node.apply(leader=A, leader_epoch=1, isr=REPLICAS, replicas=REPLICAS)
    for values in ([b"0", b"1", b"2"], [b"3", b"4", b"5"], [b"6", b"7"]):
        assert (await a.produce(values)).error_code == 0
    copy(a, b, up_to=3, leader_hw=0)
    copy(a, f, up_to=8, leader_hw=F_HW)
    assert f.partition().log.high_watermark == F_HW
    for node in (b, f):
        node.apply(leader=B, leader_epoch=2, isr=(B,), replicas=REPLICAS)


def crash_on_truncate(node: Node, monkeypatch: pytest.MonkeyPatch) -> None:
    """The next truncation of `node`'s log dies before touching it."""

    def crash(offset: int) -> None:
        raise Crash(f"killed before truncating to {offset}")

    monkeypatch.setattr(node.partition().log, "truncate_to", crash)


async def fetch_and_truncate(follower: Node, leader: Node) -> tuple[int, int]:
    """One replica fetch from `leader`; it must answer a diverging epoch, and the
    follower truncates as the fetcher does. Returns that diverging epoch."""
    (result,) = await leader.replicas.fetch(
        items=[item(follower)],
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        replica_id=follower.broker_id,
    )
    assert result.error_code == 0, result.error_message
    assert result.diverging_epoch is not None
    follower.partition().truncate_on_divergence(*result.diverging_epoch)
    return result.diverging_epoch


def receipts(node: Node) -> list[StoredReceipt]:
    found, problems = read_receipts(node.partition().log.directory / lr.DIR_NAME)
    assert problems == []
    return found


def files(node: Node) -> list[str]:
    return sorted(p.name for p in (node.partition().log.directory / lr.DIR_NAME).iterdir())


def restart(node: Node, clock: ManualClock) -> Node:
    """kill -9 and start again on the same data directory (nothing flushed)."""
    node.replicas.partitions.clear()
    node.logs.abandon()
    again = Node(node.broker_id, node.data_dir, clock)
    again.apply(leader=B, leader_epoch=2, isr=(B,), replicas=REPLICAS)
    return again


async def test_divergence_writes_the_receipt_then_truncates(
    nodes: dict[int, Node], clock: ManualClock
) -> None:
    await diverge(nodes)
    f = nodes[F]
    log = f.partition().log
    removed = log.read(3, max_bytes=1 << 20).records
    assert await fetch_and_truncate(f, nodes[B]) == (1, 3)
    assert log.log_end_offset == 3
    (stored,) = receipts(f)
    r = stored.receipt
    assert not stored.pending
    assert (r.topic, r.partition, r.broker_id, r.leader_id, r.leader_epoch) == ("t", 0, F, B, 2)
    assert (r.reason, r.detail) == ("divergence", "diverging epoch 1 at offset 3 from leader 2")
    assert (r.start_offset, r.end_offset, r.record_count, r.byte_count) == (3, 8, 5, len(removed))
    assert r.epochs == [EpochRange(epoch=1, start_offset=3, end_offset=8)]
    assert (r.high_watermark, r.below_high_watermark_records) == (F_HW, 3)
    assert r.batches == "kept"
    assert r.time_ms == clock.wall_ms()
    assert stored.has_batches
    assert read_batches(stored) == removed
    assert [(x.offset, x.value) for x in quarantined_records(stored)] == [
        (3, b"3"),
        (4, b"4"),
        (5, b"5"),
        (6, b"6"),
        (7, b"7"),
    ]
    metrics = BrokerMetrics()
    metrics.watch_quarantine(f.replicas.quarantine)
    text = generate_latest(metrics.registry).decode()
    assert 'minikafka_discarded_records_total{below_high_watermark="true"} 3.0' in text
    assert 'minikafka_discarded_records_total{below_high_watermark="false"} 2.0' in text
    assert f"minikafka_quarantine_kept_bytes {float(len(removed))}" in text


async def test_a_crash_between_receipt_and_truncation_leaves_both_and_no_duplicate(
    nodes: dict[int, Node], clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    await diverge(nodes)
    f = nodes[F]
    log = f.partition().log
    crash_on_truncate(f, monkeypatch)
    with pytest.raises(Crash):
        await fetch_and_truncate(f, nodes[B])
    monkeypatch.undo()
    assert log.log_end_offset == 8, "truncated although the broker died first"
    assert files(f) == ["00000000000000000001.receipt.pending"]

    f = nodes[F] = restart(f, clock)
    assert f.partition().log.log_end_offset == 8
    pending = f.partition().quarantine.pending
    assert pending is not None
    assert pending.sequence == 1

    await fetch_and_truncate(f, nodes[B])
    assert f.partition().log.log_end_offset == 3
    assert files(f) == ["00000000000000000001.receipt"]
    (stored,) = receipts(f)
    assert (stored.receipt.start_offset, stored.receipt.end_offset) == (3, 8)
    assert f.replicas.quarantine.totals.receipts == 1  # the discard is counted, once


async def test_a_lost_rename_after_the_truncation_is_confirmed_at_restart(
    nodes: dict[int, Node], clock: ManualClock
) -> None:
    await diverge(nodes)
    f = nodes[F]
    await fetch_and_truncate(f, nodes[B])
    directory = f.partition().log.directory / lr.DIR_NAME
    (directory / "00000000000000000001.receipt").rename(
        directory / "00000000000000000001.receipt.pending"
    )
    f = nodes[F] = restart(f, clock)
    assert f.partition().quarantine.pending is None
    assert files(f) == ["00000000000000000001.receipt"]


async def test_a_pending_receipt_is_voided_by_another_truncation(
    nodes: dict[int, Node], clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """F dies before truncating [3,8); meanwhile the leader changed to one holding [0,6)
    (A, epoch 3): the truncation that comes removes only [6,8). The first receipt
    described a loss that never happened and goes; the second is the truth."""
    await diverge(nodes)
    a, f = nodes[A], nodes[F]
    crash_on_truncate(f, monkeypatch)
    with pytest.raises(Crash):
        await fetch_and_truncate(f, nodes[B])
    monkeypatch.undo()
    f = nodes[F] = restart(f, clock)
    a.partition().log.truncate_to(6)  # A's log is now [0,6) in epoch 1
    for node in (a, f):
        node.apply(leader=A, leader_epoch=3, isr=(A,), replicas=REPLICAS)
    assert await fetch_and_truncate(f, a) == (1, 6)
    (stored,) = receipts(f)
    assert (stored.receipt.sequence, stored.receipt.start_offset) == (2, 6)
    assert files(f) == ["00000000000000000002.receipt"]


async def test_no_truncation_without_a_durable_receipt(
    nodes: dict[int, Node], monkeypatch: pytest.MonkeyPatch
) -> None:
    await diverge(nodes)
    f = nodes[F]

    def disk_full(path: Path, chunks: object, disk: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(q, "_write_synced", disk_full)
    with pytest.raises(LogStorageError, match="cannot write the loss receipt, so not truncating"):
        await fetch_and_truncate(f, nodes[B])
    assert f.partition().log.log_end_offset == 8
    assert f.replicas.quarantine.totals.receipts == 0


@pytest.mark.parametrize(
    ("leader_start", "leader_end", "reason", "kept"),
    [
        pytest.param(0, 3, "leader-log-end", (3, 8), id="leader's log ends before ours"),
        pytest.param(20, 20, "leader-log-start", (0, 8), id="leader's log starts beyond ours"),
    ],
)
async def test_out_of_range_resets_write_receipts(
    nodes: dict[int, Node],
    leader_start: int,
    leader_end: int,
    reason: str,
    kept: tuple[int, int],
) -> None:
    await diverge(nodes)
    f = nodes[F]
    f.partition().reset_out_of_range(
        leader_log_start_offset=leader_start, leader_log_end_offset=leader_end
    )
    (stored,) = receipts(f)
    r = stored.receipt
    assert (r.reason, (r.start_offset, r.end_offset)) == (reason, kept)
    assert r.below_high_watermark_records == max(0, F_HW - kept[0])
    assert [x.offset for x in quarantined_records(stored)] == list(range(*kept))


# ---- `minikafka log lost` over what the broker wrote ----------------------------------------


def lost(*args: str) -> tuple[int, str, str]:
    from click.testing import CliRunner

    from minikafka_cli.logs import log

    result = CliRunner().invoke(log, ["lost", *args])
    return result.exit_code, result.stdout, result.stderr


async def test_log_lost_lists_receipts_and_prints_records(
    nodes: dict[int, Node], clock: ManualClock
) -> None:
    await diverge(nodes)
    f = nodes[F]
    await fetch_and_truncate(f, nodes[B])
    data_dir, partition_dir = f.data_dir, f.partition().log.directory

    code, out, _ = lost(str(data_dir))
    assert code == 0
    (line,) = out.splitlines()
    assert line.startswith("receipt: 1 topic: t partition: 0 time: ")
    assert (
        "broker: 3 leader: 2 leaderEpoch: 2 reason: divergence offsets: 3-7 epochs: 1:3-7 "
        "records: 5 " in line
    )
    assert "highWatermark: 6 belowHighWatermark: 3 " in line
    assert "batches: kept file: " in line
    assert "state: confirmed" in line
    assert line.endswith("detail: diverging epoch 1 at offset 3 from leader 2")
    assert lost(str(partition_dir))[1] == out

    code, out, _ = lost("--print-records", str(partition_dir))
    lines = out.splitlines()
    assert code == 0
    assert lines[0] == line
    assert lines[1].startswith("  00000000000000000001.receipt position: 0 baseOffset: 3 ")
    assert "lastOffset: 5 count: 3 partitionLeaderEpoch: 1" in lines[1]
    assert "baseOffset: 6 lastOffset: 7 count: 2" in lines[2]
    assert lines[3].startswith("  | offset: 3 leaderEpoch: 1 timestamp: ")
    assert lines[3].endswith("keySize: -1 valueSize: 1 headerKeys: [] key: null payload: 3")
    assert [x.rsplit(" ", 1)[1] for x in lines[3:]] == ["3", "4", "5", "6", "7"]

    import json

    code, out, _ = lost("--json", "--print-records", str(data_dir))
    (entry,) = [json.loads(x) for x in out.splitlines()]
    assert entry["receipt"]["start_offset"] == 3
    assert entry["state"] == "confirmed"
    assert [r["offset"] for r in entry["records"]] == [3, 4, 5, 6, 7]
    assert entry["problem"] is None


async def test_log_lost_without_receipts_and_on_bad_input(
    nodes: dict[int, Node], tmp_path: Path
) -> None:
    await diverge(nodes)
    assert lost(str(nodes[F].data_dir)) == (0, "no loss receipts\n", "")
    assert lost(str(nodes[F].partition().log.directory))[:2] == (0, "no loss receipts\n")
    stray = tmp_path / "stray"
    stray.mkdir()
    code, _, err = lost(str(stray))
    assert code == 1
    assert "neither a broker data directory" in err


async def test_log_lost_reports_missing_batches_and_unreadable_receipts(
    nodes: dict[int, Node],
) -> None:
    await diverge(nodes)
    f = nodes[F]
    await fetch_and_truncate(f, nodes[B])
    directory = f.partition().log.directory / lr.DIR_NAME
    kept = receipts(f)[0].receipt.byte_count
    first = directory / "00000000000000000001.receipt"
    first.write_bytes(first.read_bytes()[:-10])  # the kept batches lose their end
    (directory / "00000000000000000002.receipt").write_text("{not json")
    code, out, err = lost(str(directory))
    assert code == 1
    assert f"problem: the receipt keeps {kept} bytes of batches, the file holds {kept - 10}" in out
    assert "00000000000000000002.receipt: not a loss receipt" in err
