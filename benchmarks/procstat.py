"""CPU seconds of processes read from /proc/PID/stat (psutil-free), per process."""

from __future__ import annotations

import os

#: Clock ticks per second for utime/stime in /proc/PID/stat.
CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def parse_cpu_ticks(stat_line: str) -> int:
    """utime + stime (fields 14 and 15) of one /proc/PID/stat line, in clock ticks.

    The command name (field 2) is in parentheses and may hold spaces, so fields are
    counted from the last ')'.
    """
    close = stat_line.rfind(")")
    if close < 0:
        raise ValueError(f"not a /proc/PID/stat line: {stat_line[:80]!r}")
    rest = stat_line[close + 2 :].split()
    # rest[0] is field 3 (state); utime is field 14 -> rest[11], stime field 15 -> rest[12]
    return int(rest[11]) + int(rest[12])


def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) used so far by `pid`; 0.0 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return parse_cpu_ticks(handle.read()) / CLOCK_TICKS_PER_S
    except (FileNotFoundError, ProcessLookupError):
        return 0.0


def sample(pids: dict[str, int]) -> dict[str, float]:
    """CPU seconds of each named process now."""
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds each process used between two samples."""
    return {name: max(after.get(name, 0.0) - start, 0.0) for name, start in before.items()}
