"""The history checker: pure analyses of a recorded history (reference/reliability.md §9).

`check(ops)` reports, per partition key: lost writes, values unseen after the final
polls, duplicates, inconsistent offsets (two values at one offset), values read that
were never sent (`unexpected`) or whose send definitely failed (`G1a`), reads above the
high watermark, poll skips and non-monotonic polls (across and inside ops) and
non-monotonic sends, and latest offsets (ListOffsets LATEST answers, `end-offset` ops)
that went backwards for one client (KIP-207). Writes acknowledged with acks=0/1 that
went missing land in the informational `expected-loss` bucket; a scenario whose fault
may legitimately lose data (an unclean election) names the anomaly types it expects, and
they are reported but do not make the history invalid.

`check_receipts(ops, discarded)` cross-checks the acknowledged writes reported lost
against the records the brokers' loss receipts say they discarded (`tests/chaos/receipts.py`
reads them): exactly those, each at its acknowledged offset.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import msgspec

from tests.chaos.history import Op

MAX_EXAMPLES = 32

#: Anomaly types, in report order.
ANOMALY_TYPES = (
    "lost-write",
    "unseen",
    "vanished",
    "duplicate",
    "inconsistent-offsets",
    "unexpected",
    "G1a",
    "poll-above-hw",
    "poll-skip",
    "nonmonotonic-poll",
    "int-poll-skip",
    "int-nonmonotonic-poll",
    "nonmonotonic-send",
    "latest-offset-backwards",
    "expected-loss",
)
ALWAYS_ALLOWED = frozenset({"expected-loss"})
#: What an unclean leader election may do (I9): lose acknowledged writes, and so reuse
#: their offsets and make consumers that read them jump.
UNCLEAN_EXPECTED = frozenset(
    {
        "lost-write",
        "unseen",
        "vanished",
        "inconsistent-offsets",
        "poll-skip",
        "nonmonotonic-poll",
        "nonmonotonic-send",
        "duplicate",
        "latest-offset-backwards",
    }
)
#: The op of one ListOffsets(LATEST) answer: value [key, offset] when ok.
LATEST_OFFSET_OP = "end-offset"


class Order(msgspec.Struct, kw_only=True):
    """The version order of one key: every offset anyone observed, in offset order."""

    offsets: list[int]
    log: list[set[int]]  # log[i] = values seen at offsets[i]
    by_index: list[int]  # one representative value per index
    by_value: dict[int, int]  # value -> first index


class CheckResult(msgspec.Struct, frozen=True, kw_only=True):
    valid: bool
    error_types: list[str]
    bad_error_types: list[str]
    expected_types: list[str]
    counts: dict[str, int]
    anomalies: dict[str, list[dict[str, Any]]]
    stats: dict[str, int]

    def to_json(self) -> str:
        return msgspec.json.encode(self).decode()

    def to_text(self) -> str:
        lines = [
            f"history check: {'VALID' if self.valid else 'INVALID'}",
            "stats: " + ", ".join(f"{k}={v}" for k, v in sorted(self.stats.items())),
        ]
        if self.bad_error_types:
            lines.append("anomalies: " + ", ".join(self.bad_error_types))
        if self.expected_types:
            lines.append("expected (labelled, allowed here): " + ", ".join(self.expected_types))
        for kind in self.error_types:
            label = " (expected)" if kind in self.expected_types else ""
            lines.append(f"-- {kind}{label}: {self.counts[kind]}")
            for example in self.anomalies[kind][:8]:
                lines.append("   " + json.dumps(example, sort_keys=True))
        return "\n".join(lines)

    def write(self, directory: Path, name: str = "results") -> tuple[Path, Path]:
        directory.mkdir(parents=True, exist_ok=True)
        json_path = directory / f"{name}.json"
        text_path = directory / f"{name}.txt"
        json_path.write_text(self.to_json())
        text_path.write_text(self.to_text() + "\n")
        return json_path, text_path


# ---- history normalisation ------------------------------------------------------------


def _sent_value(mop: Sequence[Any]) -> tuple[str, int | None, int]:
    """(key, offset or None, value) of a ["send", key, v | [offset, v]] micro-op."""
    key, payload = str(mop[1]), mop[2]
    if isinstance(payload, list):
        offset = payload[0] if payload[0] is None else int(payload[0])
        return key, offset, int(payload[1])
    return key, None, int(payload)


def _mops(op: Op, kind: str) -> list[Sequence[Any]]:
    value = op.get("value")
    if not isinstance(value, list):
        return []
    return [m for m in value if isinstance(m, list) and m and m[0] == kind]


def _poll_pairs(op: Op) -> Iterable[tuple[str, list[tuple[int, int]]]]:
    for mop in _mops(op, "poll"):
        for key, pairs in mop[1].items():
            yield str(key), [(int(o), int(v)) for o, v in pairs]


def completions(ops: Sequence[Op]) -> list[Op]:
    """Completion ops; an invoke that never completed (a crashed client) counts as info."""
    pending: dict[Any, Op] = {}
    out: list[Op] = []
    for op in ops:
        if op.get("f") in ("nemesis", "meta"):
            continue
        if op["type"] == "invoke":
            pending[op["process"]] = op
        else:
            pending.pop(op["process"], None)
            out.append(op)
    for process, op in pending.items():
        out.append({**op, "type": "info", "unfinished": True, "process": process})
    return out


# ---- analyses (each pure) -------------------------------------------------------------


def reads_of(ops: Sequence[Op], *, final_only: bool = False) -> dict[str, set[int]]:
    reads: dict[str, set[int]] = defaultdict(set)
    for op in ops:
        if op["type"] == "ok" and op.get("f") == "poll" and (op.get("final") or not final_only):
            for key, pairs in _poll_pairs(op):
                reads[key].update(v for _, v in pairs)
    return reads


def writers_of(ops: Sequence[Op]) -> dict[tuple[str, int], Op]:
    writers: dict[tuple[str, int], Op] = {}
    for op in ops:
        if op.get("f") == "send" and op["type"] != "invoke":
            for mop in _mops(op, "send"):
                key, _, value = _sent_value(mop)
                writers[(key, value)] = op
    return writers


def attempted_values(ops: Sequence[Op]) -> dict[str, set[int]]:
    attempts: dict[str, set[int]] = defaultdict(set)
    for op in ops:
        if op.get("f") == "send":
            for mop in _mops(op, "send"):
                key, _, value = _sent_value(mop)
                attempts[key].add(value)
    return attempts


def must_have_committed(op: Op, reads: dict[str, set[int]]) -> bool:
    if op["type"] == "ok":
        return True
    if op["type"] != "info":
        return False
    return any(_sent_value(m)[2] in reads.get(_sent_value(m)[0], ()) for m in _mops(op, "send"))


def version_orders(
    ops: Sequence[Op], reads: dict[str, set[int]]
) -> tuple[dict[str, Order], list[dict[str, Any]]]:
    logs: dict[str, dict[int, set[int]]] = defaultdict(lambda: defaultdict(set))
    for op in ops:
        if op.get("f") == "send" and must_have_committed(op, reads):
            for mop in _mops(op, "send"):
                key, offset, value = _sent_value(mop)
                if offset is not None:
                    logs[key][offset].add(value)
        elif op.get("f") == "poll" and op["type"] == "ok":
            for key, pairs in _poll_pairs(op):
                for offset, value in pairs:
                    logs[key][offset].add(value)
    orders: dict[str, Order] = {}
    inconsistent: list[dict[str, Any]] = []
    for key, log in sorted(logs.items()):
        offsets = sorted(log)
        entries = [log[o] for o in offsets]
        for offset, values in zip(offsets, entries, strict=True):
            if len(values) > 1:
                inconsistent.append({"key": key, "offset": offset, "values": sorted(values)})
        by_value: dict[int, int] = {}
        for index, values in enumerate(entries):
            for value in sorted(values):
                by_value.setdefault(value, index)
        orders[key] = Order(
            offsets=offsets, log=entries, by_index=[min(v) for v in entries], by_value=by_value
        )
    return orders, inconsistent


def duplicates(orders: dict[str, Order]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for key, order in orders.items():
        seen: dict[int, list[int]] = defaultdict(list)
        for index, values in enumerate(order.log):
            for value in values:
                seen[value].append(order.offsets[index])
        out += [
            {"key": key, "value": v, "offsets": offs}
            for v, offs in sorted(seen.items())
            if len(offs) > 1
        ]
    return out


def lost_writes(
    orders: dict[str, Order],
    reads: dict[str, set[int]],
    writers: dict[tuple[str, int], Op],
) -> list[dict[str, Any]]:
    """Committed values below the highest index some reader reached, but never read."""
    lost: list[dict[str, Any]] = []
    for key, read_values in sorted(reads.items()):
        order = orders.get(key)
        if order is None:
            continue
        first: dict[int, int] = {}
        last: dict[int, int] = {}
        for index, values in enumerate(order.log):
            for value in values:
                first.setdefault(value, index)
                last[value] = index
        bound = max((first[v] for v in read_values if v in first), default=-1)
        for value in sorted(v for v, i in last.items() if i <= bound and v not in read_values):
            writer = writers.get((key, value))
            if writer is not None and must_have_committed(writer, reads):
                lost.append(
                    {
                        "key": key,
                        "value": value,
                        "offset": order.offsets[first[value]],
                        "max_read_offset": order.offsets[bound],
                        "writer": writer["index"],
                        "acks": writer.get("acks", "all"),
                    }
                )
    return lost


def unseen(ops: Sequence[Op], reads: dict[str, set[int]]) -> list[dict[str, Any]]:
    """Acknowledged values missing from `reads` (the final polls' reads, when the history
    has final polls: a value read once and gone by the end is unseen too)."""
    out: list[dict[str, Any]] = []
    for op in ops:
        if op.get("f") == "send" and op["type"] == "ok":
            for mop in _mops(op, "send"):
                key, offset, value = _sent_value(mop)
                if value not in reads.get(key, ()):
                    out.append(
                        {
                            "key": key,
                            "value": value,
                            "offset": offset,
                            "writer": op["index"],
                            "acks": op.get("acks", "all"),
                        }
                    )
    return out


def vanished(reads: dict[str, set[int]], final: dict[str, set[int]]) -> list[dict[str, Any]]:
    """Values some poll returned (exposed to a consumer) that the final polls no longer
    return: exposed records must never disappear (I5)."""
    return [
        {"key": key, "value": value}
        for key, values in sorted(reads.items())
        for value in sorted(values - final.get(key, set()))
    ]


def aborted_and_unexpected_reads(
    reads: dict[str, set[int]],
    writers: dict[tuple[str, int], Op],
    attempts: dict[str, set[int]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(G1a: reads of values whose send definitely failed, reads of values never sent)."""
    g1a: list[dict[str, Any]] = []
    unexpected: list[dict[str, Any]] = []
    for key, values in sorted(reads.items()):
        for value in sorted(values):
            if value not in attempts.get(key, ()):
                unexpected.append({"key": key, "value": value})
                continue
            writer = writers.get((key, value))
            if writer is not None and writer["type"] == "fail":
                g1a.append({"key": key, "value": value, "writer": writer["index"]})
    return g1a, unexpected


def reads_above_hw(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """Polls that returned an offset at or above the high watermark of the same response."""
    out: list[dict[str, Any]] = []
    for op in ops:
        hws = op.get("hw")
        if op.get("f") != "poll" or op["type"] != "ok" or not isinstance(hws, dict):
            continue
        for key, pairs in _poll_pairs(op):
            hw = hws.get(key)
            if hw is None:
                continue
            out += [
                {"key": key, "offset": o, "value": v, "hw": hw, "op": op["index"]}
                for o, v in pairs
                if o >= hw
            ]
    return out


def poll_order(ops: Sequence[Op], orders: dict[str, Order]) -> dict[str, list[dict[str, Any]]]:
    """poll-skip / nonmonotonic-poll across a process's polls, and int-* inside one poll."""
    out: dict[str, list[dict[str, Any]]] = {
        "poll-skip": [],
        "nonmonotonic-poll": [],
        "int-poll-skip": [],
        "int-nonmonotonic-poll": [],
    }
    last: dict[Any, dict[str, int]] = defaultdict(dict)

    def compare(kind: str, key: str, before: int, after: int, op: Op) -> None:
        order = orders[key]
        i, j = order.by_value[before], order.by_value[after]
        if j - i > 1:
            out[("int-" if kind == "int" else "") + "poll-skip"].append(
                {
                    "key": key,
                    "op": op["index"],
                    "process": op["process"],
                    "from": [order.offsets[i], before],
                    "to": [order.offsets[j], after],
                    "skipped": order.by_index[i + 1 : j][:MAX_EXAMPLES],
                }
            )
        elif j - i < 1:
            out[("int-" if kind == "int" else "") + "nonmonotonic-poll"].append(
                {
                    "key": key,
                    "op": op["index"],
                    "process": op["process"],
                    "from": [order.offsets[i], before],
                    "to": [order.offsets[j], after],
                }
            )

    for op in ops:
        if op["type"] != "ok":
            continue
        state = last[op["process"]]
        if op.get("f") in ("assign", "subscribe"):
            kept = {str(k) for k in op.get("value") or []}
            for key in list(state):
                if key not in kept:
                    del state[key]
        elif op.get("f") == "seek":
            state.clear()
        elif op.get("f") == "poll":
            for key, pairs in _poll_pairs(op):
                if not pairs:
                    continue
                if key in state:
                    compare("across", key, state[key], pairs[0][1], op)
                for (_, a), (_, b) in pairwise(pairs):
                    compare("int", key, a, b, op)
                state[key] = pairs[-1][1]
    return out


def nonmonotonic_sends(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """Per process and key, acknowledged offsets must strictly increase (I13)."""
    out: list[dict[str, Any]] = []
    last: dict[tuple[Any, str], tuple[int, int]] = {}
    for op in ops:
        if op.get("f") != "send" or op["type"] != "ok":
            continue
        for mop in _mops(op, "send"):
            key, offset, value = _sent_value(mop)
            if offset is None:
                continue
            previous = last.get((op["process"], key))
            if previous is not None and offset <= previous[0]:
                out.append(
                    {
                        "key": key,
                        "process": op["process"],
                        "op": op["index"],
                        "from": list(previous),
                        "to": [offset, value],
                    }
                )
            last[(op["process"], key)] = (offset, value)
    return out


def latest_offset_regressions(ops: Sequence[Op]) -> list[dict[str, Any]]:
    """Per process and key, the latest offsets (`end-offset` answers, in history order)
    never decrease (KIP-207): a client told offset N is never told less afterwards."""
    out: list[dict[str, Any]] = []
    highest: dict[tuple[Any, str], tuple[int, int, Any]] = {}
    for op in ops:
        if op.get("f") != LATEST_OFFSET_OP or op["type"] != "ok":
            continue
        key, offset = op["value"]
        before = highest.get((op["process"], key))
        if before is not None and offset < before[0]:
            out.append(
                {
                    "key": key,
                    "process": op["process"],
                    "op": op["index"],
                    "offset": offset,
                    "leader_epoch": op.get("leader_epoch"),
                    "broker": op.get("broker"),
                    "highest_before": before[0],
                    "highest_in_epoch": before[1],
                    "highest_from_broker": before[2],
                }
            )
        if before is None or offset > before[0]:
            highest[(op["process"], key)] = (offset, op.get("leader_epoch", -1), op.get("broker"))
    return out


# ---- verdict --------------------------------------------------------------------------


def _final_polls_ran(op: Op) -> bool:
    """The marker `Workload.final_polls` records before reading. It counts even when the
    final polls returned nothing: an empty final log means every acknowledged value is
    unseen, not that the earlier reads stand in for the final ones."""
    value = op.get("value")
    return op.get("f") == "meta" and isinstance(value, dict) and "final_poll_targets" in value


def check(
    history: Sequence[Op],
    *,
    expected: Iterable[str] = (),
    strict: bool = False,
) -> CheckResult:
    """Run every analysis over `history`.

    Polls marked `"final": true` are the final polls (§9.6): `unseen` and `vanished` are
    judged against what they read (nothing, when the final polls ran and found every
    partition empty). `expected` names anomaly types the scenario's fault
    may legitimately cause (they are reported and labelled, and do not invalidate the
    history). Unless `strict`, missing writes that were acknowledged with acks=0 or 1 are
    moved to `expected-loss`.
    """
    ops = completions(history)
    reads = reads_of(ops)
    has_final = any(op.get("final") for op in ops) or any(_final_polls_ran(op) for op in history)
    final = reads_of(ops, final_only=True) if has_final else reads
    writers = writers_of(ops)
    orders, inconsistent = version_orders(ops, reads)
    g1a, unexpected = aborted_and_unexpected_reads(reads, writers, attempted_values(ops))
    found: dict[str, list[dict[str, Any]]] = {
        "lost-write": lost_writes(orders, reads, writers),
        "unseen": unseen(ops, final),
        "vanished": vanished(reads, final) if has_final else [],
        "duplicate": duplicates(orders),
        "inconsistent-offsets": inconsistent,
        "unexpected": unexpected,
        "G1a": g1a,
        "poll-above-hw": reads_above_hw(ops),
        **poll_order(ops, orders),
        "nonmonotonic-send": nonmonotonic_sends(ops),
        "latest-offset-backwards": latest_offset_regressions(ops),
        "expected-loss": [],
    }
    if not strict:
        for kind in ("lost-write", "unseen"):
            relaxed = [a for a in found[kind] if str(a.get("acks", "all")) not in ("all", "-1")]
            found[kind] = [a for a in found[kind] if a not in relaxed]
            found["expected-loss"] += [{**a, "was": kind} for a in relaxed]
    error_types = [kind for kind in ANOMALY_TYPES if found[kind]]
    allowed = ALWAYS_ALLOWED | set(expected)
    sends = [op for op in ops if op.get("f") == "send"]
    stats = {
        "ops": len(history),
        "keys": len(orders),
        "sends-ok": sum(op["type"] == "ok" for op in sends),
        "sends-fail": sum(op["type"] == "fail" for op in sends),
        "sends-info": sum(op["type"] == "info" for op in sends),
        "polls-ok": sum(op["type"] == "ok" and op.get("f") == "poll" for op in ops),
        "values-read": sum(len(v) for v in reads.values()),
        "nemesis": sum(op.get("f") == "nemesis" for op in history),
    }
    bad = [kind for kind in error_types if kind not in allowed]
    return CheckResult(
        valid=not bad,
        error_types=error_types,
        bad_error_types=bad,
        expected_types=[kind for kind in error_types if kind in allowed],
        counts={kind: len(found[kind]) for kind in error_types},
        anomalies={kind: found[kind][:MAX_EXAMPLES] for kind in error_types},
        stats=stats,
    )


# ---- loss receipts ----------------------------------------------------------------------


class DiscardedValue(msgspec.Struct, frozen=True, kw_only=True):
    """One record found in a broker's loss receipts (its quarantined batches)."""

    key: str
    offset: int
    value: int
    broker: int


class ReceiptCheck(msgspec.Struct, frozen=True, kw_only=True):
    """The checker's lost writes against the brokers' loss receipts.

    `lost`: acknowledged writes the checker reports lost (lost-write, unseen or
    expected-loss), each `[key, acknowledged offset, value]`. Valid when every one of them
    is in a receipt at its acknowledged offset (`missing` empty) and every acknowledged
    write a receipt holds at its acknowledged offset is either reported lost or still
    read there by the final polls (`unexplained` empty: `refetched` counts those, a copy
    discarded by one replica while the record stayed). Receipts may also hold values that
    were never acknowledged (uncommitted tails): counted, allowed. Receipts whose batches
    were not kept make the check inconclusive (`unverifiable`), so invalid.
    """

    valid: bool
    lost: list[list[Any]]
    missing: list[list[Any]]
    unexplained: list[list[Any]]
    refetched: int
    unacknowledged: int
    unverifiable: list[str]

    def to_text(self) -> str:
        lines = [
            f"loss receipts vs checker: {'VALID' if self.valid else 'INVALID'} "
            f"(lost acknowledged {len(self.lost)}, in receipts and refetched {self.refetched}, "
            f"unacknowledged in receipts {self.unacknowledged})"
        ]
        for name, rows in (("missing", self.missing), ("unexplained", self.unexplained)):
            if rows:
                lines.append(f"-- {name}: {len(rows)}")
                lines += ["   " + json.dumps(row) for row in rows[:MAX_EXAMPLES]]
        lines += [f"-- unverifiable: {why}" for why in self.unverifiable[:MAX_EXAMPLES]]
        return "\n".join(lines)


def acknowledged_offsets(ops: Sequence[Op]) -> dict[tuple[str, int], int]:
    """(key, value) -> offset of every acknowledged send that reported one."""
    acked: dict[tuple[str, int], int] = {}
    for op in ops:
        if op.get("f") == "send" and op["type"] == "ok":
            for mop in _mops(op, "send"):
                key, offset, value = _sent_value(mop)
                if offset is not None:
                    acked[(key, value)] = offset
    return acked


def read_pairs(ops: Sequence[Op], *, final_only: bool) -> set[tuple[str, int, int]]:
    """(key, offset, value) read by the polls (the final polls only, if asked)."""
    return {
        (key, offset, value)
        for op in ops
        if op["type"] == "ok" and op.get("f") == "poll" and (op.get("final") or not final_only)
        for key, pairs in _poll_pairs(op)
        for offset, value in pairs
    }


def check_receipts(
    history: Sequence[Op],
    discarded: Iterable[DiscardedValue],
    *,
    unverifiable: Sequence[str] = (),
) -> ReceiptCheck:
    """Cross-check the acknowledged writes the checker reports lost (the same analyses as
    `check`, unabridged) against the records of every broker's loss receipts."""
    ops = completions(history)
    reads = reads_of(ops)
    has_final = any(op.get("final") for op in ops) or any(_final_polls_ran(op) for op in history)
    final = reads_of(ops, final_only=True) if has_final else reads
    orders, _ = version_orders(ops, reads)
    acked = acknowledged_offsets(ops)
    reported = {
        (str(a["key"]), int(a["value"]))
        for a in lost_writes(orders, reads, writers_of(ops)) + unseen(ops, final)
    }
    lost = sorted(
        (key, acked[(key, value)], value) for key, value in reported if (key, value) in acked
    )
    held = {(d.key, d.offset, d.value) for d in discarded}
    in_receipts = {(k, o, v) for k, o, v in held if acked.get((k, v)) == o}
    read_finally = read_pairs(ops, final_only=has_final)
    missing = [list(row) for row in lost if row not in held]
    lost_set = set(lost)
    unexplained = [list(row) for row in sorted(in_receipts - lost_set - read_finally)]
    refetched = len((in_receipts - lost_set) & read_finally)
    unacknowledged = sum(1 for k, _, v in held if (k, v) not in acked)
    return ReceiptCheck(
        valid=not missing and not unexplained and not unverifiable,
        lost=[list(row) for row in lost],
        missing=missing,
        unexplained=unexplained,
        refetched=refetched,
        unacknowledged=unacknowledged,
        unverifiable=list(unverifiable),
    )
