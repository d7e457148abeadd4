"""Shared pieces of the `minikafka` command: option helpers (TOML file, environment,
bootstrap addresses), error reporting and exit statuses."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import click

from minikafka.config import (
    ConfigError,
    env_var,
    load_toml,
    parse_bootstrap_servers,
    parse_host_port,
    parse_key_values,
)
from minikafka.errors import ErrorCode, MiniKafkaError, code_name

if TYPE_CHECKING:
    import grpc

    from client import Admin
    from client.admin import TopicDescription

F = TypeVar("F", bound=Callable[..., Any])

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"], "max_content_width": 100}

#: Exit statuses of a client tool stopped by a signal, as a shell reports a process killed
#: by it (and as Kafka's JVM tools exit on Ctrl-C): 128 + SIGINT, 128 + SIGPIPE.
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
EXIT_TERMINATED = 143


class Terminated(BaseException):
    """SIGTERM as an exception (see `GracefulStop`): `with` blocks run, then the tool
    exits with status 143."""


class GracefulStop:
    """SIGINT / SIGTERM for a command that must stop at a safe point (a group member that
    commits what it printed): the first signal only asks it to stop (`requested`); a
    second one, while it still runs, interrupts it as a plain Ctrl-C would; once it is
    `closing` (committing, leaving its group) further signals are ignored. The command
    then calls `exit_if_requested` for the exit status of the signal (130 or 143), as
    Kafka's tools run their shutdown hooks on either."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.closing = False

    def install(self) -> None:
        import signal

        signal.signal(signal.SIGINT, self._handle)
        signal.signal(signal.SIGTERM, self._handle)

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame: object) -> None:
        if self.closing:
            return
        if self.signum is None:
            self.signum = signum
            return
        self._raise(signum)

    @staticmethod
    def _raise(signum: int) -> NoReturn:
        import signal

        if signum == signal.SIGINT:
            raise KeyboardInterrupt
        raise Terminated

    def exit_if_requested(self) -> None:
        if self.signum is not None:
            self._raise(self.signum)


#: Set to see the Python traceback of an unexpected error instead of its one-line summary.
DEBUG_ENV = "MINIKAFKA_DEBUG"


# ---- errors --------------------------------------------------------------------------


def one_line(text: str) -> str:
    return " ".join(text.split())


def error_text(exc: BaseException) -> str:
    """One line for an error raised by a command: the message of the errors we expect
    (client, config, OS), the type too for anything else."""
    from client.errors import KafkaConnectionError, NoBrokersAvailable

    text = one_line(str(exc))
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
    exit with status 130 (SIGTERM, where a command asks for it, with 143) and a closed
    stdout pipe into a quiet exit with status 141."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except KeyboardInterrupt:
            _exit_now(EXIT_INTERRUPTED)
        except Terminated:
            _exit_now(EXIT_TERMINATED)
        except BrokenPipeError:
            _exit_on_broken_pipe()
        except Exception as exc:
            if os.environ.get(DEBUG_ENV):
                raise
            raise click.ClickException(error_text(exc)) from exc


def fail(message: str) -> NoReturn:
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


_TLS_META = "minikafka.client_tls"


def _keep_tls_setting(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is not None and param.name is not None:
        ctx.meta.setdefault(_TLS_META, {})[param.name] = value


def client_security() -> dict[str, Any]:
    """The client settings of the command's `--ssl-cafile/--ssl-certfile/--ssl-keyfile`
    (kafka-python's names): `security_protocol="SSL"` when any is given, {} otherwise."""
    given: dict[str, str] = click.get_current_context().meta.get(_TLS_META, {})
    if not given:
        return {}
    return {"security_protocol": "SSL", **given}


def grpc_channel(address: str) -> grpc.Channel:
    """A blocking channel to a broker or controller with the command's TLS settings
    (`tls_client_options`): TLS when given, plaintext otherwise."""
    from client.errors import KafkaConfigurationError
    from client.security import client_tls
    from minikafka.tls import open_sync_channel

    settings = client_security()
    try:
        tls = (
            client_tls(
                security_protocol="SSL",
                ssl_cafile=settings.get("ssl_cafile"),
                ssl_certfile=settings.get("ssl_certfile"),
                ssl_keyfile=settings.get("ssl_keyfile"),
                ssl_check_hostname=True,
            )
            if settings
            else None
        )
    except KafkaConfigurationError as exc:
        fail(str(exc))
    return open_sync_channel(address, [], tls)


def bootstrap_option(func: F) -> F:
    """`--bootstrap-server`, and the TLS files a client of a TLS cluster needs (read back
    with `client_security()`)."""
    return opt(
        "--bootstrap-server",
        "bootstrap_server",
        required=True,
        metavar="HOST:PORT",
        callback=_check_bootstrap,
        help="Address of any broker of the cluster (or several, comma-separated).",
    )(tls_client_options(func))


def tls_client_options(func: F) -> F:
    """`--ssl-cafile`, `--ssl-certfile`, `--ssl-keyfile` (read back with
    `client_security()` / `grpc_channel()`)."""
    for flag, text in reversed(
        [
            ("--ssl-cafile", "CA certificate to verify the brokers with (turns TLS on)."),
            ("--ssl-certfile", "Client certificate, for a broker's mutual-TLS listener."),
            ("--ssl-keyfile", "Private key of --ssl-certfile."),
        ]
    ):
        func = opt(
            flag,
            metavar="FILE",
            type=click.Path(dir_okay=False),
            expose_value=False,
            callback=_keep_tls_setting,
            help=text,
        )(func)
    return func


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


def setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


LOG_LEVELS = click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False)


def one_topic(argument: str | None, option: str | None) -> str:
    """The topic given as the argument or as --topic (both only if they agree)."""
    if argument is not None and option is not None and argument != option:
        raise click.UsageError(f"two different topics given: {argument!r} and --topic {option!r}")
    topic = argument if argument is not None else option
    if topic is None:
        raise click.UsageError("no topic: give --topic T (or the topic as the argument)")
    return topic


def key_values(pairs: Sequence[str], option: str) -> dict[str, str]:
    try:
        return parse_key_values(list(pairs))
    except ConfigError as exc:
        hint = ""
        if option == "--config" and any(p.endswith(".toml") and "=" not in p for p in pairs):
            hint = " (here --config is a topic config; the options file is --config-file FILE)"
        raise click.BadParameter(f"{exc}{hint}", param_hint=f"'{option}'") from exc


def describe_topics(admin: Admin, names: list[str]) -> list[TopicDescription]:
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
            fail(f"topic {name!r} does not exist")
        if info.error_code != ErrorCode.NONE:
            fail(f"topic {name!r}: {code_name(info.error_code)}")
        result.append(info)
    return result
