"""The loss receipts of a fault-suite run: every broker's discarded records, read from the
brokers' data directories, and the checked cross-check against the history checker
(`checker.check_receipts`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pytest

from broker.log.loss_receipt import quarantine_dirs, quarantined_records, read_receipts
from minikafka.record_batch import CorruptBatchError
from tests.chaos.checker import DiscardedValue, ReceiptCheck, check_receipts
from tests.chaos.harness import Run
from tests.chaos.history import key_of


def discarded_values(data_dirs: Mapping[int, Path]) -> tuple[list[DiscardedValue], list[str]]:
    """Every record in every broker's loss receipts, and why any receipt cannot be
    checked (unreadable, batches not kept, a value that is not a workload integer)."""
    values: list[DiscardedValue] = []
    unverifiable: list[str] = []
    for broker, data_dir in sorted(data_dirs.items()):
        if not data_dir.is_dir():
            continue
        for directory in quarantine_dirs(data_dir):
            stored, problems = read_receipts(directory)
            unverifiable += [f"broker {broker}: {problem}" for problem in problems]
            for entry in stored:
                receipt = entry.receipt
                where = f"broker {broker} {entry.path}"
                if not entry.has_batches:
                    unverifiable.append(
                        f"{where}: batches {receipt.batches}, {entry.batches_size} of "
                        f"{receipt.byte_count} bytes there"
                    )
                    continue
                key = key_of(receipt.topic, receipt.partition)
                try:
                    for record in quarantined_records(entry):
                        values.append(
                            DiscardedValue(
                                key=key,
                                offset=record.offset,
                                value=int(record.value or b""),
                                broker=broker,
                            )
                        )
                except (CorruptBatchError, ValueError) as exc:
                    unverifiable.append(f"{where}: {exc}")
    return values, unverifiable


def verify_receipts(run: Run) -> ReceiptCheck:
    """After `converge_and_check`: read every broker's receipts and cross-check them with
    the history; fail the test (with seed and schedule) when they disagree. Leaves
    `receipts.txt` in the run's artifacts."""
    cluster = run.cluster
    assert cluster is not None
    data_dirs = {broker: cluster.root / f"broker-{broker}" for broker in cluster.brokers}
    values, unverifiable = discarded_values(data_dirs)
    result = check_receipts(run.history.ops, values, unverifiable=unverifiable)
    run.artifacts.mkdir(parents=True, exist_ok=True)
    (run.artifacts / "receipts.txt").write_text(result.to_text() + "\n")
    print(result.to_text())
    if not result.valid:
        pytest.fail(run.failure_text(result.to_text()), pytrace=False)
    return result
