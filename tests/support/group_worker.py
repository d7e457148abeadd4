"""A consumer-group member as its own process, logging what it does (group fault suite).

Run as `python -m tests.support.group_worker --bootstrap A,B --group G --topic T --log F
--name w1`. It joins group G subscribed to T (manual commits, `auto_offset_reset`
earliest) and loops: poll, log every record it processed, commit the positions of what it
owns. Every line of `--log` is one JSON event with the worker's `name`, `pid`, member id
and member epoch, the monotonic clock (`mono_ns`, CLOCK_MONOTONIC: comparable between the
processes of one machine) and the wall clock (`wall_ms`):

- `start`, `stop` (graceful: SIGTERM leaves the group first);
- `assigned` / `revoked` / `lost` with `partitions` ([topic, partition] pairs), from the
  rebalance listener, i.e. when the member takes or gives up partitions;
- `record` with `tp`, `offset`, `value`: one record processed;
- `commit` with `type` invoke / ok / fail (refused: `CommitFailedError`) / info (outcome
  unknown: a timeout, no coordinator) and `offsets` {"topic/partition": offset}.

The member id and epoch, and the positions a commit sends, are read from the consumer's
group member (`AsyncConsumer._group`): the log must show exactly what was committed, and
the public API does not expose the member epoch.

Each line is one `write(2)` on an O_APPEND descriptor, so a kill -9 loses no line already
logged (the last one may be cut short: readers skip it). The event loop runs the listener
callbacks and the processing, so the log's order is the member's real order.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Sequence
from typing import Any

from client.consumer import AsyncConsumer
from client.errors import CommitFailedError, NoBrokersAvailable
from client.group import ConsumerRebalanceListener
from client.records import TopicPartition

#: Upper bound on one poll's wait; the loop checks for SIGTERM between polls.
POLL_TIMEOUT_MS = 200
#: How long a worker keeps trying to reach a broker at its start.
START_TIMEOUT_S = 30.0


class EventLog:
    """The worker's JSON-lines log (see the module docstring)."""

    def __init__(self, path: str, name: str) -> None:
        self.name = name
        self.pid = os.getpid()
        self.member_id = ""
        self.epoch = 0
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, event: str, **fields: Any) -> None:
        line = {
            "event": event,
            "name": self.name,
            "pid": self.pid,
            "member_id": self.member_id,
            "epoch": self.epoch,
            "mono_ns": time.monotonic_ns(),
            "wall_ms": time.time_ns() // 1_000_000,
            **fields,
        }
        os.write(self._fd, (json.dumps(line, sort_keys=True) + "\n").encode())

    def close(self) -> None:
        os.close(self._fd)


def _pairs(partitions: set[TopicPartition]) -> list[list[Any]]:
    return [[tp.topic, tp.partition] for tp in sorted(partitions)]


class LoggingListener(ConsumerRebalanceListener):
    def __init__(self, log: EventLog, refresh: Any) -> None:
        self.log = log
        self.refresh = refresh

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.refresh()
        self.log.write("assigned", partitions=_pairs(assigned))

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.refresh()
        self.log.write("revoked", partitions=_pairs(revoked))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        # Logged before the member forgets its epoch: the epoch it was fenced at.
        self.log.write("lost", partitions=_pairs(lost))
        self.refresh()


async def run(args: argparse.Namespace) -> None:
    log = EventLog(args.log, args.name)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    consumer = await started(args, stop)
    if consumer is None:
        log.write("stop")
        log.close()
        return

    def refresh() -> None:
        member = consumer._group
        if member is not None:
            log.member_id, log.epoch = member.member_id, member.epoch

    refresh()
    log.write("start")
    consumer.subscribe([args.topic], listener=LoggingListener(log, refresh))
    try:
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=POLL_TIMEOUT_MS)
            refresh()
            for tp, records in sorted(batches.items()):
                for record in records:
                    value = int(record.value) if record.value is not None else None
                    log.write(
                        "record", tp=[tp.topic, tp.partition], offset=record.offset, value=value
                    )
            if batches:
                await commit(consumer, log, refresh)
    finally:
        await consumer.stop()
        refresh()
        log.write("stop")
        log.close()


async def started(args: argparse.Namespace, stop: asyncio.Event) -> AsyncConsumer | None:
    """A started consumer; tried again while no broker answers (a loaded machine or a
    broker being restarted), for at most `START_TIMEOUT_S`. None: stopped meanwhile."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not stop.is_set():
        consumer = new_consumer(args)
        try:
            await consumer.start()
            return consumer
        except NoBrokersAvailable:  # `start` closed what it had opened
            if time.monotonic() > deadline:
                raise
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), timeout=0.2)
    return None


def new_consumer(args: argparse.Namespace) -> AsyncConsumer:
    return AsyncConsumer(
        bootstrap_servers=args.bootstrap.split(","),
        group_id=args.group,
        client_id=args.name,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=args.session_timeout_ms,
        max_poll_interval_ms=args.max_poll_interval_ms,
        fetch_max_wait_ms=100,
        request_timeout_ms=args.request_timeout_ms,
        retry_backoff_ms=100,
        **json.loads(args.client_config),
    )


async def commit(consumer: AsyncConsumer, log: EventLog, refresh: Any) -> None:
    """Commit the position of every owned partition, logged as invoke and outcome."""
    member = consumer._group
    assert member is not None
    offsets = member.offsets.positions(member.owned)
    if not offsets:
        return
    shown = {f"{tp.topic}/{tp.partition}": meta.offset for tp, meta in sorted(offsets.items())}
    log.write("commit", type="invoke", offsets=shown)
    try:
        await consumer.commit(offsets)
    except CommitFailedError as exc:
        refresh()
        log.write("commit", type="fail", offsets=shown, error=str(exc))
        return
    except Exception as exc:  # a timeout, no coordinator: it may or may not have landed
        refresh()
        log.write("commit", type="info", offsets=shown, error=repr(exc))
        return
    refresh()
    log.write("commit", type="ok", offsets=shown)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else "")
    parser.add_argument("--bootstrap", required=True, help="comma-separated broker addresses")
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--log", required=True, help="the JSON-lines event log (appended)")
    parser.add_argument("--name", required=True, help="the worker's name in the log")
    parser.add_argument("--session-timeout-ms", type=int, default=3000)
    parser.add_argument("--max-poll-interval-ms", type=int, default=10_000)
    parser.add_argument("--request-timeout-ms", type=int, default=3000)
    parser.add_argument("--client-config", default="{}", help="extra client settings (JSON)")
    asyncio.run(run(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
