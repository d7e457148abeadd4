"""Storage engine throughput: PartitionLog append + read of 1 KiB batches vs plain os.write.

Run: `python -m benchmarks.storage_bench [--total-mib 64] [--batch-bytes 1024]`. Both
sides write the same bytes to the same directory in the same run (no fsync on either
side, as with the default flush policy), so the ratio is what matters, not the MiB/s.

It also measures, in the same run and on the same record sets, what the leader's batch
validation costs per append (issue 23): framing only (header + CRCs, what a follower
checks and what the leader checked before), the leader's checks (contents and
timestamps, the default) as their homes run them, the leader's checks plus a walk of
every record of uncompressed batches (what Kafka's LogValidator does; off in minikafka),
and the one pass the CreateTime append path runs instead (the copy, every check and the
restamp: `record_batch.check_and_stamp_create_time`), each as a share of the append
path's time.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from broker.log.config import LogConfig
from broker.log.partition_log import (
    PartitionLog,
    validate_leader_record_set,
    validate_record_set,
)
from minikafka.record_batch import LENGTH_PREFIX_SIZE, build_batch, check_and_stamp_create_time

#: Batches handed to one append call (a produce request carries several).
BATCHES_PER_APPEND = 16
#: Interleaved rounds of each side; the best round of each is reported.
ROUNDS = 3
READ_MAX_BYTES = 1024 * 1024


def make_batch(batch_bytes: int) -> bytes:
    probe = build_batch([(0, None, b"", None)])
    value = b"v" * max(batch_bytes - len(probe), 1)
    return build_batch([(int(time.time() * 1000), None, value, None)])


def bench_baseline(directory: Path, payload: bytes, appends: int) -> tuple[float, float, float]:
    """Seconds to os.write `appends` payloads into one file, then read it back in 1 MiB;
    and the CPU seconds of the writes."""
    path = directory / "baseline.bin"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    start = time.perf_counter()
    cpu = time.process_time()
    for _ in range(appends):
        os.write(fd, payload)
    cpu_s = time.process_time() - cpu
    write_s = time.perf_counter() - start
    os.close(fd)
    fd = os.open(path, os.O_RDONLY)
    start = time.perf_counter()
    position = 0
    while chunk := os.pread(fd, READ_MAX_BYTES, position):
        position += len(chunk)
    read_s = time.perf_counter() - start
    os.close(fd)
    path.unlink()
    return write_s, read_s, cpu_s


def bench_log(directory: Path, payload: bytes, appends: int) -> tuple[float, float, float]:
    """Seconds to append `appends` payloads through PartitionLog, then read everything;
    and the CPU seconds of the appends."""
    log = PartitionLog.open(
        directory / "bench-0",
        LogConfig(),
        topic="bench",
        partition=0,
        recovery_point=0,
        log_start_offset=0,
        high_watermark=0,
        clean_shutdown=True,
        now_ms=0,
    )
    now_ms = int(time.time() * 1000)
    start = time.perf_counter()
    cpu = time.process_time()
    for _ in range(appends):
        log.append_as_leader(payload, leader_epoch=1, now_ms=now_ms)
    cpu_s = time.process_time() - cpu
    write_s = time.perf_counter() - start
    start = time.perf_counter()
    offset = 0
    while offset < log.log_end_offset:
        offset = log.read(offset, max_bytes=READ_MAX_BYTES).next_offset
    read_s = time.perf_counter() - start
    log.delete()
    return write_s, read_s, cpu_s


def bench_validation(payload: bytes, appends: int, rounds: int = 3) -> dict[str, float]:
    """Seconds per append of each validation level (best of `rounds`, interleaved)."""
    config = LogConfig()
    now_ms = int(time.time() * 1000)
    window = {
        "max_batch_length": config.max_message_bytes - LENGTH_PREFIX_SIZE,
        "earliest_ms": now_ms - config.timestamp_before_max_ms,
        "latest_ms": now_ms + config.timestamp_after_max_ms,
    }
    if (
        check_and_stamp_create_time(bytearray(payload), first_offset=0, leader_epoch=1, **window)
        is None
    ):
        raise SystemExit("storage_bench: the one-pass leader append refused the payload")
    levels: dict[str, Callable[[], object]] = {
        "framing only (before)": lambda: validate_record_set(payload),
        "leader checks (now)": lambda: validate_leader_record_set(
            payload, config, now_ms=now_ms, log_append_time=False
        ),
        "leader checks + record walk": lambda: validate_leader_record_set(
            payload, config, now_ms=now_ms, log_append_time=False, walk_records=True
        ),
        "one pass: copy, checks, restamp": lambda: check_and_stamp_create_time(
            bytearray(payload), first_offset=0, leader_epoch=1, **window
        ),
    }
    best = dict.fromkeys(levels, float("inf"))
    for _ in range(rounds):
        for name, check in levels.items():
            start = time.perf_counter()
            for _ in range(appends):
                check()
            best[name] = min(best[name], (time.perf_counter() - start) / appends)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--total-mib", type=int, default=64)
    parser.add_argument("--batch-bytes", type=int, default=1024)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: tmp)")
    args = parser.parse_args()
    payload = make_batch(args.batch_bytes) * BATCHES_PER_APPEND
    appends = max(args.total_mib * 1024 * 1024 // len(payload), 1)
    mib = appends * len(payload) / (1024 * 1024)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)
        # Interleaved rounds, best of each side: a shared, loaded machine slows one
        # round or the other, not a whole side.
        per_round = max(appends // ROUNDS, 1)
        base: list[tuple[float, float, float]] = []
        ours: list[tuple[float, float, float]] = []
        for _ in range(ROUNDS):
            base.append(bench_baseline(directory, payload, per_round))
            ours.append(bench_log(directory, payload, per_round))
        base_write = min(w for w, _, _ in base) * ROUNDS
        base_read = min(r for _, r, _ in base) * ROUNDS
        base_cpu = min(c for _, _, c in base) * ROUNDS
        log_write = min(w for w, _, _ in ours) * ROUNDS
        log_read = min(r for _, r, _ in ours) * ROUNDS
        log_cpu = min(c for _, _, c in ours) * ROUNDS
        appends = per_round * ROUNDS
        mib = appends * len(payload) / (1024 * 1024)
        validation = bench_validation(payload, min(appends, 2000))
    print(
        f"storage_bench: {mib:.0f} MiB in {args.batch_bytes} B batches, "
        f"{BATCHES_PER_APPEND} batches per append (best of {ROUNDS} interleaved rounds)"
    )
    print(f"{'':8} {'PartitionLog':>14} {'os.write':>14} {'ratio':>7}")
    for name, mine, theirs in (("append", log_write, base_write), ("read", log_read, base_read)):
        print(f"{name:8} {mib / mine:>9.0f} MiB/s {mib / theirs:>9.0f} MiB/s {theirs / mine:>7.2f}")
    print(
        f"append CPU time (process_time, best round): PartitionLog {log_cpu / appends * 1e6:.1f} "
        f"us, os.write {base_cpu / appends * 1e6:.1f} us per append; ratio {base_cpu / log_cpu:.2f}"
    )
    per_append = log_write / appends
    print(f"validation per append of {len(payload)} B (append path: {per_append * 1e6:.1f} us)")
    for name, seconds in validation.items():
        print(f"  {name:30} {seconds * 1e6:8.1f} us  {seconds / per_append:6.1%} of an append")


if __name__ == "__main__":
    main()
