"""`minikafka leader-election` and `minikafka cluster status`."""

from __future__ import annotations

import json

import click

from minikafka.errors import ErrorCode, code_name
from minikafka_cli.common import (
    CONTEXT_SETTINGS,
    bootstrap_option,
    client_security,
    config_file_option,
    describe_topics,
    fail,
    one_line,
)


@click.command("leader-election", context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.option(
    "--type",
    "--election-type",
    "election_type",
    type=click.Choice(["preferred", "unclean"], case_sensitive=False),
    required=True,
    help="Preferred: move leadership back to the first replica. Unclean: elect an "
    "out-of-sync replica when no in-sync one is alive (may lose data). "
    "--election-type is kafka-leader-election.sh's name for it.",
)
@click.option("--topic", "topic_name")
@click.option("--partition", type=click.IntRange(min=0))
@click.option("--all-topic-partitions", is_flag=True)
def leader_election(
    bootstrap_server: str,
    election_type: str,
    topic_name: str | None,
    partition: int | None,
    all_topic_partitions: bool,
) -> None:
    """Run a preferred or unclean leader election (like kafka-leader-election.sh)."""
    from client import Admin, TopicPartition

    if partition is not None and topic_name is None:
        raise click.UsageError("--partition needs --topic")
    if all_topic_partitions == (topic_name is not None):
        raise click.UsageError("give either --topic T [--partition P] or --all-topic-partitions")
    kind = election_type.lower()
    with Admin(bootstrap_servers=bootstrap_server, **client_security()) as admin:
        partitions: list[TopicPartition] | None = None
        if topic_name is not None:
            if partition is not None:
                partitions = [TopicPartition(topic_name, partition)]
            else:
                (described,) = describe_topics(admin, [topic_name])
                partitions = [TopicPartition(topic_name, p.partition) for p in described.partitions]
        results = admin.elect_leaders("unclean" if kind == "unclean" else "preferred", partitions)
    label = kind.upper()
    done = [f"{r.topic}-{r.partition}" for r in results if r.error_code == ErrorCode.NONE]
    not_needed = [
        f"{r.topic}-{r.partition}" for r in results if r.error_code == ErrorCode.ELECTION_NOT_NEEDED
    ]
    failed = [
        r for r in results if r.error_code not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED)
    ]
    # kafka-leader-election.sh's output lines, so scripts written for it work.
    if done:
        click.echo(
            f"Successfully completed leader election ({label}) for partitions {', '.join(done)}"
        )
    if not_needed:
        click.echo(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    for result in failed:
        reason = result.error_message or code_name(result.error_code)
        click.echo(
            f"Error completing leader election ({label}) for partition: "
            f"{result.topic}-{result.partition}: {one_line(reason)} "
            f"[{code_name(result.error_code)}]"
        )
    if failed:
        fail(f"{len(failed)} replica(s) could not be elected")


@click.group(context_settings=CONTEXT_SETTINGS)
def cluster() -> None:
    """Cluster-wide information."""


@cluster.command("status", context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.option("--json", "as_json", is_flag=True)
def cluster_status(bootstrap_server: str, as_json: bool) -> None:
    """Show brokers, the controller and partition health."""
    from client import Admin

    with Admin(bootstrap_servers=bootstrap_server, **client_security()) as admin:
        info = admin.describe_cluster()
    if as_json:
        click.echo(json.dumps(info.to_dict(), indent=2, sort_keys=True))
        return
    click.echo(
        f"Cluster: {info.cluster_id}  Controller: {info.controller_id} "
        f"(active, epoch {info.controller_epoch})"
    )
    click.echo("Broker  Address                 Rack      Status")
    for b in info.brokers:
        status = "fenced" if b.fenced else "active"
        click.echo(f"{b.broker_id:<7} {b.host + ':' + str(b.port):<23} {b.rack or '-':<9} {status}")
    offline = sum(1 for t in info.topics for p in t.partitions if p.leader < 0)
    under = sum(1 for t in info.topics for p in t.partitions if len(p.isr) < len(p.replicas))
    total = sum(len(t.partitions) for t in info.topics)
    click.echo(
        f"Partitions: {total} total, {under} under-replicated, {offline} offline "
        f"({len(info.topics)} topics)"
    )
