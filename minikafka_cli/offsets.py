"""`minikafka get-offsets` (Kafka's kafka-get-offsets.sh): `topic:partition:offset` lines."""

from __future__ import annotations

from typing import Literal

import click

from minikafka_cli.common import (
    CONTEXT_SETTINGS,
    bootstrap_option,
    client_security,
    config_file_option,
    describe_topics,
    fail,
)

#: kafka-get-offsets.sh's --time names and numbers.
TIME_NAMES: dict[str, Literal["earliest", "latest"]] = {
    "earliest": "earliest",
    "-2": "earliest",
    "latest": "latest",
    "-1": "latest",
}


def parse_time(value: str) -> Literal["earliest", "latest"] | int:
    """--time: earliest (-2), latest (-1) or a timestamp in ms since the epoch."""
    text = value.strip().lower()
    if text in TIME_NAMES:
        return TIME_NAMES[text]
    if text.isascii() and text.isdigit() and int(text) < 2**63:
        return int(text)
    raise click.BadParameter(
        f"{value!r} is not a time: give earliest (-2), latest (-1) or a timestamp in ms since "
        "the epoch",
        param_hint="'--time'",
    )


def parse_partitions(value: str | None) -> list[int] | None:
    """--partitions 0,2,5 (Kafka's list of partition ids)."""
    if value is None:
        return None
    ids: list[int] = []
    for part in value.split(","):
        text = part.strip()
        if not (text.isascii() and text.isdigit()):
            raise click.BadParameter(
                f"{part.strip()!r} is not a partition id (give e.g. 0,1,2)",
                param_hint="'--partitions'",
            )
        ids.append(int(text))
    return sorted(set(ids))


@click.command("get-offsets", context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.option("--topic", "topic_name", metavar="NAME", help="The topic (default: every topic).")
@click.option("--partitions", "partition_list", metavar="P,P,...", help="Only these partitions.")
@click.option(
    "--time",
    "time_spec",
    default="latest",
    show_default=True,
    metavar="earliest|latest|TIMESTAMP",
    help="earliest (-2): the log start offset; latest (-1): the high watermark, the offset "
    "the next committed record gets; TIMESTAMP (ms since the epoch): the first offset whose "
    "record's timestamp is at or after it (-1 when none is).",
)
def get_offsets(
    bootstrap_server: str, topic_name: str | None, partition_list: str | None, time_spec: str
) -> None:
    """Print topic:partition:offset for each partition, as kafka-get-offsets.sh does.

    Each offset is answered by the partition's leader. Exit status 1 (one Error: line)
    when the topic or a partition does not exist.
    """
    from client import Admin, TopicPartition

    spec = parse_time(time_spec)
    wanted_ids = parse_partitions(partition_list)
    if wanted_ids is not None and topic_name is None:
        raise click.UsageError("--partitions needs --topic")
    with Admin(bootstrap_servers=bootstrap_server, **client_security()) as admin:
        topics = (
            describe_topics(admin, [topic_name])
            if topic_name is not None
            else admin.describe_topics(None)
        )
        partitions: list[TopicPartition] = []
        for topic in topics:
            ids = [p.partition for p in topic.partitions]
            if wanted_ids is not None:
                missing = [p for p in wanted_ids if p not in ids]
                if missing:
                    fail(
                        f"topic {topic.name!r} has no partition {missing[0]} (it has "
                        f"{len(ids)} partition{'s' if len(ids) != 1 else ''})"
                    )
                ids = wanted_ids
            partitions.extend(TopicPartition(topic.name, p) for p in ids)
        if not partitions:
            return
        offsets = admin.list_offsets(partitions, spec)
    for tp in sorted(offsets):
        click.echo(f"{tp.topic}:{tp.partition}:{offsets[tp].offset}")
