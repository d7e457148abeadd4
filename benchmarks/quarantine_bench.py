"""What a loss receipt costs a truncation: the common divergence (a few uncommitted
batches) with and without the receipt, and the copy rate of large discards.

Run: `python -m benchmarks.quarantine_bench [--rounds 200] [--tail-batches 3]`. Both sides
truncate the same tails of the same log, alternating, in the same directory (the real
disk, with its fsyncs: a truncation already fsyncs the epoch checkpoint), so the ratio is
what matters. The large discards show how long one truncation pauses the follower's
event loop per MiB kept, which is what `--quarantine-max-copy-bytes` bounds.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from broker.log.config import LogConfig
from broker.log.loss_receipt import divergence_cause
from broker.log.partition_log import PartitionLog
from broker.log.quarantine import QUARANTINE_MAX_COPY_BYTES_DEFAULT, Quarantine
from minikafka.record_batch import build_batch

BATCH_BYTES = 1024
PREFIX_BATCHES = 1000
NOW_MS = int(time.time() * 1000)


def make_batch(tag: int) -> bytes:
    return build_batch([(NOW_MS, None, b"%d:" % tag + b"v" * BATCH_BYTES, None)])


def open_log(directory: Path) -> PartitionLog:
    log = PartitionLog.open(
        directory,
        LogConfig(),
        topic="bench",
        partition=0,
        recovery_point=0,
        log_start_offset=0,
        high_watermark=0,
        clean_shutdown=True,
        now_ms=0,
    )
    for tag in range(PREFIX_BATCHES):
        log.append_as_leader(make_batch(tag), leader_epoch=1, now_ms=NOW_MS)
    log.update_high_watermark(log.log_end_offset)
    return log


def truncate_tails(
    log: PartitionLog, quarantine: Quarantine | None, *, rounds: int, batches: int
) -> list[float]:
    """Append `batches` batches and truncate them again, `rounds` times: seconds per
    truncation (with the receipt when `quarantine` is given)."""
    times: list[float] = []
    part = quarantine.for_log(log) if quarantine is not None else None
    for round_number in range(rounds):
        cut = log.log_end_offset
        for tag in range(batches):
            log.append_as_leader(make_batch(tag), leader_epoch=2 + round_number, now_ms=NOW_MS)
        start = time.perf_counter()
        receipt = None
        if part is not None:
            receipt = part.before_truncation(
                log,
                offset=cut,
                cause=divergence_cause(2, cut, 9),
                broker_id=1,
                leader_id=9,
                leader_epoch=3,
                now_ms=0,
            )
        log.truncate_to(cut)
        if part is not None:
            part.after_truncation(receipt)
        times.append(time.perf_counter() - start)
    return times


def large_discard(directory: Path, mib: int) -> float:
    """Seconds to write the receipt and keep `mib` MiB of discarded batches."""
    log = open_log(directory)
    cut = log.log_end_offset
    payload = make_batch(0) * 16
    while (log.log_end_offset - cut) * len(payload) // 16 < mib * 1024 * 1024:
        log.append_as_leader(payload, leader_epoch=2, now_ms=NOW_MS)
    log.flush()
    bound = (mib + 1) * 1024 * 1024
    part = Quarantine(directory.parent, max_bytes=bound, max_copy_bytes=bound).for_log(log)
    start = time.perf_counter()
    receipt = part.before_truncation(
        log,
        offset=cut,
        cause=divergence_cause(2, cut, 9),
        broker_id=1,
        leader_id=9,
        leader_epoch=3,
        now_ms=0,
    )
    elapsed = time.perf_counter() - start
    assert receipt is not None
    assert receipt.batches == "kept"
    log.truncate_to(cut)
    log.delete()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--tail-batches", type=int, default=3)
    parser.add_argument(
        "--large-mib",
        type=int,
        nargs="*",
        default=[4, 16, QUARANTINE_MAX_COPY_BYTES_DEFAULT // (1024 * 1024)],
        help="discard sizes to time (default: up to --quarantine-max-copy-bytes' default)",
    )
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: tmp)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        root = Path(tmp)
        log = open_log(root / "bench-0")
        quarantine = Quarantine(root, max_bytes=256 * 1024 * 1024)
        plain: list[float] = []
        receipted: list[float] = []
        for _ in range(4):  # alternate, so both sides see the same disk and cache state
            plain += truncate_tails(log, None, rounds=args.rounds // 4, batches=args.tail_batches)
            receipted += truncate_tails(
                log, quarantine, rounds=args.rounds // 4, batches=args.tail_batches
            )
        log.delete()
        large = {mib: large_discard(root / f"large{mib}-0", mib) for mib in args.large_mib}
    without, with_receipt = statistics.median(plain), statistics.median(receipted)
    print(
        f"quarantine_bench: truncating a tail of {args.tail_batches} batches of "
        f"{BATCH_BYTES} B, {len(plain)} times each (median, p90)"
    )
    for name, times in (("truncation alone", plain), ("receipt + truncation", receipted)):
        p90 = statistics.quantiles(times, n=10)[-1]
        print(f"  {name:22} {statistics.median(times) * 1e3:8.3f} ms  {p90 * 1e3:8.3f} ms")
    print(f"  ratio (with / without) {with_receipt / without:8.2f}")
    for mib, seconds in large.items():
        print(
            f"  keeping a {mib:>3} MiB discard: {seconds * 1e3:8.1f} ms "
            f"({mib / seconds:6.0f} MiB/s, copy + fsync)"
        )


if __name__ == "__main__":
    main()
