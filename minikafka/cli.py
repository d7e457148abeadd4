"""The `minikafka` command line: servers (broker, controller, dev) and client tools.

Every option can also be set in a TOML file (`--config FILE`, keys are option names) or
with a `MINIKAFKA_<OPTION>` environment variable (`--data-dir` -> `MINIKAFKA_DATA_DIR`);
flags win over the environment, which wins over the file.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from minikafka import __version__
from minikafka.config import ConfigError, env_var, load_toml, parse_key_values
from minikafka.errors import ErrorCode

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _load_config_file(ctx: click.Context, _param: click.Parameter, value: str | None) -> None:
    if not value:
        return
    try:
        defaults = load_toml(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from exc
    ctx.default_map = {**(ctx.default_map or {}), **defaults}


def config_file_option(func: F) -> F:
    return click.option(
        "--config-file",
        "--config",
        "config_file",
        type=click.Path(dir_okay=False),
        is_eager=True,
        expose_value=False,
        callback=_load_config_file,
        help="TOML file with option values (keys are option names, e.g. data-dir).",
    )(func)


def config_file_only_option(func: F) -> F:
    """The TOML file option for commands where `--config` means something else (Kafka's
    `kafka-topics.sh --create --config key=value`)."""
    return click.option(
        "--config-file",
        "config_file",
        type=click.Path(dir_okay=False),
        is_eager=True,
        expose_value=False,
        callback=_load_config_file,
        help="TOML file with option values (keys are option names).",
    )(func)


def opt(*names: str, **kwargs: Any) -> Callable[[F], F]:
    """click.option with the MINIKAFKA_* environment variable named after the long flag."""
    long_name = next(name for name in names if name.startswith("--"))
    kwargs.setdefault("envvar", env_var(long_name))
    kwargs.setdefault("show_envvar", True)
    return click.option(*names, **kwargs)


def bootstrap_option(func: F) -> F:
    return opt(
        "--bootstrap-server",
        "bootstrap_server",
        required=True,
        metavar="HOST:PORT",
        help="Address of any broker of the cluster.",
    )(func)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _fail(message: str) -> None:
    raise click.ClickException(message)


def _one_topic(argument: str | None, option: str | None) -> str:
    """The topic given as the argument or as --topic (both only if they agree)."""
    if argument and option and argument != option:
        raise click.UsageError(f"two different topics given: {argument!r} and --topic {option!r}")
    topic = argument or option
    if not topic:
        raise click.UsageError("no topic: give --topic T (or the topic as the argument)")
    return topic


@click.group(context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, prog_name="minikafka")
def main() -> None:
    """minikafka: a replicated log broker with Kafka's replication protocol, over gRPC.

    Start a local cluster with `minikafka dev`, then use the client commands (topic,
    produce, consume, leader-election, cluster) with --bootstrap-server HOST:PORT.
    """


# ---- servers -----------------------------------------------------------------------


@main.command(context_settings=CONTEXT_SETTINGS)
@config_file_option
@opt("--id", "broker_id", type=click.IntRange(min=0), required=True, help="Broker id (>= 0).")
@opt("--listen", required=True, metavar="HOST:PORT", help="Address the gRPC server binds.")
@opt("--controller", metavar="HOST:PORT", help="Controller address (omit with --standalone).")
@opt("--data-dir", required=True, type=click.Path(file_okay=False), help="Log directory.")
@opt("--rack", help="Rack (availability zone) of this broker, for placement and KIP-392.")
@opt("--advertise", metavar="HOST:PORT", help="Address clients and brokers use to reach us.")
@opt(
    "--external-listen",
    metavar="HOST:PORT",
    help="Second listener for clients outside the brokers' network (e.g. a compose host).",
)
@opt(
    "--external-advertise",
    metavar="HOST:PORT",
    help="Address external clients use; Metadata on the external listener hands these out.",
)
@opt(
    "--standalone",
    is_flag=True,
    help="Single-node mode: no controller; the broker creates RF=1 topics itself.",
)
@opt("--metrics-listen", metavar="HOST:PORT", help="Serve Prometheus metrics on this address.")
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
@opt("--log-level", default="INFO", show_default=True, help="DEBUG, INFO, WARNING or ERROR.")
@click.option("--unsafe-test-hw-is-leo", is_flag=True, hidden=True)
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
) -> None:
    """Run a broker: Produce/Fetch for clients, replication, control from the controller."""
    from broker.app import run
    from broker.config import BrokerConfig

    if not standalone and not controller:
        _fail("a broker needs --controller HOST:PORT (or --standalone for single-node mode)")
    if standalone and controller:
        _fail("--standalone and --controller exclude each other")
    _setup_logging(log_level)
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
    )
    if unsafe_test_hw_is_leo:
        logging.getLogger(__name__).warning(
            "--unsafe-test-hw-is-leo: acknowledged writes CAN BE LOST (fault-suite self-test only)"
        )
    try:
        run(config)
    except (ConfigError, OSError) as exc:
        _fail(str(exc))


@main.command(context_settings=CONTEXT_SETTINGS)
@config_file_option
@opt("--id", "node_id", type=click.IntRange(min=0), default=0, show_default=True)
@opt("--listen", required=True, metavar="HOST:PORT", help="Address the gRPC server binds.")
@opt("--data-dir", required=True, type=click.Path(file_okay=False), help="Metadata journal dir.")
@opt("--metrics-listen", metavar="HOST:PORT", help="Serve Prometheus metrics on this address.")
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
@opt("--log-level", default="INFO", show_default=True, help="DEBUG, INFO, WARNING or ERROR.")
def controller(
    node_id: int,
    listen: str,
    data_dir: str,
    metrics_listen: str | None,
    session_timeout_ms: int,
    heartbeat_interval_ms: int,
    auto_leader_rebalance: bool,
    leader_imbalance_check_interval_ms: int,
    log_level: str,
) -> None:
    """Run the controller: cluster metadata, broker liveness, leader elections."""
    from controller.app import run
    from controller.config import ControllerConfig

    _setup_logging(log_level)
    config = ControllerConfig(
        node_id=node_id,
        listen=listen,
        data_dir=data_dir,
        metrics_listen=metrics_listen,
        session_timeout_ms=session_timeout_ms,
        heartbeat_interval_ms=heartbeat_interval_ms,
        auto_leader_rebalance_enable=auto_leader_rebalance,
        leader_imbalance_check_interval_ms=leader_imbalance_check_interval_ms,
    )
    try:
        config.validate()
    except ValueError as exc:
        _fail(str(exc))
    try:
        run(config)
    except OSError as exc:
        _fail(str(exc))


@main.command(context_settings=CONTEXT_SETTINGS)
@config_file_option
@opt("--brokers", type=click.IntRange(min=1, max=9), default=3, show_default=True)
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
    help="Brokers listen on base-port, base-port+1, ...; the controller on base-port+100."
    " 0 picks free ports.",
)
@opt("--log-level", default="INFO", show_default=True)
def dev(brokers: int, data_dir: str, base_port: int, log_level: str) -> None:
    """Run a controller and N brokers as child processes on 127.0.0.1 until Ctrl-C."""
    from minikafka.devcluster import run_dev_cluster

    try:
        run_dev_cluster(
            brokers=brokers, data_dir=Path(data_dir), base_port=base_port, log_level=log_level
        )
    except RuntimeError as exc:
        _fail(str(exc))


# ---- log tools ---------------------------------------------------------------------


@main.group(context_settings=CONTEXT_SETTINGS)
def log() -> None:
    """Inspect on-disk partition logs."""


@log.command("dump", context_settings=CONTEXT_SETTINGS)
@click.argument("path", type=click.Path(exists=True))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per batch.")
def log_dump(path: str, as_json: bool) -> None:
    """Print one line per batch of a partition directory or .log file (like kafka-dump-log.sh).

    Exits with status 1 if any batch is invalid.
    """
    import msgspec

    from broker.log.dump import dump_log, format_dump_line

    invalid = 0
    for line in dump_log(Path(path)):
        invalid += 0 if line.valid else 1
        click.echo(msgspec.json.encode(line).decode() if as_json else format_dump_line(line))
    if invalid:
        raise SystemExit(1)


# ---- client tools ------------------------------------------------------------------


def _parse_acks(value: str) -> int:
    mapping = {"all": -1, "-1": -1, "0": 0, "1": 1}
    if value not in mapping:
        raise click.BadParameter(f"acks must be 0, 1 or all, got {value!r}")
    return mapping[value]


@main.command(context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.argument("topic_arg", metavar="[TOPIC]", required=False)
@opt("--topic", help="Topic to write to (or give it as the argument).")
@opt("--key-separator", help="Split each line into key and value at the first separator.")
@opt("--partition", type=click.IntRange(min=0), help="Write every record to this partition.")
@opt("--acks", default="all", show_default=True, help="0, 1 or all.")
@opt(
    "--compression",
    type=click.Choice(["none", "gzip", "lz4", "zstd"]),
    default="none",
    show_default=True,
)
@opt("--header", "headers", multiple=True, metavar="KEY=VALUE", help="Header for every record.")
@opt("--linger-ms", type=click.IntRange(min=0), default=5, show_default=True)
@opt(
    "--max-block-ms",
    type=click.IntRange(min=0),
    default=60_000,
    show_default=True,
    help="How long to wait for the topic's metadata (e.g. a topic being created) and "
    "for buffer space before failing.",
)
def produce(
    topic_arg: str | None,
    bootstrap_server: str,
    topic: str | None,
    key_separator: str | None,
    partition: int | None,
    acks: str,
    compression: str,
    headers: tuple[str, ...],
    linger_ms: int,
    max_block_ms: int,
) -> None:
    """Read lines from stdin and write each as one record; prints nothing on success.

    The topic is `--topic T` (as kafka-console-producer) or the argument TOPIC.
    """
    from client import Producer

    topic = _one_topic(topic_arg, topic)

    try:
        header_list = [(k, v.encode()) for k, v in parse_key_values(headers).items()]
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from exc
    producer = Producer(
        bootstrap_servers=bootstrap_server,
        acks=_parse_acks(acks),
        compression_type=None if compression == "none" else compression,
        linger_ms=linger_ms,
        max_block_ms=max_block_ms,
    )
    futures = []
    try:
        for raw in sys.stdin.buffer:
            line = raw.rstrip(b"\r\n")
            key: bytes | None = None
            if key_separator:
                sep = key_separator.encode()
                if sep not in line:
                    _fail(f"line {line[:50]!r} has no key separator {key_separator!r}")
                key, line = line.split(sep, 1)
            futures.append(
                producer.send(
                    topic, line, key=key, partition=partition, headers=header_list or None
                )
            )
        producer.flush()
        for future in futures:
            future.result()
    except Exception as exc:
        if isinstance(exc, click.ClickException):
            raise
        _fail(f"produce failed: {exc}")
    finally:
        producer.close()


@main.command(context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.argument("topic_arg", metavar="[TOPIC]", required=False)
@opt("--topic", help="Topic to read (or give it as the argument).")
@opt("--partition", type=click.IntRange(min=0), help="Read only this partition.")
@opt("--from-beginning", is_flag=True, help="Start at the earliest offset (default: the end).")
@opt("--offset", type=click.IntRange(min=0), help="Start at this offset (needs --partition).")
@opt("--max-messages", type=click.IntRange(min=1), help="Exit after this many records.")
@opt(
    "--timeout-ms",
    type=click.IntRange(min=0),
    help="Exit when no record arrives for this long (default: wait forever).",
)
@opt("--print-key", is_flag=True, help="Print KEY<separator>VALUE.")
@opt("--print-offset", is_flag=True, help="Prefix each line with partition:offset.")
@opt("--key-separator", default="\t", show_default=repr("\t"))
def consume(
    topic_arg: str | None,
    bootstrap_server: str,
    topic: str | None,
    partition: int | None,
    from_beginning: bool,
    offset: int | None,
    max_messages: int | None,
    timeout_ms: int | None,
    print_key: bool,
    print_offset: bool,
    key_separator: str,
) -> None:
    """Print records of a topic, one per line (values as UTF-8 where possible).

    The topic is `--topic T` (as kafka-console-consumer) or the argument TOPIC.
    """
    from client import Consumer, TopicPartition

    topic = _one_topic(topic_arg, topic)

    if offset is not None and partition is None:
        _fail("--offset needs --partition")
    consumer = Consumer(
        bootstrap_servers=bootstrap_server,
        auto_offset_reset="earliest" if from_beginning else "latest",
    )
    seen = 0
    out = sys.stdout.buffer
    try:
        if partition is not None:
            tp = TopicPartition(topic, partition)
            consumer.assign([tp])
            if offset is not None:
                consumer.seek(tp, offset)
            elif from_beginning:
                consumer.seek_to_beginning(tp)
        else:
            consumer.subscribe([topic])
        idle_ms = 0
        while max_messages is None or seen < max_messages:
            batch = consumer.poll(timeout_ms=200)
            if not batch:
                idle_ms += 200
                if timeout_ms is not None and idle_ms >= timeout_ms:
                    break
                continue
            idle_ms = 0
            for records in batch.values():
                for record in records:
                    parts: list[bytes] = []
                    if print_offset:
                        parts.append(f"{record.partition}:{record.offset}".encode() + b"\t")
                    if print_key:
                        parts.append((record.key or b"") + key_separator.encode())
                    parts.append(record.value or b"")
                    out.write(b"".join(parts) + b"\n")
                    seen += 1
                    if max_messages is not None and seen >= max_messages:
                        break
                if max_messages is not None and seen >= max_messages:
                    break
            out.flush()
    except KeyboardInterrupt:
        pass
    except Exception as exc:
        _fail(f"consume failed: {exc}")
    finally:
        out.flush()
        consumer.close()


@main.group(context_settings=CONTEXT_SETTINGS)
def topic() -> None:
    """Create, describe, list, delete and configure topics."""


@topic.command("create", context_settings=CONTEXT_SETTINGS)
@config_file_only_option
@bootstrap_option
@click.argument("name")
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
def topic_create(
    bootstrap_server: str,
    name: str,
    partitions: int,
    replication_factor: int,
    configs: tuple[str, ...],
) -> None:
    """Create topic NAME (here --config KEY=VALUE is a topic config; the options file is
    --config-file FILE)."""
    from client import Admin, NewTopic

    try:
        config_map = parse_key_values(configs)
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from exc
    with Admin(bootstrap_servers=bootstrap_server) as admin:
        try:
            admin.create_topics(
                [NewTopic(name, partitions, replication_factor, configs=config_map)]
            )
        except Exception as exc:
            _fail(str(exc))
    click.echo(f"Created topic {name}.")


def _describe_lines(topics: list[Any], *, filter_name: str | None) -> list[str]:
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
            if p.state and p.state != "ONLINE":
                line += f"\tState: {p.state}"
            lines.append(line)
    return lines


@topic.command("describe", context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.argument("name", required=False)
@click.option("--under-replicated-partitions", "under_replicated", is_flag=True)
@click.option("--under-min-isr-partitions", "under_min_isr", is_flag=True)
@click.option("--unavailable-partitions", "unavailable", is_flag=True)
def topic_describe(
    bootstrap_server: str,
    name: str | None,
    under_replicated: bool,
    under_min_isr: bool,
    unavailable: bool,
) -> None:
    """Describe topic NAME (or every topic) in Kafka's line format."""
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
        _fail("choose at most one of the partition filters")
    with Admin(bootstrap_servers=bootstrap_server) as admin:
        try:
            topics = admin.describe_topics([name] if name else None)
        except Exception as exc:
            _fail(f"cannot describe: {exc}")
    for topic_info in topics:
        if not chosen:
            configs = ",".join(f"{k}={v}" for k, v in sorted(topic_info.configs.items()))
            click.echo(
                f"Topic: {topic_info.name}\tPartitionCount: {len(topic_info.partitions)}\t"
                f"ReplicationFactor: "
                f"{len(topic_info.partitions[0].replicas) if topic_info.partitions else 0}\t"
                f"Configs: {configs}"
            )
        for line in _describe_lines([topic_info], filter_name=chosen[0] if chosen else None):
            click.echo(line)


@topic.command("list", context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
def topic_list(bootstrap_server: str) -> None:
    """List topic names."""
    from client import Admin

    with Admin(bootstrap_servers=bootstrap_server) as admin:
        for name in sorted(admin.list_topics()):
            click.echo(name)


@topic.command("delete", context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.argument("name")
def topic_delete(bootstrap_server: str, name: str) -> None:
    """Delete topic NAME and its data."""
    from client import Admin

    with Admin(bootstrap_servers=bootstrap_server) as admin:
        try:
            admin.delete_topics([name])
        except Exception as exc:
            _fail(str(exc))
    click.echo(f"Deleted topic {name}.")


@topic.command("alter-config", context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.argument("name")
@click.option("--set", "set_pairs", multiple=True, metavar="KEY=VALUE")
@click.option("--delete", "delete_keys", multiple=True, metavar="KEY")
def topic_alter_config(
    bootstrap_server: str, name: str, set_pairs: tuple[str, ...], delete_keys: tuple[str, ...]
) -> None:
    """Set or delete configs of topic NAME."""
    from client import Admin

    if not set_pairs and not delete_keys:
        _fail("nothing to change: give --set KEY=VALUE and/or --delete KEY")
    try:
        updates = parse_key_values(set_pairs)
    except ConfigError as exc:
        raise click.BadParameter(str(exc)) from exc
    with Admin(bootstrap_servers=bootstrap_server) as admin:
        try:
            admin.alter_configs(name, updates, delete=list(delete_keys))
        except Exception as exc:
            _fail(str(exc))
    click.echo(f"Updated configs of topic {name}.")


@main.command("leader-election", context_settings=CONTEXT_SETTINGS)
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

    if all_topic_partitions == bool(topic_name):
        _fail("give either --topic T [--partition P] or --all-topic-partitions")
    if partition is not None and not topic_name:
        _fail("--partition needs --topic")
    with Admin(bootstrap_servers=bootstrap_server) as admin:
        partitions: list[TopicPartition] | None = None
        if topic_name:
            if partition is not None:
                partitions = [TopicPartition(topic_name, partition)]
            else:
                described = admin.describe_topics([topic_name])
                partitions = [
                    TopicPartition(topic_name, p.partition) for p in described[0].partitions
                ]
        try:
            results = admin.elect_leaders(
                "unclean" if election_type == "unclean" else "preferred", partitions
            )
        except Exception as exc:
            _fail(f"election failed: {exc}")
    kind = election_type.upper()
    done = [f"{r.topic}-{r.partition}" for r in results if r.error is None]
    not_needed = [
        f"{r.topic}-{r.partition}"
        for r in results
        if r.error is not None and r.error_code == ErrorCode.ELECTION_NOT_NEEDED
    ]
    failed = [
        r for r in results if r.error is not None and r.error_code != ErrorCode.ELECTION_NOT_NEEDED
    ]
    # kafka-leader-election.sh's output lines, so scripts written for it work.
    if done:
        click.echo(
            f"Successfully completed leader election ({kind}) for partitions {', '.join(done)}"
        )
    if not_needed:
        click.echo(f"Valid replica already elected for partitions {', '.join(not_needed)}")
    for result in failed:
        click.echo(
            f"Error completing leader election ({kind}) for partition: "
            f"{result.topic}-{result.partition}: {result.error}"
        )
    if failed:
        click.echo(f"{len(failed)} replica(s) could not be elected", err=True)
        raise SystemExit(1)


@main.group(context_settings=CONTEXT_SETTINGS)
def cluster() -> None:
    """Cluster-wide information."""


@cluster.command("status", context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.option("--json", "as_json", is_flag=True)
def cluster_status(bootstrap_server: str, as_json: bool) -> None:
    """Show brokers, the controller and partition health."""
    from client import Admin

    with Admin(bootstrap_servers=bootstrap_server) as admin:
        try:
            info = admin.describe_cluster()
        except Exception as exc:
            _fail(f"cannot describe the cluster: {exc}")
    if as_json:
        click.echo(json.dumps(info.to_dict(), indent=2, sort_keys=True))
        return
    click.echo(f"Cluster: {info.cluster_id}  Controller: {info.controller_id}")
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
