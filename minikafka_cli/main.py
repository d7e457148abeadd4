"""The `minikafka` command line: servers (broker, controller, dev) and client tools.

Every option can also be set in a TOML file (`--config FILE`, keys are option names) or
with a `MINIKAFKA_<OPTION>` environment variable (`--data-dir` -> `MINIKAFKA_DATA_DIR`);
flags win over the environment, which wins over the file.
"""

from __future__ import annotations

import click

from minikafka import __version__
from minikafka_cli.acls import acls
from minikafka_cli.cluster import cluster, leader_election
from minikafka_cli.common import CONTEXT_SETTINGS, MainGroup
from minikafka_cli.groups import consumer_groups
from minikafka_cli.logs import log
from minikafka_cli.offsets import get_offsets
from minikafka_cli.quorum import metadata_quorum
from minikafka_cli.records import consume, produce
from minikafka_cli.servers import broker, controller, dev
from minikafka_cli.timeline import timeline
from minikafka_cli.topics import topic


@click.group(cls=MainGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, prog_name="minikafka")
def main() -> None:
    """minikafka: a replicated log broker with Kafka's replication protocol, over gRPC.

    Start a local cluster with `minikafka dev`, then use the client commands (topic,
    produce, consume, get-offsets, consumer-groups, leader-election, cluster,
    metadata-quorum, timeline, acls) with --bootstrap-server HOST:PORT.
    """


for command in (
    broker,
    controller,
    dev,
    log,
    produce,
    consume,
    topic,
    leader_election,
    cluster,
    metadata_quorum,
):
    main.add_command(command)
for command in (get_offsets, timeline, acls, consumer_groups):
    main.add_command(command)
