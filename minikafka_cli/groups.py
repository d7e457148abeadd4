"""`minikafka consumer-groups` (Kafka's kafka-consumer-groups.sh): list, describe, reset
offsets of, and delete consumer groups."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

import click

from minikafka_cli.common import CONTEXT_SETTINGS, bootstrap_option, config_file_option, fail

if TYPE_CHECKING:
    from client import Admin
    from client.admin import OffsetSpec

DESCRIBE_COLUMNS = (
    "GROUP",
    "TOPIC",
    "PARTITION",
    "CURRENT-OFFSET",
    "LOG-END-OFFSET",
    "LAG",
    "CONSUMER-ID",
    "HOST",
    "CLIENT-ID",
)
RESET_COLUMNS = ("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET")


def table(columns: tuple[str, ...], rows: list[tuple[object, ...]]) -> list[str]:
    """Left-aligned columns, as Kafka's tool prints them."""
    cells = [columns, *[tuple("-" if c is None else str(c) for c in row) for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    return [
        " ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells
    ]


def parse_datetime(value: str) -> int:
    """--to-datetime: Kafka's 'YYYY-MM-DDTHH:mm:SS.sss' (UTC unless an offset is given),
    as ms since the epoch."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is not a date and time: give YYYY-MM-DDTHH:mm:SS.sss",
            param_hint="'--to-datetime'",
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return int(parsed.timestamp() * 1000)


@click.command("consumer-groups", context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.option("--list", "do_list", is_flag=True, help="List every consumer group.")
@click.option("--describe", is_flag=True, help="Describe --group: offsets, lag and owners.")
@click.option("--reset-offsets", is_flag=True, help="Reset --group's offsets of --topic.")
@click.option("--delete", is_flag=True, help="Delete --group (refused while it has members).")
@click.option("--group", "group_id", metavar="GROUP", help="The consumer group.")
@click.option("--topic", "topic_name", metavar="TOPIC", help="--reset-offsets: the topic.")
@click.option("--to-earliest", is_flag=True, help="Reset to each partition's log start.")
@click.option("--to-latest", is_flag=True, help="Reset to each partition's high watermark.")
@click.option("--to-offset", type=click.IntRange(min=0), help="Reset to this offset.")
@click.option(
    "--to-datetime",
    metavar="YYYY-MM-DDTHH:mm:SS.sss",
    help="Reset to the first offset whose record is at or after this time (UTC).",
)
@click.option("--dry-run", is_flag=True, help="Print the new offsets only (the default).")
@click.option("--execute", is_flag=True, help="Commit the new offsets.")
def consumer_groups(
    bootstrap_server: str,
    do_list: bool,
    describe: bool,
    reset_offsets: bool,
    delete: bool,
    group_id: str | None,
    topic_name: str | None,
    to_earliest: bool,
    to_latest: bool,
    to_offset: int | None,
    to_datetime: str | None,
    dry_run: bool,
    execute: bool,
) -> None:
    """List, describe, reset the offsets of, or delete consumer groups, as
    kafka-consumer-groups.sh does.

    --describe prints GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG CONSUMER-ID
    HOST CLIENT-ID (LOG-END-OFFSET is the high watermark). --reset-offsets needs one of
    --to-earliest, --to-latest, --to-offset N, --to-datetime T, and --execute to commit
    (otherwise it only prints, like --dry-run); it is refused while the group has members.
    """
    from client import Admin

    actions = [do_list, describe, reset_offsets, delete]
    if sum(actions) != 1:
        raise click.UsageError("give exactly one of --list, --describe, --reset-offsets, --delete")
    if not do_list and not group_id:
        raise click.UsageError("--describe, --reset-offsets and --delete need --group")
    with Admin(bootstrap_servers=bootstrap_server) as admin:
        if do_list:
            for listing in admin.list_consumer_groups():
                click.echo(listing.group_id)
        elif describe:
            assert group_id is not None
            _describe(admin, group_id)
        elif delete:
            assert group_id is not None
            admin.delete_consumer_groups([group_id])
            click.echo(f"Deletion of requested consumer groups ('{group_id}') was successful.")
        else:
            assert group_id is not None
            targets = [to_earliest, to_latest, to_offset is not None, to_datetime is not None]
            if sum(targets) != 1:
                raise click.UsageError(
                    "--reset-offsets needs exactly one of --to-earliest, --to-latest, "
                    "--to-offset, --to-datetime"
                )
            if not topic_name:
                raise click.UsageError("--reset-offsets needs --topic")
            if dry_run and execute:
                raise click.UsageError("--dry-run and --execute exclude each other")
            spec: OffsetSpec = (
                "earliest"
                if to_earliest
                else "latest"
                if to_latest
                else parse_datetime(to_datetime)
                if to_datetime is not None
                else -1
            )
            _reset(admin, group_id, topic_name, spec, to_offset, execute=execute)


def _describe(admin: Admin, group_id: str) -> None:
    from client import TopicPartition

    group = admin.describe_consumer_group(group_id)
    committed = admin.list_consumer_group_offsets(group_id)
    owners = {tp: m for m in group.members for tp in m.assignment}
    partitions = sorted(set(committed) | set(owners))
    ends = admin.list_offsets(partitions, "latest") if partitions else {}
    rows: list[tuple[object, ...]] = []
    for tp in partitions:
        current = committed[tp].offset if tp in committed else None
        end = ends[TopicPartition(tp.topic, tp.partition)].offset
        owner = owners.get(tp)
        rows.append(
            (
                group_id,
                tp.topic,
                tp.partition,
                current,
                end,
                None if current is None else max(0, end - current),
                None if owner is None else owner.member_id,
                None if owner is None else owner.host,
                None if owner is None else owner.client_id,
            )
        )
    click.echo("")
    if not group.members:
        click.echo(f"Consumer group '{group_id}' has no active members.")
        click.echo("")
    for line in table(DESCRIBE_COLUMNS, rows):
        click.echo(line)


def _reset(
    admin: Admin,
    group_id: str,
    topic: str,
    spec: OffsetSpec,
    to_offset: int | None,
    *,
    execute: bool,
) -> None:
    from client import TopicPartition
    from client.errors import GroupIdNotFoundError

    try:
        group = admin.describe_consumer_group(group_id)
    except GroupIdNotFoundError:
        group = None
    if group is not None and group.members:
        fail(
            f"Assignments can only be reset if the group '{group_id}' is inactive, but the "
            f"current state is {group.state}."
        )
    [described] = admin.describe_topics([topic])
    partitions = [TopicPartition(topic, p.partition) for p in described.partitions]
    new: dict[TopicPartition, int]
    if to_offset is not None:
        new = dict.fromkeys(partitions, to_offset)
    else:
        found = admin.list_offsets(partitions, spec)
        latest = admin.list_offsets(partitions, "latest")
        # A time after every record: the end, as Kafka's tool does.
        new = {
            tp: found[tp].offset if found[tp].offset >= 0 else latest[tp].offset
            for tp in partitions
        }
    if not execute:
        click.echo(
            "WARN: No action will be performed as the --execute option is missing. "
            "Add --execute to reset the offsets.",
            err=True,
        )
    else:
        admin.alter_consumer_group_offsets(group_id, new)
    click.echo("")
    for line in table(
        RESET_COLUMNS, [(group_id, tp.topic, tp.partition, new[tp]) for tp in sorted(new)]
    ):
        click.echo(line)
