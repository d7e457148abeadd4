"""Jepsen-style operation history: every client op recorded at invoke and at completion.

An op is a JSON-able dict (reference/reliability.md §9.1)::

    {"index": 17, "time": 123, "process": 3, "type": "invoke", "f": "send",
     "value": [["send", "t/2", 3000017]], "acks": "all"}
    {"index": 18, "time": 125, "process": 3, "type": "ok", "f": "send",
     "value": [["send", "t/2", [41, 3000017]]], "acks": "all"}
    {"index": 40, "time": 130, "process": 4, "type": "ok", "f": "poll",
     "value": [["poll", {"t/2": [[40, 2000101], [41, 3000017]]}]], "hw": {"t/2": 42}}

`type` is invoke | ok | fail (definite: the write never happened) | info (indefinite).
Keys are "topic/partition" strings; values are globally unique integers. Nemesis
actions are recorded with process "nemesis" and f "nemesis"; `meta` ops carry the seed
and the schedule so that a failing run can be replayed.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

Op = dict[str, Any]

OP_TYPES = ("invoke", "ok", "fail", "info")


def key_of(topic: str, partition: int) -> str:
    return f"{topic}/{partition}"


class History:
    """Thread-safe, append-only history with one monotonic clock for every client."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ops: list[Op] = []

    def _append(self, op: Op) -> Op:
        with self._lock:
            op["index"] = len(self._ops)
            op["time"] = time.monotonic_ns()
            self._ops.append(op)
        return op

    def invoke(self, process: int | str, f: str, value: Any, **extra: Any) -> Op:
        return self._append({"process": process, "type": "invoke", "f": f, "value": value, **extra})

    def complete(self, invoked: Op, op_type: str, value: Any, **extra: Any) -> Op:
        if op_type not in OP_TYPES[1:]:
            raise ValueError(f"completion type must be ok, fail or info, got {op_type!r}")
        base = {k: v for k, v in invoked.items() if k not in ("index", "time", "type", "value")}
        return self._append({**base, "type": op_type, "value": value, **extra})

    def nemesis(self, action: str, **info: Any) -> Op:
        return self._append(
            {"process": "nemesis", "type": "info", "f": "nemesis", "value": action, **info}
        )

    def meta(self, **info: Any) -> Op:
        return self._append({"process": "meta", "type": "info", "f": "meta", "value": info})

    @property
    def ops(self) -> list[Op]:
        with self._lock:
            return list(self._ops)

    def dump(self, path: Path) -> None:
        write_history(self.ops, path)


def write_history(ops: Iterable[Op], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as out:
        for op in ops:
            out.write(json.dumps(op, sort_keys=True) + "\n")


def load_history(path: Path) -> list[Op]:
    """Read a JSON-lines history; indexes are renumbered if missing."""
    ops: list[Op] = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            op = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not JSON: {exc}") from None
        if not isinstance(op, dict) or op.get("type") not in OP_TYPES:
            raise ValueError(f"{path}:{number}: not an op (needs type in {OP_TYPES})")
        op.setdefault("index", len(ops))
        ops.append(op)
    return ops
