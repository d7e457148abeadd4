"""The `minikafka` command line against a real standalone broker (subprocesses)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import StandaloneBroker

pytestmark = pytest.mark.integration


def mk(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "minikafka", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.mark.parametrize(
    "command",
    [
        [],
        ["broker"],
        ["controller"],
        ["dev"],
        ["produce"],
        ["consume"],
        ["topic", "create"],
        ["topic", "describe"],
        ["topic", "list"],
        ["topic", "delete"],
        ["topic", "alter-config"],
        ["topic", "alter"],
        ["get-offsets"],
        ["consumer-groups"],
        ["timeline"],
        ["leader-election"],
        ["cluster", "status"],
        ["log", "dump"],
        ["log", "lost"],
    ],
    ids=lambda c: "-".join(c) or "main",
)
def test_help_everywhere(command: list[str]) -> None:
    result = mk(*command, "--help")
    assert "Usage: minikafka" in result.stdout


def test_topic_produce_consume_round_trip(standalone_broker: StandaloneBroker) -> None:
    b = ["--bootstrap-server", standalone_broker.bootstrap]
    assert (
        "Created topic orders."
        in mk(
            "topic", "create", "orders", "--partitions", "2", "--config", "retention.ms=-1", *b
        ).stdout
    )
    assert mk("topic", "list", *b).stdout.split() == ["orders"]
    mk(
        "produce",
        "--topic",
        "orders",
        "--key-separator",
        ":",
        *b,
        stdin="alice:1\nbob:2\ncarol:3\n",
    )
    out = mk(
        "consume",
        "--topic",
        "orders",
        "--from-beginning",
        "--print-key",
        "--key-separator",
        "=",
        "--max-messages",
        "3",
        "--timeout-ms",
        "10000",
        *b,
    ).stdout.split()
    assert sorted(out) == ["alice=1", "bob=2", "carol=3"]
    described = mk("topic", "describe", "orders", *b).stdout
    assert (
        "Topic: orders\tPartitionCount: 2\tReplicationFactor: 1\t"
        "Configs: min.insync.replicas=1,retention.ms=-1" in described
    )
    assert "\n\tTopic: orders\tPartition: 1\tLeader: 1\tReplicas: 1\tIsr: 1\n" in described
    mk("topic", "alter-config", "orders", "--set", "retention.ms=1000", *b)
    assert "retention.ms=1000" in mk("topic", "describe", "orders", *b).stdout
    # --offset needs --partition; a missing separator is a clear error.
    bad = mk("consume", "--topic", "orders", "--offset", "1", *b, check=False)
    assert bad.returncode != 0
    assert "--offset needs --partition" in bad.stderr
    nosep = mk(
        "produce",
        "--topic",
        "orders",
        "--key-separator",
        ":",
        *b,
        stdin="no-separator\n",
        check=False,
    )
    assert nosep.returncode != 0
    assert "has no key separator" in nosep.stderr
    exact = mk(
        "consume",
        "--topic",
        "orders",
        "--partition",
        "0",
        "--offset",
        "0",
        "--print-offset",
        "--max-messages",
        "1",
        "--timeout-ms",
        "10000",
        *b,
    ).stdout
    assert exact.startswith("0:0\t")
    assert "Deleted topic orders." in mk("topic", "delete", "orders", *b).stdout
    assert mk("topic", "list", *b).stdout.split() == []


def test_bad_topic_requests_fail_clearly(standalone_broker: StandaloneBroker) -> None:
    b = ["--bootstrap-server", standalone_broker.bootstrap]
    too_many = mk("topic", "create", "t", "--replication-factor", "3", *b, check=False)
    assert too_many.returncode == 1
    assert "replication factor 3 is larger than" in too_many.stderr
    unknown = mk("topic", "create", "t", "--config", "no.such=1", *b, check=False)
    assert "unknown topic config 'no.such'" in unknown.stderr
    malformed = mk("topic", "create", "t", "--config", "novalue", *b, check=False)
    assert "expected key=value" in malformed.stderr
    missing = mk("topic", "delete", "ghost", *b, check=False)
    assert missing.returncode == 1
    assert "ghost" in missing.stderr
    nowhere = mk("produce", "ghost", "--max-block-ms", "300", *b, stdin="x\n", check=False)
    assert nowhere.returncode == 1
    assert "topic 'ghost' does not exist" in nowhere.stderr


def test_topic_as_argument_or_flag(standalone_broker: StandaloneBroker) -> None:
    b = ["--bootstrap-server", standalone_broker.bootstrap]
    mk("topic", "create", "either", *b)
    mk("produce", "either", *b, stdin="one\n")
    mk("produce", "--topic", "either", *b, stdin="two\n")
    read = ["--from-beginning", "--timeout-ms", "2000", *b]
    assert mk("consume", "either", *read).stdout.split() == ["one", "two"]
    assert mk("consume", "--topic", "either", *read).stdout.split() == ["one", "two"]
    both = mk("consume", "either", "--topic", "other", *read, check=False)
    assert both.returncode == 2
    assert "two different topics" in both.stderr
    neither = mk("produce", *b, stdin="x\n", check=False)
    assert neither.returncode == 2
    assert "no topic" in neither.stderr


def test_config_file_env_and_flag_precedence(
    standalone_broker: StandaloneBroker, tmp_path: Path
) -> None:
    config = tmp_path / "client.toml"
    config.write_text('bootstrap-server = "127.0.0.1:1"\n')
    # The file alone points at a dead address; the environment overrides the file ...
    env = {"MINIKAFKA_BOOTSTRAP_SERVER": standalone_broker.bootstrap}
    assert mk("topic", "list", "--config", str(config), env=env).returncode == 0
    # ... and a flag overrides the environment.
    file_only = tmp_path / "good.toml"
    file_only.write_text(f'bootstrap_server = "{standalone_broker.bootstrap}"\n')
    assert mk("topic", "list", "--config", str(file_only)).returncode == 0
    broken = tmp_path / "broken.toml"
    broken.write_text("bootstrap-server = \n")
    bad = mk("topic", "list", "--config", str(broken), check=False)
    assert bad.returncode != 0
    assert "not valid TOML" in bad.stderr


def test_log_dump(standalone_broker: StandaloneBroker) -> None:
    b = ["--bootstrap-server", standalone_broker.bootstrap]
    mk("topic", "create", "dumped", *b)
    mk("produce", "--topic", "dumped", *b, stdin="a\nb\n")
    out = mk("log", "dump", str(standalone_broker.data_dir / "dumped-0")).stdout
    assert "baseOffset: 0 lastOffset: 1 count: 2 partitionLeaderEpoch: 0" in out
    assert "isValid: true" in out
    json_out = mk("log", "dump", "--json", str(standalone_broker.data_dir / "dumped-0")).stdout
    assert '"valid":true' in json_out


def test_broker_flag_errors(tmp_path: Path) -> None:
    neither = mk(
        "broker", "--id", "1", "--listen", "127.0.0.1:0", "--data-dir", str(tmp_path), check=False
    )
    assert neither.returncode != 0
    assert "--controller" in neither.stderr
    both = mk(
        "broker",
        "--id",
        "1",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(tmp_path),
        "--standalone",
        "--controller",
        "127.0.0.1:1",
        check=False,
    )
    assert "exclude each other" in both.stderr


def test_produce_line_reader_properties(standalone_broker: StandaloneBroker) -> None:
    """kafka-console-producer's `--property parse.headers/parse.key/null.marker`: each
    line's headers, key and value arrive as written, markers as null."""
    b = ["--bootstrap-server", standalone_broker.bootstrap]
    mk("topic", "create", "parsed", *b)
    lines = "h1:x,h2:y\tk1|v1\nh3:z\tNULL|v2\nNULL\tk3|NULL\n"
    properties = [
        *("--property", "parse.headers=true"),
        *("--property", "parse.key=true"),
        *("--property", "key.separator=|"),
        *("--property", "null.marker=NULL"),
    ]
    mk("produce", "parsed", *properties, *b, stdin=lines)
    read = mk(
        "consume",
        "parsed",
        "--from-beginning",
        "--output",
        "json",
        "--max-messages",
        "3",
        "--timeout-ms",
        "10000",
        *b,
    ).stdout
    records = [json.loads(line) for line in read.splitlines()]
    assert [(r["key"], r["value"], r["headers"]) for r in records] == [
        ("k1", "v1", [{"key": "h1", "value": "x"}, {"key": "h2", "value": "y"}]),
        (None, "v2", [{"key": "h3", "value": "z"}]),
        ("k3", None, []),
    ]
    unknown = mk("produce", "parsed", "--property", "parse.kee=true", *b, stdin="x\n", check=False)
    assert unknown.returncode == 2
    assert "unknown line-reader property 'parse.kee'" in unknown.stderr
    missing = mk(
        "produce", "parsed", "--property", "parse.key=true", *b, stdin="a\tb\nplain\n", check=False
    )
    assert missing.returncode == 1
    assert missing.stderr.endswith("Error: line 2 has no key separator '\\t': 'plain'\n")
