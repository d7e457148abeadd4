"""Every option's environment variable can be set: `MINIKAFKA_<OPTION>` is a valid name,
and a boolean flag pair (`--x/--no-x`) reads true/false from its variable."""

from __future__ import annotations

import re
from collections.abc import Iterator

import click
import pytest

from minikafka.config import env_var
from minikafka_cli.main import main

ENV_NAME = re.compile(r"^MINIKAFKA_[A-Z0-9_]+$")


def _options(command: click.Command, path: str) -> Iterator[tuple[str, click.Option]]:
    for param in command.params:
        if isinstance(param, click.Option):
            yield path, param
    if isinstance(command, click.Group):
        for name, sub in sorted(command.commands.items()):
            yield from _options(sub, f"{path} {name}")


@pytest.mark.parametrize(
    ("option", "variable"),
    [
        pytest.param("--data-dir", "MINIKAFKA_DATA_DIR", id="plain"),
        pytest.param(
            "--auto-leader-rebalance/--no-auto-leader-rebalance",
            "MINIKAFKA_AUTO_LEADER_REBALANCE",
            id="boolean-pair",
        ),
        pytest.param("--x.y", "MINIKAFKA_X_Y", id="dotted"),
    ],
)
def test_env_var_names(option: str, variable: str) -> None:
    assert env_var(option) == variable


def test_every_environment_variable_is_a_valid_name() -> None:
    bad = [
        f"{path} {param.opts[0]}: {param.envvar}"
        for path, param in _options(main, "minikafka")
        for name in ([param.envvar] if isinstance(param.envvar, str) else param.envvar or [])
        if not ENV_NAME.match(name)
    ]
    assert bad == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("false", False, id="false"),
        pytest.param("0", False, id="zero"),
        pytest.param("true", True, id="true"),
    ],
)
def test_a_boolean_flag_reads_its_variable(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: bool
) -> None:
    monkeypatch.setenv("MINIKAFKA_AUTO_LEADER_REBALANCE", value)
    command = main.commands["controller"]
    ctx = command.make_context(
        "controller", ["--id", "1", "--listen", "127.0.0.1:0", "--data-dir", "/nonexistent"]
    )
    assert ctx.params["auto_leader_rebalance"] is expected
