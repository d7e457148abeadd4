"""`minikafka topic ...` (Kafka's kafka-topics.sh)."""

from __future__ import annotations

from typing import Any

import click

from minikafka.errors import ErrorCode, code_name
from minikafka_cli.common import (
    CONTEXT_SETTINGS,
    F,
    bootstrap_option,
    client_security,
    config_file_only_option,
    config_file_option,
    error_text,
    fail,
    key_values,
    one_topic,
    opt,
)


@click.group(context_settings=CONTEXT_SETTINGS)
def topic() -> None:
    """Create, describe, list, delete and configure topics."""


def _topic_option(func: F) -> F:
    return click.option(
        "--topic",
        "topic_option",
        metavar="NAME",
        help="The topic, as kafka-topics.sh spells it (or give it as the argument).",
    )(func)


@topic.command("create", context_settings=CONTEXT_SETTINGS)
@config_file_only_option
@bootstrap_option
@click.argument("name", required=False)
@_topic_option
@opt("--partitions", type=click.IntRange(min=1), default=1, show_default=True)
@opt("--replication-factor", type=click.IntRange(min=1), default=1, show_default=True)
@click.option(
    "--config",
    "--topic-config",
    "configs",
    multiple=True,
    metavar="KEY=VALUE",
    help="Topic config as in kafka-topics.sh, e.g. --config min.insync.replicas=2 (repeatable).",
)
@click.option(
    "--if-not-exists",
    is_flag=True,
    help="Succeed without a word if the topic exists already (as kafka-topics.sh).",
)
def topic_create(
    bootstrap_server: str,
    name: str | None,
    topic_option: str | None,
    partitions: int,
    replication_factor: int,
    configs: tuple[str, ...],
    if_not_exists: bool,
) -> None:
    """Create topic NAME (here --config KEY=VALUE is a topic config; the options file is
    --config-file FILE)."""
    from client import Admin, NewTopic
    from client.errors import TopicAlreadyExistsError

    topic_name = one_topic(name, topic_option)
    config_map = key_values(configs, "--config")
    with Admin(bootstrap_servers=bootstrap_server, **client_security()) as admin:
        try:
            admin.create_topics(
                [NewTopic(topic_name, partitions, replication_factor, configs=config_map)]
            )
        except TopicAlreadyExistsError as exc:
            if if_not_exists:
                return
            fail(error_text(exc))
    click.echo(f"Created topic {topic_name}.")


def _offsets_text(offsets: Any) -> str:
    """The --offsets fields of a partition line (`unavailable` without an answer)."""
    if offsets is None:
        return (
            "\tLogStartOffset: unavailable\tHighWatermark: unavailable\tLogEndOffset: unavailable"
        )
    return (
        f"\tLogStartOffset: {offsets.log_start_offset}\tHighWatermark: {offsets.high_watermark}"
        f"\tLogEndOffset: {offsets.log_end_offset}"
    )


def _describe_lines(
    topics: list[Any],
    *,
    filter_name: str | None,
    offsets: dict[Any, Any] | None = None,
    elr: bool = False,
) -> list[str]:
    from client import TopicPartition

    lines: list[str] = []
    for topic_info in topics:
        for p in topic_info.partitions:
            if filter_name == "under-replicated" and len(p.isr) >= len(p.replicas):
                continue
            if filter_name == "under-min-isr" and len(p.isr) >= int(
                topic_info.configs.get("min.insync.replicas", "1")
            ):
                continue
            if filter_name == "unavailable" and p.leader >= 0:
                continue
            line = (  # indented by a tab, as kafka-topics.sh prints partition lines
                f"\tTopic: {topic_info.name}\tPartition: {p.partition}\tLeader: "
                f"{p.leader if p.leader >= 0 else 'none'}\tReplicas: "
                f"{','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}"
            )
            if elr:  # as kafka-topics.sh prints them when ELR is enabled
                line += (
                    f"\tElr: {','.join(map(str, p.elr))}"
                    f"\tLastKnownElr: {','.join(map(str, p.last_known_elr))}"
                )
            if p.state and p.state != "ONLINE":
                line += f"\tState: {p.state}"
            if offsets is not None:
                line += _offsets_text(offsets.get(TopicPartition(topic_info.name, p.partition)))
            lines.append(line)
    return lines


@topic.command("describe", context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.argument("names", metavar="[NAME]...", nargs=-1)
@_topic_option
@click.option("--under-replicated-partitions", "under_replicated", is_flag=True)
@click.option("--under-min-isr-partitions", "under_min_isr", is_flag=True)
@click.option("--unavailable-partitions", "unavailable", is_flag=True)
@click.option(
    "--offsets",
    "with_offsets",
    is_flag=True,
    help="Add each partition's LogStartOffset, HighWatermark and LogEndOffset, as its "
    "leader answers them (unavailable for a partition without a leader).",
)
def topic_describe(
    bootstrap_server: str,
    names: tuple[str, ...],
    topic_option: str | None,
    under_replicated: bool,
    under_min_isr: bool,
    unavailable: bool,
    with_offsets: bool,
) -> None:
    """Describe the topics NAME... (or every topic) in Kafka's line format."""
    from client import Admin

    chosen = [
        flag
        for flag, on in (
            ("under-replicated", under_replicated),
            ("under-min-isr", under_min_isr),
            ("unavailable", unavailable),
        )
        if on
    ]
    if len(chosen) > 1:
        raise click.UsageError("choose at most one of the partition filters")
    wanted = list(dict.fromkeys([*names, *([topic_option] if topic_option is not None else [])]))
    with Admin(bootstrap_servers=bootstrap_server, **client_security()) as admin:
        # The controller's view: ISR and eligible leader replicas as it committed them.
        cluster = admin.describe_cluster(wanted)
        topics = _known_topics(cluster.topics, wanted)
        offsets = _leader_offsets(admin, topics) if with_offsets else None
    for topic_info in topics:
        if not chosen:
            configs = ",".join(f"{k}={v}" for k, v in sorted(topic_info.configs.items()))
            click.echo(
                f"Topic: {topic_info.name}\tPartitionCount: {len(topic_info.partitions)}\t"
                f"ReplicationFactor: "
                f"{len(topic_info.partitions[0].replicas) if topic_info.partitions else 0}\t"
                f"Configs: {configs}"
            )
        for line in _describe_lines(
            [topic_info],
            filter_name=chosen[0] if chosen else None,
            offsets=offsets,
            elr=cluster.eligible_leader_replicas_enabled,
        ):
            click.echo(line)


def _known_topics(topics: list[Any], wanted: list[str]) -> list[Any]:
    """`topics` in the order asked for; an Error: line for a topic that does not exist."""
    found = {t.name: t for t in topics}
    for name in wanted:
        info = found.get(name)
        if info is None or info.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            fail(f"topic {name!r} does not exist")
        if info.error_code != ErrorCode.NONE:
            fail(f"topic {name!r}: {code_name(info.error_code)}")
    return [found[name] for name in wanted] if wanted else topics


def _leader_offsets(admin: Any, topics: list[Any]) -> dict[Any, Any]:
    """The offsets of every partition that has a leader (asked of the leaders); a
    partition whose leader does not answer is left out (printed as unavailable)."""
    from client import TopicPartition
    from client.errors import MiniKafkaClientError

    led = [
        TopicPartition(t.name, p.partition) for t in topics for p in t.partitions if p.leader >= 0
    ]
    if not led:
        return {}
    try:
        found: dict[Any, Any] = admin.list_offsets(led, "earliest")
        return found
    except MiniKafkaClientError as exc:
        click.echo(f"Warning: offsets unavailable: {error_text(exc)}", err=True)
        return {}


@topic.command("list", context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
def topic_list(bootstrap_server: str) -> None:
    """List topic names."""
    from client import Admin

    with Admin(bootstrap_servers=bootstrap_server, **client_security()) as admin:
        names = sorted(admin.list_topics())
    for name in names:
        click.echo(name)


@topic.command("delete", context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.argument("name", required=False)
@_topic_option
@click.option(
    "--if-exists",
    is_flag=True,
    help="Succeed without a word if the topic does not exist (as kafka-topics.sh).",
)
def topic_delete(
    bootstrap_server: str, name: str | None, topic_option: str | None, if_exists: bool
) -> None:
    """Delete topic NAME and its data."""
    from client import Admin
    from client.errors import UnknownTopicOrPartitionError

    topic_name = one_topic(name, topic_option)
    with Admin(bootstrap_servers=bootstrap_server, **client_security()) as admin:
        try:
            admin.delete_topics([topic_name])
        except UnknownTopicOrPartitionError as exc:
            if if_exists:
                return
            fail(error_text(exc))
    click.echo(f"Deleted topic {topic_name}.")


@topic.command("alter", context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.argument("name", required=False)
@_topic_option
@click.option(
    "--partitions",
    type=click.IntRange(min=1),
    required=True,
    help="The new total number of partitions (larger than the current one).",
)
def topic_alter(
    bootstrap_server: str, name: str | None, topic_option: str | None, partitions: int
) -> None:
    """Add partitions to topic NAME (kafka-topics.sh --alter --partitions N).

    The new partitions get replicas as creation would place them, at the topic's
    replication factor. Records with keys may land in other partitions afterwards (the
    key's partition depends on the partition count), as in Kafka.
    """
    from client import Admin

    topic_name = one_topic(name, topic_option)
    with Admin(bootstrap_servers=bootstrap_server, **client_security()) as admin:
        admin.create_partitions({topic_name: partitions})
    click.echo(
        "WARNING: If partitions are increased for a topic that has a key, the partition logic "
        "or ordering of the messages will be affected",
        err=True,
    )
    click.echo(f"Topic {topic_name} now has {partitions} partitions.")


@topic.command("alter-config", context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.argument("name", required=False)
@_topic_option
@click.option("--set", "set_pairs", multiple=True, metavar="KEY=VALUE")
@click.option("--delete", "delete_keys", multiple=True, metavar="KEY")
def topic_alter_config(
    bootstrap_server: str,
    name: str | None,
    topic_option: str | None,
    set_pairs: tuple[str, ...],
    delete_keys: tuple[str, ...],
) -> None:
    """Set or delete configs of topic NAME."""
    from client import Admin

    topic_name = one_topic(name, topic_option)
    if not set_pairs and not delete_keys:
        raise click.UsageError("nothing to change: give --set KEY=VALUE and/or --delete KEY")
    updates = key_values(set_pairs, "--set")
    with Admin(bootstrap_servers=bootstrap_server, **client_security()) as admin:
        admin.alter_configs(topic_name, updates, delete=list(delete_keys))
    click.echo(f"Updated configs of topic {topic_name}.")
