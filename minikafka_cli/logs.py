"""`minikafka log ...`: offline tools over a broker's data directory (`dump`, `lost`)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click
import msgspec

from minikafka_cli.common import (
    CONTEXT_SETTINGS,
    fail,
)

if TYPE_CHECKING:
    from broker.log.loss_receipt import DiscardedRecord, StoredReceipt


@click.group(context_settings=CONTEXT_SETTINGS)
def log() -> None:
    """Inspect on-disk partition logs."""


@log.command("dump", context_settings=CONTEXT_SETTINGS)
@click.argument("path", type=click.Path(exists=True))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per batch.")
def log_dump(path: str, as_json: bool) -> None:
    """Print one line per batch of a partition directory or .log file (like kafka-dump-log.sh).

    Exits with status 1 if any batch is invalid.
    """

    from broker.log.dump import dump_log, format_dump_line
    from broker.log.segment import LOG_SUFFIX

    where = Path(path)
    if where.is_dir() and not any(p.suffix == LOG_SUFFIX for p in where.iterdir()):
        fail(
            f"{where} holds no {LOG_SUFFIX} segment files: give a partition directory "
            f"(DATA_DIR/TOPIC-PARTITION) or a {LOG_SUFFIX} file"
        )
    invalid = 0
    try:
        for line in dump_log(where):
            invalid += 0 if line.valid else 1
            click.echo(msgspec.json.encode(line).decode() if as_json else format_dump_line(line))
    except ValueError as exc:  # neither a partition directory nor a .log file
        fail(str(exc))
    if invalid:
        raise SystemExit(1)


@log.command("lost", context_settings=CONTEXT_SETTINGS)
@click.argument("path", type=click.Path(exists=True, file_okay=False))
@click.option(
    "--print-records",
    is_flag=True,
    help="After each receipt, its discarded batches (as `log dump` prints them) and records.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="One JSON object per receipt (records' key and value base64-encoded).",
)
def log_lost(path: str, print_records: bool, as_json: bool) -> None:
    """List the loss receipts of a broker data directory or one partition directory.

    A broker writes a receipt, and keeps the discarded batches while they fit its
    --quarantine-max-bytes, before every truncation of its log (a divergence after a leader
    change, an unclean election, an out-of-range reset). One line per receipt, oldest first
    per partition; `belowHighWatermark` counts records this replica knew were committed.
    Exits with status 1 if a receipt cannot be read or its kept batches are missing or
    invalid.
    """
    from broker.log.loss_receipt import quarantine_dirs, read_receipts

    try:
        directories = quarantine_dirs(Path(path))
    except ValueError as exc:
        fail(str(exc))
    problems = 0
    listed = 0
    for directory in directories:
        receipts, unreadable = read_receipts(directory)
        for problem in unreadable:
            click.echo(f"Error: {problem}", err=True)
        problems += len(unreadable)
        for stored in receipts:
            listed += 1
            problems += _print_receipt(stored, print_records=print_records, as_json=as_json)
    if not listed and not problems and not as_json:
        click.echo("no loss receipts")
    if problems:
        raise SystemExit(1)


def _print_receipt(stored: StoredReceipt, *, print_records: bool, as_json: bool) -> int:
    """Print one receipt (and its records); returns how many problems were found."""
    from broker.log.dump import dump_batches, format_dump_line
    from broker.log.loss_receipt import (
        check_batches,
        format_receipt,
        quarantined_records,
        read_batches,
    )
    from minikafka.record_batch import CorruptBatchError

    problem = check_batches(stored)
    name = Path(stored.path).name
    batches = (
        list(dump_batches(name, read_batches(stored)))
        if print_records and stored.has_batches
        else []
    )
    records: list[DiscardedRecord] = []
    if print_records and stored.has_batches and problem is None:
        try:
            records = list(quarantined_records(stored))
        except CorruptBatchError as exc:
            problem = str(exc)
    if as_json:
        entry: dict[str, object] = {
            "receipt": stored.receipt,
            "path": stored.path,
            "state": "pending" if stored.pending else "confirmed",
            "problem": problem,
        }
        if print_records:
            entry["batches"] = batches
            entry["records"] = records
        click.echo(msgspec.json.encode(entry).decode())
    else:
        click.echo(format_receipt(stored) + (f" problem: {problem}" if problem else ""))
        for line in batches:
            click.echo("  " + format_dump_line(line))
        for record in records:
            click.echo("  " + _format_record(record))
    return 0 if problem is None else 1


def _format_record(record: DiscardedRecord) -> str:
    """`| offset: ...` as kafka-dump-log.sh --print-data-log prints a record."""

    def text(data: bytes | None) -> str:
        return "null" if data is None else data.decode("utf-8", errors="backslashreplace")

    header_keys = ",".join(key for key, _ in record.headers or [])
    return (
        f"| offset: {record.offset} leaderEpoch: {record.leader_epoch} "
        f"timestamp: {record.timestamp_ms} "
        f"keySize: {-1 if record.key is None else len(record.key)} "
        f"valueSize: {-1 if record.value is None else len(record.value)} "
        f"headerKeys: [{header_keys}] key: {text(record.key)} payload: {text(record.value)}"
    )
