"""The `minikafka` command line: servers (broker, controller, dev) and client tools.

Every option can also be set in a TOML file (`--config FILE`, keys are option names) or
with a `MINIKAFKA_<OPTION>` environment variable (`--data-dir` -> `MINIKAFKA_DATA_DIR`);
flags win over the environment, which wins over the file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from minikafka import __version__
from minikafka.config import (
    ConfigError,
    env_var,
    load_toml,
    parse_bootstrap_servers,
    parse_host_port,
    parse_key_values,
)
from minikafka.errors import ErrorCode, MiniKafkaError

if TYPE_CHECKING:
    from client import Admin
    from client.admin import TopicDescription

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

#: Exit statuses of a client tool stopped by a signal, as a shell reports a process killed
#: by it (and as Kafka's JVM tools exit on Ctrl-C): 128 + SIGINT, 128 + SIGPIPE.
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141

#: Set to see the Python traceback of an unexpected error instead of its one-line summary.
DEBUG_ENV = "MINIKAFKA_DEBUG"


# ---- errors --------------------------------------------------------------------------


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _error_text(exc: BaseException) -> str:
    """One line for an error raised by a command: the message of the errors we expect
    (client, config, OS), the type too for anything else."""
    from client.errors import KafkaConnectionError, NoBrokersAvailable

    text = _one_line(str(exc))
    if isinstance(exc, KafkaConnectionError) and "UNIMPLEMENTED" in text:
        return (
            f"{text} (is that address a minikafka broker? --bootstrap-server takes a "
            "broker's address, not the controller's)"
        )
    if isinstance(exc, NoBrokersAvailable):
        return f"{text} (is the cluster running, and --bootstrap-server a broker's address?)"
    if isinstance(exc, MiniKafkaError | ConfigError | OSError | ValueError | TimeoutError):
        return text or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _exit_now(status: int) -> NoReturn:
    """Leave without running interpreter shutdown: the client's event loop threads may
    still hold a request the user no longer wants, and their teardown only adds noise."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


def _exit_on_broken_pipe() -> NoReturn:
    """The reader of our stdout went away (`minikafka consume ... | head`): stop quietly,
    as a Unix filter killed by SIGPIPE does."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    _exit_now(EXIT_BROKEN_PIPE)


class MainGroup(click.Group):
    """The root command: turns every error of a subcommand into one `Error: ...` line on
    stderr with exit status 1 (click's usage errors keep status 2), Ctrl-C into a quiet
    exit with status 130 and a closed stdout pipe into a quiet exit with status 141."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except KeyboardInterrupt:
            _exit_now(EXIT_INTERRUPTED)
        except BrokenPipeError:
            _exit_on_broken_pipe()
        except Exception as exc:
            if os.environ.get(DEBUG_ENV):
                raise
            raise click.ClickException(_error_text(exc)) from exc


def _fail(message: str) -> NoReturn:
    raise click.ClickException(message)


# ---- options -------------------------------------------------------------------------


def _option_keys(command: click.Command) -> dict[str, tuple[click.Parameter, bool]]:
    """TOML key (option name with underscores) -> (parameter, value is inverted)."""
    keys: dict[str, tuple[click.Parameter, bool]] = {}
    for param in command.params:
        if not isinstance(param, click.Option) or param.name in (None, "config_file"):
            continue
        if param.expose_value is False:
            continue
        for name in param.opts:
            if name.startswith("--"):
                keys.setdefault(name[2:].replace("-", "_"), (param, False))
        for name in param.secondary_opts:
            if name.startswith("--"):
                keys.setdefault(name[2:].replace("-", "_"), (param, True))
        keys.setdefault(param.name, (param, False))
    return keys


def _all_option_keys(ctx: click.Context) -> set[str]:
    """The TOML keys of every minikafka command."""
    root = ctx.find_root().command
    keys: set[str] = set()
    todo: list[click.Command] = [root]
    while todo:
        command = todo.pop()
        keys.update(_option_keys(command))
        if isinstance(command, click.Group):
            todo.extend(command.commands.values())
    return keys


def _toml_scalar(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    return value


def _file_defaults(ctx: click.Context, raw: dict[str, Any], source: str) -> dict[str, Any]:
    """The values of a TOML options file as click defaults for this command's options.

    Keys are option names (`bootstrap-server` or `bootstrap_server`); a repeatable option
    takes a list (or, for KEY=VALUE options, a table). Options of other commands are
    ignored, so that one file can serve several commands; a key that is no option of
    any command (a typo) is reported on stderr and ignored, as Kafka does with unknown
    properties.
    """
    assert ctx.command is not None
    keys = _option_keys(ctx.command)
    defaults: dict[str, Any] = {}
    for key, value in raw.items():
        found = keys.get(key)
        shown = key.replace("_", "-")
        if found is None:
            if key in _all_option_keys(ctx):
                continue  # an option of another command: one file can serve several
            if isinstance(value, dict):
                problem = f"table [{key}] ignored (options go at the top level of the file)"
            else:
                problem = f"no minikafka command has an option --{shown}; ignored"
            click.echo(f"Warning: config file {source}: {problem}", err=True)
            continue
        param, inverted = found
        assert param.name is not None
        if param.multiple:
            if isinstance(value, dict):
                value = [f"{k}={_toml_scalar(v)}" for k, v in value.items()]
            elif not isinstance(value, list):
                value = [value]
            if any(isinstance(item, list | dict) for item in value):
                raise click.BadParameter(
                    f"config file {source}: --{shown} takes a list of values",
                    ctx=ctx,
                    param_hint="'--config-file'",
                )
            value = [_toml_scalar(item) for item in value]
        elif isinstance(value, list | dict):
            raise click.BadParameter(
                f"config file {source}: --{shown} takes one value, not a "
                f"{'list' if isinstance(value, list) else 'table'}",
                ctx=ctx,
                param_hint="'--config-file'",
            )
        elif inverted:
            if not isinstance(value, bool):
                raise click.BadParameter(
                    f"config file {source}: --{shown} takes true or false",
                    ctx=ctx,
                    param_hint="'--config-file'",
                )
            value = not value
        defaults[param.name] = value
    return defaults


def _load_config_file(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if not value:
        return
    try:
        raw = load_toml(value)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc
    ctx.default_map = {**(ctx.default_map or {}), **_file_defaults(ctx, raw, value)}


CONFIG_FILE_ENV = env_var("--config-file")


def config_file_option(func: F) -> F:
    return click.option(
        "--config-file",
        "--config",
        "config_file",
        type=click.Path(dir_okay=False),
        is_eager=True,
        expose_value=False,
        callback=_load_config_file,
        envvar=CONFIG_FILE_ENV,
        show_envvar=True,
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
        envvar=CONFIG_FILE_ENV,
        show_envvar=True,
        help="TOML file with option values (keys are option names).",
    )(func)


def opt(*names: str, **kwargs: Any) -> Callable[[F], F]:
    """click.option with the MINIKAFKA_* environment variable named after the long flag."""
    long_name = next(name for name in names if name.startswith("--"))
    kwargs.setdefault("envvar", env_var(long_name))
    kwargs.setdefault("show_envvar", True)
    return click.option(*names, **kwargs)


def _check_bootstrap(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is None:
        return None
    try:
        return ",".join(parse_bootstrap_servers(value))
    except ConfigError as exc:
        raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc


def bootstrap_option(func: F) -> F:
    return opt(
        "--bootstrap-server",
        "bootstrap_server",
        required=True,
        metavar="HOST:PORT",
        callback=_check_bootstrap,
        help="Address of any broker of the cluster (or several, comma-separated).",
    )(func)


def _address_check(*, listen: bool) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A callback that checks a HOST:PORT option; port 0 (any free port) only where we
    listen."""

    def check(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return None
        try:
            _host, port = parse_host_port(value, what="address")
        except ConfigError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from exc
        if port == 0 and not listen:
            raise click.BadParameter(
                f"address {value!r}: port 0 is not a port", ctx=ctx, param=param
            )
        return value.strip()

    return check


LISTEN = _address_check(listen=True)
CONNECT = _address_check(listen=False)


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


LOG_LEVELS = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False)


def _one_topic(argument: str | None, option: str | None) -> str:
    """The topic given as the argument or as --topic (both only if they agree)."""
    if argument is not None and option is not None and argument != option:
        raise click.UsageError(f"two different topics given: {argument!r} and --topic {option!r}")
    topic = argument if argument is not None else option
    if topic is None:
        raise click.UsageError("no topic: give --topic T (or the topic as the argument)")
    return topic


def _key_values(pairs: Sequence[str], option: str) -> dict[str, str]:
    try:
        return parse_key_values(list(pairs))
    except ConfigError as exc:
        hint = ""
        if option == "--config" and any(p.endswith(".toml") and "=" not in p for p in pairs):
            hint = " (here --config is a topic config; the options file is --config-file FILE)"
        raise click.BadParameter(f"{exc}{hint}", param_hint=f"'{option}'") from exc


def _describe_topics(admin: Admin, names: list[str]) -> list[TopicDescription]:
    """`names` as the brokers describe them; a topic they do not know yet is looked up at
    the controller, which knows a topic created a moment ago before every broker does."""
    from client.errors import BrokerResponseError

    try:
        return admin.describe_topics(names)
    except BrokerResponseError:
        pass  # e.g. UNKNOWN_TOPIC_OR_PARTITION from a broker that has not heard of it yet
    found = {t.name: t for t in admin.describe_cluster(names).topics}
    result: list[TopicDescription] = []
    for name in names:
        info = found.get(name)
        if info is None or info.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            _fail(f"topic {name!r} does not exist")
        if info.error_code != ErrorCode.NONE:
            _fail(f"topic {name!r}: {_code_name(info.error_code)}")
        result.append(info)
    return result


def _code_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error code {code}"


@click.group(cls=MainGroup, context_settings=CONTEXT_SETTINGS)
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
@opt(
    "--listen",
    required=True,
    metavar="HOST:PORT",
    callback=LISTEN,
    help="Address the gRPC server binds.",
)
@opt(
    "--controller",
    metavar="HOST:PORT",
    callback=CONNECT,
    help="Controller address (omit with --standalone).",
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
@opt("--log-level", type=LOG_LEVELS, default="INFO", show_default=True)
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
@opt(
    "--listen",
    required=True,
    metavar="HOST:PORT",
    callback=LISTEN,
    help="Address the gRPC server binds.",
)
@opt("--data-dir", required=True, type=click.Path(file_okay=False), help="Metadata journal dir.")
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
@opt("--log-level", type=LOG_LEVELS, default="INFO", show_default=True)
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

    if heartbeat_interval_ms >= session_timeout_ms:
        raise click.UsageError(
            f"--heartbeat-interval-ms ({heartbeat_interval_ms}) must be smaller than "
            f"--session-timeout-ms ({session_timeout_ms})"
        )
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
@opt("--log-level", type=LOG_LEVELS, default="INFO", show_default=True)
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
    from broker.log.segment import LOG_SUFFIX

    where = Path(path)
    if where.is_dir() and not any(p.suffix == LOG_SUFFIX for p in where.iterdir()):
        _fail(
            f"{where} holds no {LOG_SUFFIX} segment files: give a partition directory "
            f"(DATA_DIR/TOPIC-PARTITION) or a {LOG_SUFFIX} file"
        )
    invalid = 0
    try:
        for line in dump_log(where):
            invalid += 0 if line.valid else 1
            click.echo(msgspec.json.encode(line).decode() if as_json else format_dump_line(line))
    except ValueError as exc:  # neither a partition directory nor a .log file
        _fail(str(exc))
    if invalid:
        raise SystemExit(1)


# ---- client tools ------------------------------------------------------------------


ACKS = click.Choice(["all", "-1", "0", "1"])

#: The producer's request timeout (the client's default) unless the delivery timeout is
#: shorter.
REQUEST_TIMEOUT_MS = 30_000


def _read_lines(stream: Any) -> Iterable[bytes]:
    """The lines of a binary stream without their line ending (LF or CRLF)."""
    for raw in stream:
        line: bytes = raw
        if line.endswith(b"\n"):
            line = line[:-1]
            if line.endswith(b"\r"):
                line = line[:-1]
        yield line


def _preview(line: bytes, limit: int = 60) -> str:
    text = line[:limit].decode("utf-8", "backslashreplace")
    return repr(text + ("..." if len(line) > limit else ""))


@main.command(context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.argument("topic_arg", metavar="[TOPIC]", required=False)
@opt("--topic", help="Topic to write to (or give it as the argument).")
@opt(
    "--key-separator",
    help="Split each line into key and value at the first separator (a line without it "
    "is an error).",
)
@opt("--partition", type=click.IntRange(min=0), help="Write every record to this partition.")
@opt("--acks", type=ACKS, default="all", show_default=True, help="0, 1 or all (-1).")
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
@opt(
    "--delivery-timeout-ms",
    type=click.IntRange(min=1),
    default=120_000,
    show_default=True,
    help="Fail when a record is not acknowledged within this time (retriable errors such "
    "as NOT_ENOUGH_REPLICAS are retried until then).",
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
    delivery_timeout_ms: int,
) -> None:
    """Read lines from stdin and write each as one record; prints nothing on success.

    The topic is `--topic T` (as kafka-console-producer) or the argument TOPIC. Every
    record is acknowledged (per --acks) before the command exits with status 0; on
    Ctrl-C the lines read so far are still sent.
    """
    from client import Producer

    name = _one_topic(topic_arg, topic)
    if key_separator is not None and not key_separator:
        raise click.BadParameter("must not be empty", param_hint="'--key-separator'")
    separator = key_separator.encode() if key_separator else None
    header_list = [(k, v.encode()) for k, v in _key_values(headers, "--header").items()]
    if delivery_timeout_ms <= linger_ms:
        raise click.UsageError(
            f"--delivery-timeout-ms ({delivery_timeout_ms}) must be larger than --linger-ms "
            f"({linger_ms})"
        )
    producer = Producer(
        bootstrap_servers=bootstrap_server,
        acks={"all": -1, "-1": -1, "0": 0, "1": 1}[acks],
        compression_type=None if compression == "none" else compression,
        linger_ms=linger_ms,
        max_block_ms=max_block_ms,
        delivery_timeout_ms=delivery_timeout_ms,
        # The client wants delivery >= linger + request timeout (as Kafka's does).
        request_timeout_ms=min(REQUEST_TIMEOUT_MS, delivery_timeout_ms - linger_ms),
    )
    futures = []
    try:
        for number, line in enumerate(_read_lines(sys.stdin.buffer), start=1):
            key: bytes | None = None
            value = line
            if separator is not None:
                key, found, value = line.partition(separator)
                if not found:
                    _fail(f"line {number} has no key separator {key_separator!r}: {_preview(line)}")
            futures.append(
                producer.send(
                    name, value, key=key, partition=partition, headers=header_list or None
                )
            )
        producer.flush()
        for future in futures:
            future.result()
    except MiniKafkaError as exc:
        _fail(f"produce failed: {_error_text(exc)}")
    finally:
        producer.close()


def _parse_offset(value: str | None) -> int | str | None:
    """Kafka's --offset: a non-negative offset, `earliest` or `latest`."""
    if value is None:
        return None
    text = value.strip().lower()
    if text in ("earliest", "latest"):
        return text
    if text.isascii() and text.isdigit():
        return int(text)
    raise click.BadParameter(
        f"{value!r} is not an offset: give a number >= 0, earliest or latest",
        param_hint="'--offset'",
    )


@main.command(context_settings=CONTEXT_SETTINGS)
@config_file_option
@bootstrap_option
@click.argument("topic_arg", metavar="[TOPIC]", required=False)
@opt("--topic", help="Topic to read (or give it as the argument).")
@opt("--partition", type=click.IntRange(min=0), help="Read only this partition.")
@opt("--from-beginning", is_flag=True, help="Start at the earliest offset (default: the end).")
@opt(
    "--offset",
    metavar="OFFSET",
    help="Start at this offset, or earliest / latest (needs --partition).",
)
@opt("--max-messages", type=click.IntRange(min=1), help="Exit after this many records.")
@opt(
    "--timeout-ms",
    type=click.IntRange(min=0),
    help="Exit when no record arrives for this long (default: wait forever).",
)
@opt("--print-key", is_flag=True, help="Print KEY<separator>VALUE (a missing key as null).")
@opt("--print-offset", is_flag=True, help="Prefix each line with partition:offset.")
@opt("--key-separator", default="\t", show_default="tab")
def consume(
    topic_arg: str | None,
    bootstrap_server: str,
    topic: str | None,
    partition: int | None,
    from_beginning: bool,
    offset: str | None,
    max_messages: int | None,
    timeout_ms: int | None,
    print_key: bool,
    print_offset: bool,
    key_separator: str,
) -> None:
    """Print records of a topic, one per line (values as they are; a missing value as null).

    The topic is `--topic T` (as kafka-console-consumer) or the argument TOPIC. Exits
    after --max-messages records or --timeout-ms without one (status 0), or on Ctrl-C
    (status 130, as Kafka's console consumer).
    """
    from client import Admin, Consumer, TopicPartition

    name = _one_topic(topic_arg, topic)
    start = _parse_offset(offset)
    if start is not None and partition is None:
        raise click.UsageError("--offset needs --partition")
    if start is not None and from_beginning:
        raise click.UsageError("--offset and --from-beginning exclude each other")
    # The consumer first: it fails at once when no broker answers.
    with Consumer(
        bootstrap_servers=bootstrap_server,
        # Where to start, also for --offset earliest / latest: a partition starts at the
        # reset position (a seek_to_beginning() right after assign() can lose the race
        # with that reset).
        auto_offset_reset="earliest" if from_beginning or start == "earliest" else "latest",
    ) as consumer:
        with Admin(bootstrap_servers=bootstrap_server) as admin:
            (described,) = _describe_topics(admin, [name])
        partitions = sorted(p.partition for p in described.partitions)
        if partition is not None and partition not in partitions:
            _fail(
                f"partition {partition} of topic {name!r} does not exist "
                f"(it has {len(partitions)} partition{'s' if len(partitions) != 1 else ''})"
            )
        if partition is not None:
            tp = TopicPartition(name, partition)
            consumer.assign([tp])
            if isinstance(start, int):
                _warn_outside_log(consumer, tp, start)
                consumer.seek(tp, start)
        else:
            consumer.subscribe([name])
        _print_records(
            consumer,
            max_messages=max_messages,
            timeout_ms=timeout_ms,
            print_key=print_key,
            print_offset=print_offset,
            key_separator=key_separator.encode(),
        )


def _warn_outside_log(consumer: Any, tp: Any, offset: int) -> None:
    """Kafka resets an offset outside the log to the end (or, with --from-beginning, the
    start) without a word; we do the same, but say so."""
    first = consumer.beginning_offsets([tp])[tp]
    end = consumer.end_offsets([tp])[tp]
    if first <= offset <= end:
        return
    click.echo(
        f"Warning: offset {offset} is outside {tp.topic}-{tp.partition} (offsets {first} to "
        f"{end}); reading from the end",
        err=True,
    )


def _print_records(
    consumer: Any,
    *,
    max_messages: int | None,
    timeout_ms: int | None,
    print_key: bool,
    print_offset: bool,
    key_separator: bytes,
) -> None:
    import time

    out = sys.stdout.buffer
    seen = 0
    idle_since = time.monotonic()
    while max_messages is None or seen < max_messages:
        wait_ms = 200
        if timeout_ms is not None:
            left_ms = timeout_ms - (time.monotonic() - idle_since) * 1000
            wait_ms = int(min(wait_ms, max(left_ms, 0)))
        limit = None if max_messages is None else max_messages - seen
        batch = consumer.poll(timeout_ms=wait_ms, max_records=limit)
        if not batch:
            if timeout_ms is not None and (time.monotonic() - idle_since) * 1000 >= timeout_ms:
                break
            continue
        idle_since = time.monotonic()
        for records in batch.values():
            for record in records:
                if max_messages is not None and seen >= max_messages:
                    break
                parts: list[bytes] = []
                if print_offset:
                    parts.append(f"{record.partition}:{record.offset}\t".encode())
                if print_key:
                    key = b"null" if record.key is None else record.key
                    parts.append(key + key_separator)
                parts.append(b"null" if record.value is None else record.value)
                parts.append(b"\n")
                out.write(b"".join(parts))
                seen += 1
        out.flush()


@main.group(context_settings=CONTEXT_SETTINGS)
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

    topic_name = _one_topic(name, topic_option)
    config_map = _key_values(configs, "--config")
    with Admin(bootstrap_servers=bootstrap_server) as admin:
        try:
            admin.create_topics(
                [NewTopic(topic_name, partitions, replication_factor, configs=config_map)]
            )
        except TopicAlreadyExistsError as exc:
            if if_not_exists:
                return
            _fail(_error_text(exc))
    click.echo(f"Created topic {topic_name}.")


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
@click.argument("names", metavar="[NAME]...", nargs=-1)
@_topic_option
@click.option("--under-replicated-partitions", "under_replicated", is_flag=True)
@click.option("--under-min-isr-partitions", "under_min_isr", is_flag=True)
@click.option("--unavailable-partitions", "unavailable", is_flag=True)
def topic_describe(
    bootstrap_server: str,
    names: tuple[str, ...],
    topic_option: str | None,
    under_replicated: bool,
    under_min_isr: bool,
    unavailable: bool,
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
    with Admin(bootstrap_servers=bootstrap_server) as admin:
        topics = _describe_topics(admin, wanted) if wanted else admin.describe_topics(None)
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

    topic_name = _one_topic(name, topic_option)
    with Admin(bootstrap_servers=bootstrap_server) as admin:
        try:
            admin.delete_topics([topic_name])
        except UnknownTopicOrPartitionError as exc:
            if if_exists:
                return
            _fail(_error_text(exc))
    click.echo(f"Deleted topic {topic_name}.")


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

    topic_name = _one_topic(name, topic_option)
    if not set_pairs and not delete_keys:
        raise click.UsageError("nothing to change: give --set KEY=VALUE and/or --delete KEY")
    updates = _key_values(set_pairs, "--set")
    with Admin(bootstrap_servers=bootstrap_server) as admin:
        admin.alter_configs(topic_name, updates, delete=list(delete_keys))
    click.echo(f"Updated configs of topic {topic_name}.")


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

    if partition is not None and topic_name is None:
        raise click.UsageError("--partition needs --topic")
    if all_topic_partitions == (topic_name is not None):
        raise click.UsageError("give either --topic T [--partition P] or --all-topic-partitions")
    kind = election_type.lower()
    with Admin(bootstrap_servers=bootstrap_server) as admin:
        partitions: list[TopicPartition] | None = None
        if topic_name is not None:
            if partition is not None:
                partitions = [TopicPartition(topic_name, partition)]
            else:
                (described,) = _describe_topics(admin, [topic_name])
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
        reason = result.error_message or _code_name(result.error_code)
        click.echo(
            f"Error completing leader election ({label}) for partition: "
            f"{result.topic}-{result.partition}: {_one_line(reason)} "
            f"[{_code_name(result.error_code)}]"
        )
    if failed:
        _fail(f"{len(failed)} replica(s) could not be elected")


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
        info = admin.describe_cluster()
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
