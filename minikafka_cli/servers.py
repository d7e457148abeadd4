"""`minikafka broker`, `minikafka controller` and `minikafka dev`: the server processes."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Literal

import click
import msgspec

from minikafka.config import (
    ConfigError,
)
from minikafka_cli.common import (
    CONNECT,
    CONTEXT_SETTINGS,
    LISTEN,
    LOG_LEVELS,
    F,
    config_file_option,
    fail,
    opt,
    setup_logging,
)

# ---- servers -----------------------------------------------------------------------


def _controller_list(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """`HOST:PORT[,HOST:PORT...]`: each one checked like any address we connect to."""
    if value is None:
        return None
    addresses = [part.strip() for part in value.split(",") if part.strip()]
    if not addresses:
        raise click.BadParameter("no address given", ctx=ctx, param=param)
    return ",".join(str(CONNECT(ctx, param, address)) for address in addresses)


def _quorum_list(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """`ID@HOST:PORT,...`, checked by the controller's own parser."""
    if value is None:
        return None
    from controller.config import parse_quorum

    try:
        voters = parse_quorum(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc
    return ",".join(f"{node_id}@{address}" for node_id, address in voters.items())


def topic_limit_options(func: F) -> F:
    """The limits CreateTopics / AlterConfigs are checked against (README "Limits")."""
    from minikafka import limits

    for flag, default, text in reversed(
        [
            (
                "--max-partitions-per-topic",
                limits.MAX_PARTITIONS_PER_TOPIC_DEFAULT,
                "Largest partition count of one topic (refused: INVALID_PARTITIONS).",
            ),
            (
                "--max-partitions-per-cluster",
                limits.MAX_PARTITIONS_PER_CLUSTER_DEFAULT,
                "Most partitions in the cluster (refused: POLICY_VIOLATION).",
            ),
            (
                "--max-partitions-per-broker",
                limits.MAX_PARTITIONS_PER_BROKER_DEFAULT,
                "Most partition replicas one broker hosts (refused: POLICY_VIOLATION).",
            ),
            (
                "--min-segment-bytes",
                limits.MIN_SEGMENT_BYTES_DEFAULT,
                "Smallest segment.bytes topic config, bytes (refused: INVALID_CONFIG).",
            ),
            (
                "--min-segment-ms",
                limits.MIN_SEGMENT_MS_DEFAULT,
                "Smallest segment.ms topic config, ms (refused: INVALID_CONFIG).",
            ),
        ]
    ):
        func = opt(flag, type=click.IntRange(min=1), default=default, show_default=True, help=text)(
            func
        )
    return func


def tls_options(func: F) -> F:
    """`--tls-cert/--tls-key/--tls-ca` and the principal mapping rules (minikafka.tls)."""
    pem = click.Path(dir_okay=False)
    for flag, text in reversed(
        [
            (
                "--tls-cert",
                "PEM certificate (chain) of this process; with --tls-key and --tls-ca turns "
                "TLS on: mutual TLS on --listen, TLS on every channel this process opens.",
            ),
            ("--tls-key", "PEM private key of --tls-cert."),
            (
                "--tls-ca",
                "PEM CA certificate(s) peers' certificates are verified against (a client of "
                "the mutual-TLS listener needs a certificate this CA signed).",
            ),
        ]
    ):
        func = opt(flag, type=pem, metavar="FILE", help=text)(func)
    func = opt(
        "--super-users",
        default="",
        metavar="User:A;User:B",
        help="Kafka's super.users: principals allowed everything under --authorizer (give "
        "the brokers' and controllers' principals).",
    )(func)
    func = opt(
        "--authorizer",
        is_flag=True,
        help="Enforce ACLs (`minikafka acls`): every request needs an ACL that allows it "
        "(default deny; DENY wins), except from --super-users.",
    )(func)
    return opt(
        "--ssl-principal-mapping-rules",
        default="DEFAULT",
        show_default=True,
        metavar="RULES",
        help="Kafka's ssl.principal.mapping.rules: certificate subject (RFC 2253 DN) -> "
        "User:NAME, e.g. 'RULE:^CN=(.*?)(,.*)?$/$1/,DEFAULT'. DEFAULT: the whole DN.",
    )(func)


def broker_limit_options(func: F) -> F:
    """Limits that guard one broker process (README "Limits")."""
    from broker.config import BrokerConfig

    defaults = BrokerConfig(broker_id=0, listen="", data_dir="")
    for flag, text in reversed(
        [
            (
                "--max-open-segment-files",
                "Segment files this broker keeps open at once; others are opened on use.",
            ),
            ("--max-concurrent-streams", "Concurrent requests (HTTP/2 streams) per connection."),
            (
                "--max-outstanding-response-bytes",
                "Bytes of fetch responses not yet sent, all connections together.",
            ),
            (
                "--max-outstanding-response-bytes-per-connection",
                "Bytes of fetch responses not yet sent on one connection.",
            ),
            ("--keepalive-time-ms", "Ping a connection idle this long (0: never)."),
            ("--keepalive-timeout-ms", "Close a connection whose ping is not answered in this."),
            (
                "--max-connection-age-ms",
                "Close connections this old (after a GOAWAY and the grace), freeing responses "
                "a client never read (0: never).",
            ),
            (
                "--max-connection-age-grace-ms",
                "Time in-flight requests get to finish after a connection's max age.",
            ),
            (
                "--quarantine-max-bytes",
                "Bytes of discarded batches this broker keeps with its loss receipts "
                "(`minikafka log lost`), oldest evicted first (0: receipts only).",
            ),
            (
                "--quarantine-max-copy-bytes",
                "The most one truncation copies into the quarantine, on the replication path; "
                "a larger discard keeps only its receipt (0: receipts only).",
            ),
        ]
    ):
        name = flag[2:].replace("-", "_")
        zero_allowed = "(0: " in text
        func = opt(
            flag,
            type=click.IntRange(min=0 if zero_allowed else 1),
            default=getattr(defaults, name),
            show_default=True,
            help=text,
        )(func)
    return func


def group_options(func: F) -> F:
    """Consumer-group settings: the internal topic __consumer_offsets (Kafka's names)."""
    from broker.config import BrokerConfig

    defaults = BrokerConfig(broker_id=0, listen="", data_dir="")
    for flag, text in reversed(
        [
            (
                "--offsets-topic-num-partitions",
                "Partitions of __consumer_offsets when this broker creates it (first use); "
                "a group's coordinator is the leader of partition "
                "abs(java-hash(group)) % partitions.",
            ),
            (
                "--offsets-topic-replication-factor",
                "Replication factor of __consumer_offsets, capped at the live brokers "
                "(min.insync.replicas 2 from 3 replicas).",
            ),
            (
                "--offsets-commit-timeout-ms",
                "How long an offset commit waits for its record to be replicated.",
            ),
            (
                "--offsets-compaction-min-records",
                "A __consumer_offsets partition this broker leads is compacted (a snapshot of "
                "its live keys, then its log start moves to it) once it holds this many "
                "records and more than twice its live keys: loading a partition stays "
                "bounded by its live state, not its history.",
            ),
            (
                "--group-consumer-session-timeout-ms",
                "A group member that sends no heartbeat for this long is fenced and its "
                "partitions reassigned (a member may ask for its own, within 1 s .. 30 min).",
            ),
            (
                "--group-consumer-heartbeat-interval-ms",
                "How often group members are told to heartbeat.",
            ),
        ]
    ):
        func = opt(
            flag,
            type=click.IntRange(min=1),
            default=getattr(defaults, flag[2:].replace("-", "_")),
            show_default=True,
            help=text,
        )(func)
    return func


@click.command(context_settings=CONTEXT_SETTINGS)
@config_file_option
@opt("--id", "broker_id", type=click.IntRange(min=0), required=True, help="Broker id (>= 0).")
@opt(
    "--listen",
    required=True,
    metavar="HOST:PORT",
    callback=LISTEN,
    help="Address the gRPC server binds.",
)
@opt(
    "--controller",
    metavar="HOST:PORT[,HOST:PORT...]",
    callback=_controller_list,
    help="Every controller of the quorum, comma-separated (the broker follows the active "
    "one); omit with --standalone.",
)
@opt("--data-dir", required=True, type=click.Path(file_okay=False), help="Log directory.")
@opt("--rack", help="Rack (availability zone) of this broker, for placement and KIP-392.")
@opt(
    "--advertise",
    metavar="HOST:PORT",
    callback=CONNECT,
    help="Address clients and brokers use to reach us.",
)
@opt(
    "--external-listen",
    metavar="HOST:PORT",
    callback=LISTEN,
    help="Second listener for clients outside the brokers' network (e.g. a compose host).",
)
@opt(
    "--external-advertise",
    metavar="HOST:PORT",
    callback=CONNECT,
    help="Address external clients use; Metadata on the external listener hands these out.",
)
@opt(
    "--standalone",
    is_flag=True,
    help="Single-node mode: no controller; the broker creates RF=1 topics itself.",
)
@opt(
    "--metrics-listen",
    metavar="HOST:PORT",
    callback=LISTEN,
    help="Serve Prometheus metrics on this address.",
)
@opt(
    "--replica-lag-time-max-ms",
    type=click.IntRange(min=1),
    default=10_000,
    show_default=True,
    help="A follower that has not caught up for this long leaves the ISR.",
)
@opt(
    "--min-insync-replicas",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="Default min.insync.replicas for topics that do not set it.",
)
@opt(
    "--log-segment-bytes",
    type=click.IntRange(min=1024),
    default=64 * 1024 * 1024,
    show_default=True,
    help="Default segment size.",
)
@topic_limit_options
@broker_limit_options
@tls_options
@group_options
@opt("--log-level", type=LOG_LEVELS, default="INFO", show_default=True)
@click.option("--unsafe-test-hw-is-leo", is_flag=True, hidden=True)
@click.option("--unsafe-test-boot-id", default=None, hidden=True)
def broker(
    broker_id: int,
    listen: str,
    controller: str | None,
    data_dir: str,
    rack: str | None,
    advertise: str | None,
    external_listen: str | None,
    external_advertise: str | None,
    standalone: bool,
    metrics_listen: str | None,
    replica_lag_time_max_ms: int,
    min_insync_replicas: int,
    log_segment_bytes: int,
    log_level: str,
    unsafe_test_hw_is_leo: bool,
    unsafe_test_boot_id: str | None,
    tls_cert: str | None,
    tls_key: str | None,
    tls_ca: str | None,
    ssl_principal_mapping_rules: str,
    authorizer: bool,
    super_users: str,
    **limits: int,
) -> None:
    """Run a broker: Produce/Fetch for clients, replication, control from the controller."""
    from broker.app import run
    from broker.config import BrokerConfig
    from minikafka_cli import standalone_admin

    if not standalone and not controller:
        fail(
            "a broker needs --controller HOST:PORT[,HOST:PORT...] (or --standalone for "
            "single-node mode)"
        )
    if standalone and controller:
        fail("--standalone and --controller exclude each other")
    if standalone and authorizer:
        fail(
            "--authorizer needs a controller: ACLs live in its metadata log, and a standalone "
            "broker has none"
        )
    setup_logging(log_level)
    config = BrokerConfig(
        broker_id=broker_id,
        listen=listen,
        controller=controller,
        data_dir=data_dir,
        rack=rack,
        advertise=advertise,
        external_listen=external_listen,
        external_advertise=external_advertise,
        standalone=standalone,
        metrics_listen=metrics_listen,
        replica_lag_time_max_ms=replica_lag_time_max_ms,
        min_insync_replicas=min_insync_replicas,
        log_segment_bytes=log_segment_bytes,
        unsafe_test_hw_is_leo=unsafe_test_hw_is_leo,
        unsafe_test_boot_id=unsafe_test_boot_id,
        tls_cert=tls_cert,
        tls_key=tls_key,
        tls_ca=tls_ca,
        ssl_principal_mapping_rules=ssl_principal_mapping_rules,
        authorizer=authorizer,
        super_users=super_users,
    )
    config = msgspec.structs.replace(config, **limits)
    if unsafe_test_hw_is_leo:
        logging.getLogger(__name__).warning(
            "--unsafe-test-hw-is-leo: acknowledged writes CAN BE LOST (fault-suite self-test only)"
        )
    try:
        run(config, standalone_admin=standalone_admin.build if standalone else None)
    except (ConfigError, OSError) as exc:
        fail(str(exc))


@click.command(context_settings=CONTEXT_SETTINGS)
@config_file_option
@opt(
    "--id",
    "node_id",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="This controller's id (one of the --quorum voters).",
)
@opt(
    "--listen",
    required=True,
    metavar="HOST:PORT",
    callback=LISTEN,
    help="Address the gRPC server binds (ControllerService, RaftService).",
)
@opt(
    "--data-dir",
    required=True,
    type=click.Path(file_okay=False),
    help="Metadata log directory (formatted on first start; a single-controller journal "
    "found here is converted).",
)
@opt(
    "--quorum",
    metavar="ID@HOST:PORT,...",
    callback=_quorum_list,
    help="The controller quorum: every voter's id and the address the others reach it at "
    "(Kafka's controller.quorum.voters). Omitted: a quorum of one.",
)
@opt(
    "--cluster-id",
    metavar="ID",
    help="Cluster id a new data directory is formatted with (the same on every controller; "
    "needed to format a quorum of more than one). Omitted with a quorum of one: generated.",
)
@opt(
    "--quorum-election-timeout-ms",
    type=click.IntRange(min=1),
    default=300,
    show_default=True,
    help="A candidate that has not won within this (plus up to as much again, at random) "
    "stands again.",
)
@opt(
    "--quorum-fetch-timeout-ms",
    type=click.IntRange(min=201),
    default=500,
    show_default=True,
    help="A standby that heard nothing from the active controller for this long stands for "
    "election (the fail-over detection time).",
)
@opt(
    "--metrics-listen",
    metavar="HOST:PORT",
    callback=LISTEN,
    help="Serve Prometheus metrics on this address.",
)
@opt(
    "--session-timeout-ms",
    type=click.IntRange(min=1),
    default=1500,
    show_default=True,
    help="A broker without a heartbeat for this long is fenced.",
)
@opt(
    "--heartbeat-interval-ms",
    type=click.IntRange(min=1),
    default=250,
    show_default=True,
    help="How often brokers heartbeat.",
)
@opt(
    "--auto-leader-rebalance/--no-auto-leader-rebalance",
    "auto_leader_rebalance",
    default=True,
    show_default=True,
    help="Move leadership back to preferred replicas periodically.",
)
@opt(
    "--leader-imbalance-check-interval-ms",
    type=click.IntRange(min=1),
    default=30_000,
    show_default=True,
)
@opt(
    "--eligible-leader-replicas/--no-eligible-leader-replicas",
    "eligible_leader_replicas",
    default=True,
    show_default=True,
    help="Keep eligible leader replicas (KIP-966): a replica that left an ISR below "
    "min.insync.replicas may lead cleanly, and the last in-sync replica that restarted "
    "without proof of a clean shutdown never does. Off: Kafka's older 'last replica "
    "standing'.",
)
@opt(
    "--unclean-recovery-strategy",
    type=click.Choice(["longest-log", "first-alive"]),
    default="longest-log",
    show_default=True,
    help="How an unclean election chooses: the alive replica with the longest log (by "
    "last leader epoch, then end offset; the controller asks each), or the first alive "
    "one in assignment order.",
)
@topic_limit_options
@tls_options
@opt("--log-level", type=LOG_LEVELS, default="INFO", show_default=True)
def controller(
    node_id: int,
    listen: str,
    data_dir: str,
    quorum: str | None,
    cluster_id: str | None,
    quorum_election_timeout_ms: int,
    quorum_fetch_timeout_ms: int,
    metrics_listen: str | None,
    session_timeout_ms: int,
    heartbeat_interval_ms: int,
    auto_leader_rebalance: bool,
    leader_imbalance_check_interval_ms: int,
    eligible_leader_replicas: bool,
    unclean_recovery_strategy: Literal["longest-log", "first-alive"],
    log_level: str,
    tls_cert: str | None,
    tls_key: str | None,
    tls_ca: str | None,
    ssl_principal_mapping_rules: str,
    authorizer: bool,
    super_users: str,
    **limits: int,
) -> None:
    """Run a controller: cluster metadata, broker liveness, leader elections.

    With --quorum, several controllers replicate the metadata log with Raft; the elected
    one is the active controller, the others are hot standbys.
    """
    from controller.app import run
    from controller.config import ControllerConfig
    from controller.metadata_dir import MetadataDirError
    from controller.metadata_log import MetadataDecodeError
    from controller.raft.core import RaftInvariantError
    from controller.raft.file_storage import RaftStorageError

    if heartbeat_interval_ms >= session_timeout_ms:
        raise click.UsageError(
            f"--heartbeat-interval-ms ({heartbeat_interval_ms}) must be smaller than "
            f"--session-timeout-ms ({session_timeout_ms})"
        )
    setup_logging(log_level)
    config = ControllerConfig(
        node_id=node_id,
        listen=listen,
        data_dir=data_dir,
        quorum=quorum,
        cluster_id=cluster_id,
        quorum_election_timeout_ms=quorum_election_timeout_ms,
        quorum_fetch_timeout_ms=quorum_fetch_timeout_ms,
        metrics_listen=metrics_listen,
        session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=heartbeat_interval_ms,
        auto_leader_rebalance_enable=auto_leader_rebalance,
        leader_imbalance_check_interval_ms=leader_imbalance_check_interval_ms,
        eligible_leader_replicas=eligible_leader_replicas,
        unclean_recovery_strategy=unclean_recovery_strategy,
        tls_cert=tls_cert,
        tls_key=tls_key,
        tls_ca=tls_ca,
        ssl_principal_mapping_rules=ssl_principal_mapping_rules,
        authorizer=authorizer,
        super_users=super_users,
    )
    config = msgspec.structs.replace(config, **limits)
    try:
        config.validate()
    except ValueError as exc:
        fail(str(exc))
    from controller.metadata_dir import start_problem

    problem = start_problem(Path(data_dir), voter_count=len(config.voters()), cluster_id=cluster_id)
    if problem is not None:
        fail(problem)
    try:
        run(config)
    except (
        ConfigError,
        OSError,
        MetadataDirError,
        RaftStorageError,
        RaftInvariantError,
        MetadataDecodeError,
    ) as exc:
        fail(str(exc))


@click.command(context_settings=CONTEXT_SETTINGS)
@config_file_option
@opt("--brokers", type=click.IntRange(min=1, max=9), default=3, show_default=True)
@opt(
    "--controllers",
    type=click.IntRange(min=1, max=9),
    default=3,
    show_default=True,
    help="Controllers in the quorum (an odd number survives the loss of a minority).",
)
@opt(
    "--data-dir",
    type=click.Path(file_okay=False),
    default="./data/dev",
    show_default=True,
    help="Everything lives under this directory (one sub-directory per process).",
)
@opt(
    "--base-port",
    type=click.IntRange(min=0, max=65000),
    default=9092,
    show_default=True,
    help="Brokers listen on base-port, base-port+1, ...; the controllers on base-port+100,"
    " +101, ... 0 picks free ports.",
)
@opt(
    "--tls",
    is_flag=True,
    help="Mutual TLS everywhere: makes a development CA and certificates under "
    "DATA_DIR/certs (openssl), including client.crt/client.key for clients.",
)
@opt("--log-level", type=LOG_LEVELS, default="INFO", show_default=True)
def dev(
    brokers: int, controllers: int, data_dir: str, base_port: int, tls: bool, log_level: str
) -> None:
    """Run a controller quorum and N brokers as child processes on 127.0.0.1 until Ctrl-C."""
    from minikafka_cli.dev_certs import CertificateError
    from minikafka_cli.devcluster import run_dev_cluster

    try:
        run_dev_cluster(
            brokers=brokers,
            controllers=controllers,
            data_dir=Path(data_dir),
            base_port=base_port,
            log_level=log_level,
            tls=tls,
        )
    except (RuntimeError, CertificateError) as exc:
        fail(str(exc))


# ---- log tools ---------------------------------------------------------------------
