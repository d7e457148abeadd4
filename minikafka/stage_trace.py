"""Stage timestamps of the produce -> replicate -> commit path, for the benchmark's breakdown.

Off unless the environment variable `MINIKAFKA_STAGE_TRACE` names a directory when the
process starts: then `TRACE` is a `StageTrace` and the broker's data path (produce,
follower fetches on the leader, the follower fetcher, high-watermark advances) records
one line per event. When off `TRACE` is None and every call site costs one `is not None`
test. Used by `benchmarks.breakdown`; not a monitoring interface (see docs/metrics.md).

A line is `<time.time_ns()> <event> <topic> <partition> <a> <b> <c>`; the wall clock is
the one the benchmark's records carry, and all processes run on one machine. Events:

    append  topic p first_offset end_offset received_ns   leader appended a produce
    hw      topic p high_watermark 0 0                    leader's HW advanced
    resp    topic p end_offset 0 0                        leader answers an acks=all wait
    ffetch  topic p replica_id fetch_offset 0             leader got a follower fetch
    fsend   topic p replica_id fetch_offset 0             leader answers it with records
    frecv   topic p broker_id first_offset 0              follower received records
    fapp    topic p broker_id first_offset end_offset     follower appended them

Lines are buffered (at most `FLUSH_EVERY_LINES`, or `FLUSH_EVERY_S` seconds old at the
next event) and appended to `<directory>/<pid>.trace`; this file work happens on the
broker's loop, which is why it is a benchmark-only switch.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Final

ENV: Final = "MINIKAFKA_STAGE_TRACE"
FLUSH_EVERY_LINES: Final = 512
FLUSH_EVERY_S: Final = 0.5


class StageTrace:
    """Buffered writer of stage events for one process."""

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{os.getpid()}.trace"
        self._lines: list[str] = []
        self._flushed_at = time.monotonic()

    @staticmethod
    def now_ns() -> int:
        return time.time_ns()

    def record(
        self,
        event: str,
        topic: str,
        partition: int,
        a: int,
        b: int = 0,
        c: int = 0,
        *,
        at_ns: int | None = None,
    ) -> None:
        """One event line, stamped now (or at `at_ns`, a `now_ns()` taken earlier)."""
        stamp_ns = time.time_ns() if at_ns is None else at_ns
        self._lines.append(f"{stamp_ns} {event} {topic} {partition} {a} {b} {c}\n")
        if (
            len(self._lines) >= FLUSH_EVERY_LINES
            or time.monotonic() - self._flushed_at >= FLUSH_EVERY_S
        ):
            self.flush()

    def flush(self) -> None:
        self._flushed_at = time.monotonic()
        if not self._lines:
            return
        with self.path.open("a") as out:
            out.writelines(self._lines)
        self._lines.clear()


def _from_environment() -> StageTrace | None:
    directory = os.environ.get(ENV)
    return StageTrace(Path(directory)) if directory else None


#: The process's trace, None (the default) when stage tracing is off.
TRACE: StageTrace | None = _from_environment()
