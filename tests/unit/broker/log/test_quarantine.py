"""Loss receipts and the quarantine: the pure rules (named-row tables), what a truncation
would remove (`PartitionLog.truncation_suffix`, checked against `truncate_to` by a
property), and the broker-wide bound (eviction oldest first, too-large discards, the
receipt cap, the startup scan)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker.log import loss_receipt as lr
from broker.log import quarantine as q
from broker.log.loss_receipt import (
    EpochRange,
    LossReceipt,
    StoredReceipt,
    discarded_epochs,
    divergence_cause,
    format_receipt,
    parse_name,
    quarantined_records,
    read_batches,
    read_receipts,
    records_below,
    same_discard,
    still_held,
)
from broker.log.partition_log import LogSuffix, PartitionLog
from broker.log.quarantine import Quarantine, quarantine_step
from minikafka.record_batch import iter_batches
from tests.unit.broker.log.storage_helpers import SMALL, batch, open_log, read_all

# ---- pure rules -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("entries", "start", "end", "expected"),
    [
        pytest.param([(1, 0)], 3, 8, [(1, 3, 8)], id="one epoch covers the range"),
        pytest.param([(1, 0), (2, 5)], 3, 8, [(1, 3, 5), (2, 5, 8)], id="range spans two epochs"),
        pytest.param([(1, 0), (2, 5)], 5, 8, [(2, 5, 8)], id="starts at an epoch boundary"),
        pytest.param([(1, 0), (2, 5), (4, 6)], 3, 8, [(1, 3, 5), (2, 5, 6), (4, 6, 8)], id="three"),
        pytest.param([(1, 0), (2, 8)], 3, 8, [(1, 3, 8)], id="entry at the end is empty"),
        pytest.param([], 3, 8, [(-1, 3, 8)], id="empty cache: epoch unknown"),
        pytest.param([(2, 5)], 3, 8, [(-1, 3, 5), (2, 5, 8)], id="offsets before the cache"),
        pytest.param([(1, 0)], 8, 8, [], id="nothing discarded"),
    ],
)
def test_discarded_epochs(
    entries: list[tuple[int, int]], start: int, end: int, expected: list[tuple[int, int, int]]
) -> None:
    assert discarded_epochs(entries, start, end) == [
        EpochRange(epoch=e, start_offset=s, end_offset=x) for e, s, x in expected
    ]


@pytest.mark.parametrize(
    ("start", "end", "hw", "expected"),
    [
        pytest.param(3, 8, 3, 0, id="uncommitted tail: hw at the cut"),
        pytest.param(3, 8, 6, 3, id="hw inside: three committed records"),
        pytest.param(3, 8, 8, 5, id="everything was committed"),
        pytest.param(3, 8, 0, 0, id="hw below the cut"),
        pytest.param(3, 8, 100, 5, id="hw beyond (clamped)"),
    ],
)
def test_records_below(start: int, end: int, hw: int, expected: int) -> None:
    assert records_below(start, end, hw) == expected


@pytest.mark.parametrize(
    ("kept", "incoming", "max_bytes", "max_copy", "expected"),
    [
        pytest.param(0, 100, 1000, 500, "keep", id="room"),
        pytest.param(900, 100, 1000, 500, "keep", id="exactly full"),
        pytest.param(901, 100, 1000, 500, "evict-oldest", id="over: evict"),
        pytest.param(0, 1001, 1000, 5000, "too-large", id="larger than the bound"),
        pytest.param(500, 1001, 1000, 5000, "too-large", id="larger than the bound, no evict"),
        pytest.param(0, 501, 1000, 500, "too-large", id="larger than one copy may be"),
        pytest.param(0, 1, 0, 500, "too-large", id="bound 0: receipts only"),
        pytest.param(0, 1, 1000, 0, "too-large", id="copy bound 0: receipts only"),
    ],
)
def test_quarantine_step(
    kept: int, incoming: int, max_bytes: int, max_copy: int, expected: str
) -> None:
    step = quarantine_step(
        kept_bytes=kept, incoming_bytes=incoming, max_bytes=max_bytes, max_copy_bytes=max_copy
    )
    assert step == expected


def receipt(**changes: object) -> LossReceipt:
    fields: dict[str, object] = {
        "sequence": 1,
        "topic": "orders",
        "partition": 0,
        "time_ms": 1_700_000_000_123,
        "broker_id": 3,
        "leader_id": 2,
        "leader_epoch": 2,
        "reason": "divergence",
        "detail": "diverging epoch 1 at offset 3 from leader 2",
        "start_offset": 3,
        "end_offset": 8,
        "epochs": [EpochRange(epoch=1, start_offset=3, end_offset=8)],
        "record_count": 5,
        "byte_count": 400,
        "high_watermark": 6,
        "below_high_watermark_records": 3,
        "below_high_watermark_bytes": 200,
        "batches": "kept",
    }
    fields.update(changes)
    return LossReceipt(**fields)  # type: ignore[arg-type]


EPOCHS_1 = [EpochRange(epoch=1, start_offset=3, end_offset=8)]


def suffix(start: int = 3, end: int = 8, size: int = 400) -> LogSuffix:
    return LogSuffix(
        start_offset=start, end_offset=end, size_bytes=size, bytes_below_split=0, chunks=None
    )


@pytest.mark.parametrize(
    ("candidate", "epochs", "same"),
    [
        pytest.param(suffix(), EPOCHS_1, True, id="same offsets, bytes and epochs"),
        pytest.param(suffix(start=4), EPOCHS_1, False, id="other start"),
        pytest.param(suffix(end=9), EPOCHS_1, False, id="other end"),
        pytest.param(suffix(size=401), EPOCHS_1, False, id="other bytes"),
        pytest.param(
            suffix(), [EpochRange(epoch=2, start_offset=3, end_offset=8)], False, id="other epoch"
        ),
    ],
)
def test_same_discard(candidate: LogSuffix, epochs: list[EpochRange], same: bool) -> None:
    assert same_discard(receipt(), candidate, epochs) is same


@pytest.mark.parametrize(
    ("log_end", "epochs", "held"),
    [
        pytest.param(8, EPOCHS_1, True, id="untruncated log"),
        pytest.param(12, EPOCHS_1, True, id="log grew past it in the same epoch"),
        pytest.param(3, [], False, id="truncated at its start"),
        pytest.param(
            8, [EpochRange(epoch=2, start_offset=3, end_offset=8)], False, id="refetched in epoch 2"
        ),
    ],
)
def test_still_held(log_end: int, epochs: list[EpochRange], held: bool) -> None:
    assert still_held(receipt(), log_end, epochs) is held


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        pytest.param("00000000000000000007.receipt", (7, ".receipt"), id="receipt"),
        pytest.param("00000000000000000007.receipt.pending", (7, ".receipt.pending"), id="pending"),
        pytest.param("00000000000000000007.discarded.log", None, id="other suffix"),
        pytest.param("00000000000000000007.receipt.tmp", None, id="temporary"),
        pytest.param("7.receipt", None, id="short sequence"),
        pytest.param("00000000000000000007.log", None, id="a segment"),
    ],
)
def test_parse_name(name: str, parsed: tuple[int, str] | None) -> None:
    assert parse_name(name) == parsed


def test_format_receipt_line() -> None:
    stored = StoredReceipt(
        receipt=receipt(note="a note"),
        path="/q/00000000000000000001.receipt",
        pending=False,
        batches_position=500,
        batches_size=400,
    )
    assert format_receipt(stored) == (
        "receipt: 1 topic: orders partition: 0 time: 2023-11-14T22:13:20.123Z broker: 3 "
        "leader: 2 leaderEpoch: 2 reason: divergence offsets: 3-7 epochs: 1:3-7 records: 5 "
        "bytes: 400 highWatermark: 6 belowHighWatermark: 3 bytesBelowHighWatermark: 200 "
        "batches: kept file: /q/00000000000000000001.receipt state: confirmed "
        "detail: diverging epoch 1 at offset 3 from leader 2 note: a note"
    )


# ---- what a truncation removes ------------------------------------------------------------


def segment_bytes(log: PartitionLog) -> bytes:
    return b"".join(path.read_bytes() for path in sorted(log.directory.glob("*.log")))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=30),
    cut=st.integers(0, 130),
    split=st.integers(0, 130),
    log_start=st.integers(0, 40),
)
def test_truncation_suffix_is_what_truncate_to_removes(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], cut: int, split: int, log_start: int
) -> None:
    """Property: for any log (several segments, a log start inside a batch), the suffix
    names the bytes `truncate_to(cut)` removes and the first removed offset (the log
    start when the whole log goes), and counts as below the split the removed batches
    that start below it."""
    log = open_log(tmp_path_factory.mktemp("log") / "orders-0", SMALL)
    for i, records in enumerate(sizes):
        log.append_as_leader(batch(records, value_bytes=200, tag=i), leader_epoch=i // 5, now_ms=0)
    log.update_high_watermark(log.log_end_offset)
    log.maybe_increment_log_start_offset(min(log_start, log.log_end_offset))
    old_start, old_end = log.log_start_offset, log.log_end_offset
    before = segment_bytes(log)
    found = log.truncation_suffix(cut, split_offset=split, read_max_bytes=1 << 30)
    if cut >= old_end or old_start >= old_end:
        assert (found.start_offset, found.size_bytes, found.chunks) == (old_end, 0, [])
        log.close()
        return
    log.truncate_to(cut)
    after = segment_bytes(log)
    assert before.startswith(after)
    removed = before[len(after) :]
    assert found.start_offset == max(log.log_end_offset, old_start)
    assert found.end_offset == old_end
    assert found.size_bytes == len(removed)
    assert found.chunks is not None
    assert b"".join(found.chunks) == removed
    below = sum(h.size for _, h in iter_batches(removed) if h.base_offset < split)
    assert found.bytes_below_split == (0 if split <= found.start_offset else below)
    log.close()


def test_truncation_suffix_is_not_read_beyond_the_limit(tmp_path: Path) -> None:
    log = open_log(tmp_path / "orders-0", SMALL)
    for i in range(4):
        log.append_as_leader(batch(2, tag=i), leader_epoch=1, now_ms=0)
    found = log.truncation_suffix(2, split_offset=0, read_max_bytes=10)
    assert found.start_offset == 2
    assert found.end_offset == 8
    assert found.size_bytes > 10
    assert found.chunks is None
    log.close()


# ---- the broker's quarantine --------------------------------------------------------------


def partition_log(data_dir: Path, index: int, batches: int = 4) -> PartitionLog:
    log = PartitionLog.open(
        data_dir / f"orders-{index}",
        SMALL,
        topic="orders",
        partition=index,
        recovery_point=0,
        log_start_offset=0,
        high_watermark=0,
        clean_shutdown=True,
        now_ms=0,
    )
    for i in range(batches):
        log.append_as_leader(batch(2, value_bytes=100, tag=i), leader_epoch=1, now_ms=0)
    return log


def truncate(quarantine: Quarantine, log: PartitionLog, offset: int, now_ms: int) -> LossReceipt:
    """What `Partition._truncate` does: receipt, truncation, confirmation."""
    part = quarantine.for_log(log)
    made = part.before_truncation(
        log,
        offset=offset,
        cause=divergence_cause(1, offset, 2),
        broker_id=3,
        leader_id=2,
        leader_epoch=2,
        now_ms=now_ms,
    )
    assert made is not None
    log.truncate_to(offset)
    part.after_truncation(made)
    return made


def stored_of(log: PartitionLog) -> list[StoredReceipt]:
    found, problems = read_receipts(log.directory / lr.DIR_NAME)
    assert problems == []
    return found


def test_receipt_and_batches_describe_the_removed_suffix(tmp_path: Path) -> None:
    log = partition_log(tmp_path, 0)
    log.update_high_watermark(5)
    removed = b"".join(raw for _, h, raw in read_all(log) if h.base_offset >= 4)
    quarantine = Quarantine(tmp_path, max_bytes=1 << 20)
    made = truncate(quarantine, log, 4, now_ms=5)
    assert (made.start_offset, made.end_offset, made.record_count) == (4, 8, 4)
    assert (made.high_watermark, made.below_high_watermark_records) == (5, 1)
    assert made.byte_count == len(removed)
    assert made.batches == "kept"
    (stored,) = stored_of(log)
    assert not stored.pending
    assert stored.receipt == made
    assert stored.has_batches
    assert read_batches(stored) == removed
    assert Path(stored.path).read_bytes() == lr.encode_receipt(made) + removed
    assert [r.offset for r in quarantined_records(stored)] == [4, 5, 6, 7]
    assert quarantine.kept_bytes == len(removed)
    totals = quarantine.totals
    assert (totals.records_below_high_watermark, totals.records_above_high_watermark) == (1, 3)
    assert totals.bytes_below_high_watermark + totals.bytes_above_high_watermark == len(removed)
    log.close()


def test_oldest_batches_are_evicted_first_and_their_receipts_stay(tmp_path: Path) -> None:
    logs = [partition_log(tmp_path, i) for i in range(3)]
    one = logs[0].truncation_suffix(4, split_offset=0, read_max_bytes=0).size_bytes
    quarantine = Quarantine(tmp_path, max_bytes=2 * one)
    for i, log in enumerate(logs):
        truncate(quarantine, log, 4, now_ms=i)
    first, second, third = (stored_of(log)[0] for log in logs)
    assert first.receipt.batches == "evicted"
    assert not first.has_batches
    assert Path(first.path).read_bytes() == lr.encode_receipt(first.receipt)
    assert "--quarantine-max-bytes" in first.receipt.note
    assert second.receipt.batches == third.receipt.batches == "kept"
    assert quarantine.kept_bytes == 2 * one
    for log in logs:
        log.close()


@pytest.mark.parametrize(
    ("max_bytes", "max_copy_bytes", "flag"),
    [
        pytest.param(50, 1 << 20, "--quarantine-max-bytes", id="larger than the bound"),
        pytest.param(1 << 20, 50, "--quarantine-max-copy-bytes", id="larger than one copy"),
    ],
)
def test_a_discard_larger_than_a_bound_keeps_only_its_receipt(
    tmp_path: Path, max_bytes: int, max_copy_bytes: int, flag: str
) -> None:
    log = partition_log(tmp_path, 0)
    quarantine = Quarantine(tmp_path, max_bytes=max_bytes, max_copy_bytes=max_copy_bytes)
    made = truncate(quarantine, log, 2, now_ms=1)
    assert made.batches == "too-large"
    assert f"({flag}): receipt only" in made.note
    assert Path(stored_of(log)[0].path).read_bytes() == lr.encode_receipt(made)
    assert made.note.startswith(f"{made.byte_count} bytes of batches exceed")
    assert list((log.directory / lr.DIR_NAME).iterdir()) == [
        log.directory / lr.DIR_NAME / "00000000000000000001.receipt"
    ]
    assert quarantine.kept_bytes == 0
    log.close()


def test_receipts_per_partition_are_capped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(q, "MAX_RECEIPTS_PER_PARTITION", 3)
    log = partition_log(tmp_path, 0, batches=1)
    quarantine = Quarantine(tmp_path, max_bytes=1 << 20)
    for now_ms in range(5):
        log.append_as_leader(batch(1, tag=now_ms), leader_epoch=1, now_ms=0)
        truncate(quarantine, log, log.log_end_offset - 1, now_ms=now_ms)
    assert [s.receipt.sequence for s in stored_of(log)] == [3, 4, 5]
    assert len(list((log.directory / lr.DIR_NAME).iterdir())) == 3
    assert quarantine.kept_bytes == sum(s.receipt.byte_count for s in stored_of(log))
    log.close()


def test_startup_scan_counts_kept_batches_and_drops_leftovers(tmp_path: Path) -> None:
    logs = [partition_log(tmp_path, i) for i in range(2)]
    quarantine = Quarantine(tmp_path, max_bytes=1 << 20)
    for i, log in enumerate(logs):
        truncate(quarantine, log, 4, now_ms=i)
    directory = logs[0].directory / lr.DIR_NAME
    (directory / "00000000000000000010.receipt.pending.tmp").write_bytes(b"torn")
    again = Quarantine(tmp_path, max_bytes=1 << 20)
    assert again.kept_bytes == quarantine.kept_bytes
    assert sorted(p.name for p in directory.iterdir()) == [
        "00000000000000000001.receipt",
    ]
    again.forget(logs[1].directory)
    assert again.kept_bytes == stored_of(logs[0])[0].receipt.byte_count
    for log in logs:
        log.close()


def test_a_new_receipt_takes_the_next_sequence_after_a_restart(tmp_path: Path) -> None:
    log = partition_log(tmp_path, 0)
    truncate(Quarantine(tmp_path, max_bytes=1 << 20), log, 6, now_ms=1)
    truncate(Quarantine(tmp_path, max_bytes=1 << 20), log, 4, now_ms=2)
    assert [(s.receipt.sequence, s.receipt.start_offset) for s in stored_of(log)] == [
        (1, 6),
        (2, 4),
    ]
    data = read_batches(stored_of(log)[1])
    assert [h.base_offset for _, h in iter_batches(data)] == [4]
    log.close()
