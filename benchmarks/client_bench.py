"""Client throughput benchmark against a running cluster.

Reports producer records/s and MiB/s for 100 B and 1 KiB records with acks=1 and
acks=all, and consumer records/s reading the 100 B (and 1 KiB) topic back, each with
the client process's CPU seconds per MiB of record payload. Every case writes to its
own fresh topic (single partition, `--replication-factor`, 3 by default).

    python -m benchmarks.client_bench --bootstrap 127.0.0.1:9092 [--records 300000] [--json]
        [--batch-size BYTES]

Start a cluster first, e.g. `minikafka dev --base-port 0 --data-dir /tmp/bench`, and use a
fresh one for numbers you compare: a follower splits its replica-fetch byte budget over
every partition it follows, idle ones included, so old benchmark topics slow the next run
(once, on a busy 2-core box: 1 KiB acks=all fell from ~90 to ~68 MiB/s after 100 idle RF=3
topics were added).

Numbers move +-15-30 % between runs on a 2-core box (reference/performance.md §5):
compare ratios from the same run, not absolute values across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import msgspec

from client import Admin, AsyncConsumer, NewTopic, Producer, TopicPartition

MIB = 1 << 20


class Result(msgspec.Struct, frozen=True, kw_only=True):
    case: str
    records: int
    seconds: float
    records_per_s: float
    mib_per_s: float
    cpu_s_per_mib: float


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def measure(case: str, records: int, record_bytes: int, run: Callable[[], None]) -> Result:
    cpu0, t0 = cpu_seconds(), time.perf_counter()
    run()
    seconds = time.perf_counter() - t0
    cpu = cpu_seconds() - cpu0
    mib = records * record_bytes / MIB
    return Result(
        case=case,
        records=records,
        seconds=round(seconds, 3),
        records_per_s=round(records / seconds),
        mib_per_s=round(mib / seconds, 1),
        cpu_s_per_mib=round(cpu / mib, 4),
    )


def produce(
    bootstrap: str,
    topic: str,
    records: int,
    value: bytes,
    acks: int | str,
    batch_size: int | None = None,
) -> None:
    config: dict[str, Any] = {} if batch_size is None else {"batch_size": batch_size}
    with Producer(bootstrap_servers=bootstrap, acks=acks, linger_ms=5, **config) as producer:
        send = producer.send
        last = None
        for _ in range(records):
            last = send(topic, value)
        producer.flush()
        if last is not None:
            last.result(60)


async def consume_async(bootstrap: str, topic: str, records: int) -> None:
    tp = TopicPartition(topic, 0)
    async with AsyncConsumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 * MIB,
    ) as consumer:
        consumer.assign([tp])
        seen = 0
        deadline = time.monotonic() + 120
        while seen < records and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=1000, max_records=100_000)
            for recs in batch.values():
                seen += len(recs)
        if seen < records:
            raise RuntimeError(f"consumed {seen} of {records} records from {topic}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True, help="HOST:PORT of any broker")
    parser.add_argument("--records", type=int, default=300_000, help="records per 100 B case")
    parser.add_argument("--replication-factor", type=int, default=3)
    parser.add_argument(
        "--batch-size", type=int, default=None, help="producer batch_size (default: the client's)"
    )
    parser.add_argument("--json", action="store_true", help="print JSON lines")
    args = parser.parse_args(argv)
    try:
        import uvloop

        uvloop.install()
    except ImportError:  # pragma: no cover
        pass

    run_id = uuid.uuid4().hex[:8]
    results: list[Result] = []
    produced: dict[int, tuple[str, int]] = {}
    with Admin(args.bootstrap) as admin:
        for size in (100, 1024):
            count = args.records if size == 100 else max(args.records // 5, 1)
            value = b"x" * size
            for acks in (1, "all"):
                topic = f"bench-{run_id}-{size}-acks{acks}"
                admin.create_topics(NewTopic(topic, 1, args.replication_factor))
                case = f"produce {size} B acks={acks} RF={args.replication_factor}"
                results.append(
                    measure(
                        case,
                        count,
                        size,
                        lambda t=topic, c=count, v=value, a=acks: produce(  # type: ignore[misc]
                            args.bootstrap, t, c, v, a, args.batch_size
                        ),
                    )
                )
                produced[size] = (topic, count)
                report(results[-1], as_json=args.json)
        for size, (topic, count) in produced.items():
            results.append(
                measure(
                    f"consume {size} B",
                    count,
                    size,
                    lambda t=topic, c=count: asyncio.run(  # type: ignore[misc]
                        consume_async(args.bootstrap, t, c)
                    ),
                )
            )
            report(results[-1], as_json=args.json)
        for size in (100, 1024):
            for acks in (1, "all"):
                admin.delete_topics(f"bench-{run_id}-{size}-acks{acks}")
    return 0


def report(result: Result, *, as_json: bool) -> None:
    if as_json:
        data: dict[str, Any] = msgspec.to_builtins(result)
        print(json.dumps(data), flush=True)
        return
    print(
        f"{result.case:<32} {result.records:>9} rec  {result.records_per_s:>10,.0f} rec/s  "
        f"{result.mib_per_s:>7.1f} MiB/s  {result.cpu_s_per_mib:.4f} CPU s/MiB",
        flush=True,
    )


if __name__ == "__main__":
    sys.exit(main())
