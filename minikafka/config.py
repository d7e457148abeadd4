"""Configuration loading shared by every process: TOML file, environment, flags.

Precedence (highest first): command-line flags, `MINIKAFKA_*` environment variables, the
TOML file given with `--config FILE`, built-in defaults. TOML keys are the long option
names with dashes or underscores (`data-dir` or `data_dir`).
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

ENV_PREFIX = "MINIKAFKA_"


class ConfigError(ValueError):
    """A configuration value or file is invalid; the message says which and why."""


def env_var(option: str) -> str:
    """The environment variable that sets `--option` (`--data-dir` -> `MINIKAFKA_DATA_DIR`).

    A boolean flag pair `--x/--no-x` is named after its first flag and reads true/false
    (`MINIKAFKA_X=false` is `--no-x`)."""
    first = option.split("/", 1)[0].strip()
    return ENV_PREFIX + first.lstrip("-").replace("-", "_").replace(".", "_").upper()


def load_toml(path: str | Path) -> dict[str, Any]:
    """Read a TOML config file and normalise its keys to option names with underscores."""
    file = Path(path)
    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"config file {file} does not exist") from exc
    except IsADirectoryError as exc:
        raise ConfigError(f"config file {file} is a directory") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {file} is not UTF-8 text: {exc.reason}") from exc
    except OSError as exc:
        raise ConfigError(f"cannot read config file {file}: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {file} is not valid TOML: {exc}") from exc
    return {key.replace("-", "_"): value for key, value in raw.items()}


def parse_host_port(value: str, *, what: str = "address") -> tuple[str, int]:
    """Split `HOST:PORT` (IPv6 as `[::1]:PORT`), with a clear error for anything else."""
    text = value.strip()
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text:
        raise ConfigError(f"{what} {value!r} is not HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not (port_text.isascii() and port_text.isdigit()):
        raise ConfigError(f"{what} {value!r}: port {port_text!r} is not a number")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ConfigError(f"{what} {value!r}: port {port} is out of range 0-65535")
    return host, port


def parse_bootstrap_servers(value: str, *, what: str = "bootstrap server") -> list[str]:
    """Split `HOST:PORT[,HOST:PORT...]` (Kafka's `--bootstrap-server` list), checking each
    address: a host and a port in 1-65535."""
    addresses = [part.strip() for part in value.split(",") if part.strip()]
    if not addresses:
        raise ConfigError(f"{what} is empty: give HOST:PORT (the address of any broker)")
    for address in addresses:
        _host, port = parse_host_port(address, what=what)
        if port == 0:
            raise ConfigError(f"{what} {address!r}: port 0 is not a port a broker listens on")
    return addresses


def parse_key_values(pairs: tuple[str, ...] | list[str]) -> dict[str, str]:
    """Parse repeated `key=value` arguments (as in `--config retention.ms=1000`)."""
    result: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"expected key=value, got {pair!r}")
        result[key.strip()] = value.strip()
    return result
