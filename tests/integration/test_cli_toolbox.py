"""The operator's tools against a real cluster (a controller and three brokers as
processes): get-offsets, topic describe --offsets, topic alter --partitions, consume
--property / --output json, and timeline (a leader kill -9, as R03 does)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.integration.conftest import StandaloneBroker
from tests.support.cluster import Cluster, running_cluster, wait_until

pytestmark = pytest.mark.integration


def mk(
    *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "minikafka", *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=90,
        env=dict(os.environ),
    )
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("toolbox")) as running:
        yield running


def boot(cluster: Cluster) -> list[str]:
    return ["--bootstrap-server", cluster.bootstrap]


def produce(cluster: Cluster, topic: str, lines: list[str], *extra: str) -> None:
    mk("produce", "--topic", topic, *extra, *boot(cluster), stdin="".join(f"{x}\n" for x in lines))


def offsets_of(out: str) -> dict[tuple[str, int], int]:
    result = {}
    for line in out.splitlines():
        topic, partition, offset = line.rsplit(":", 2)
        result[(topic, int(partition))] = int(offset)
    return result


def test_get_offsets(cluster: Cluster) -> None:
    cluster.create_topic("go", partitions=3, rf=3)
    produce(cluster, "go", [f"k{i}:v{i}" for i in range(30)], "--key-separator", ":")
    latest = offsets_of(mk("get-offsets", "--topic", "go", *boot(cluster)).stdout)
    assert sorted(latest) == [("go", 0), ("go", 1), ("go", 2)]
    assert sum(latest.values()) == 30
    earliest = mk("get-offsets", "--topic", "go", "--time", "-2", *boot(cluster)).stdout
    assert offsets_of(earliest) == {("go", p): 0 for p in range(3)}
    one = mk("get-offsets", "--topic", "go", "--partitions", "1", *boot(cluster)).stdout
    assert offsets_of(one) == {("go", 1): latest[("go", 1)]}
    future = mk("get-offsets", "--topic", "go", "--time", str(2**62), *boot(cluster)).stdout
    assert offsets_of(future) == {("go", p): -1 for p in range(3)}
    by_time = mk("get-offsets", "--topic", "go", "--time", "0", *boot(cluster)).stdout
    assert offsets_of(by_time) == {("go", p): 0 for p in range(3) if latest[("go", p)] > 0} | {
        ("go", p): -1 for p in range(3) if latest[("go", p)] == 0
    }
    everything = offsets_of(mk("get-offsets", *boot(cluster)).stdout)
    assert {key: value for key, value in everything.items() if key[0] == "go"} == latest
    missing = mk("get-offsets", "--topic", "nope", *boot(cluster), check=False)
    assert missing.returncode == 1
    assert "topic 'nope' does not exist" in missing.stderr
    no_partition = mk(
        "get-offsets", "--topic", "go", "--partitions", "7", *boot(cluster), check=False
    )
    assert no_partition.returncode == 1
    assert "has no partition 7" in no_partition.stderr
    bad_time = mk("get-offsets", "--topic", "go", "--time", "soon", *boot(cluster), check=False)
    assert bad_time.returncode == 2
    assert "is not a time" in bad_time.stderr


def test_describe_offsets(cluster: Cluster) -> None:
    cluster.create_topic("desc", partitions=1, rf=3)
    produce(cluster, "desc", [f"v{i}" for i in range(7)], "--partition", "0")
    out = mk("topic", "describe", "desc", "--offsets", *boot(cluster)).stdout
    (line,) = [line for line in out.splitlines() if "Partition: 0" in line]
    assert "\tLogStartOffset: 0\tHighWatermark: 7\tLogEndOffset: 7" in line
    plain = mk("topic", "describe", "desc", *boot(cluster)).stdout
    assert "HighWatermark" not in plain


def test_alter_partitions(cluster: Cluster) -> None:
    cluster.create_topic("grow", partitions=2, rf=3)
    result = mk("topic", "alter", "grow", "--partitions", "5", *boot(cluster))
    assert "Topic grow now has 5 partitions." in result.stdout
    assert "WARNING: If partitions are increased" in result.stderr
    for partition in range(5):
        cluster.wait_leader("grow", partition)
    described = mk("topic", "describe", "grow", *boot(cluster)).stdout
    assert "PartitionCount: 5" in described
    assert "ReplicationFactor: 3" in described
    produce(cluster, "grow", ["x"], "--partition", "4")
    out = mk("get-offsets", "--topic", "grow", "--partitions", "4", *boot(cluster)).stdout
    assert offsets_of(out) == {("grow", 4): 1}
    fewer = mk(
        "topic", "alter", "--topic", "grow", "--partitions", "3", *boot(cluster), check=False
    )
    assert fewer.returncode == 1
    assert "partitions can be added, never removed" in fewer.stderr
    assert "[INVALID_PARTITIONS]" in fewer.stderr
    same = mk("topic", "alter", "grow", "--partitions", "5", *boot(cluster), check=False)
    assert "already has 5 partitions" in same.stderr
    unknown = mk("topic", "alter", "nope", "--partitions", "5", *boot(cluster), check=False)
    assert "[UNKNOWN_TOPIC_OR_PARTITION]" in unknown.stderr


def test_consume_properties_and_json(cluster: Cluster) -> None:
    cluster.create_topic("fmt", partitions=1, rf=3)
    produce(cluster, "fmt", ["alice:1", "bob:2"], "--key-separator", ":", "--header", "h=x")
    common = ["consume", "--topic", "fmt", "--from-beginning", "--max-messages", "2"]
    text = mk(
        *common,
        "--property",
        "print.timestamp=true",
        "--property",
        "print.partition=true",
        "--property",
        "print.offset=true",
        "--property",
        "print.headers=true",
        "--property",
        "print.key=true",
        *boot(cluster),
    ).stdout.splitlines()
    assert len(text) == 2
    fields = text[1].split("\t")
    assert fields[0].startswith("CreateTime:")
    assert int(fields[0].removeprefix("CreateTime:")) > 1_600_000_000_000
    assert fields[1:] == ["Partition:0", "Offset:1", "h:x", "bob", "2"]
    lines = mk(*common, "--output", "json", *boot(cluster)).stdout.splitlines()
    records: list[dict[str, Any]] = [json.loads(line) for line in lines]
    assert [(r["offset"], r["key"], r["value"]) for r in records] == [
        (0, "alice", "1"),
        (1, "bob", "2"),
    ]
    assert records[0]["headers"] == [{"key": "h", "value": "x"}]
    assert records[0]["timestampType"] == "CreateTime"
    assert records[0]["topic"] == "fmt"
    bad = mk(*common, "--property", "print.offset=maybe", *boot(cluster), check=False)
    assert bad.returncode == 2
    assert "print.offset takes true or false" in bad.stderr
    both = mk(
        *common, "--output", "json", "--property", "print.key=true", *boot(cluster), check=False
    )
    assert both.returncode == 2


def timeline_rows(cluster: Cluster, topic: str, *extra: str) -> list[dict[str, Any]]:
    out = mk("timeline", "--topic", topic, "--partition", "0", "--json", *extra, *boot(cluster))
    return [json.loads(line) for line in out.stdout.splitlines()]


def test_timeline_of_a_leader_kill(tmp_path: Path) -> None:
    """R03-like: kill -9 the leader; the timeline shows the new leader at the next leader
    epoch with the ISR shrunk, the dead broker fenced, and its return (ISR expand at the
    same epoch)."""
    with running_cluster(tmp_path / "cluster") as cluster:
        cluster.create_topic("r03", partitions=1, rf=3, min_insync_replicas="2")
        produce(cluster, "r03", [f"v{i}" for i in range(20)])
        leader, epoch, isr = cluster.leader_of("r03")
        assert isr == [1, 2, 3]
        cluster.brokers[leader].kill()
        new_leader = cluster.wait_leader("r03", not_in=(leader,))
        survivors = sorted(b for b in isr if b != leader)
        cluster.wait_isr("r03", 0, survivors)
        rows = timeline_rows(cluster, "r03")
        partition_rows = [r for r in rows if r["leader"] is not None]
        created = partition_rows[0]
        assert created["kinds"] == ["created"]
        assert (created["leader"], created["leader_epoch"]) == (leader, epoch)
        moved = next(r for r in partition_rows if "leader" in r["kinds"])
        assert (moved["leader"], moved["leader_epoch"]) == (new_leader, epoch + 1)
        assert "isr-shrink" in moved["kinds"]
        assert sorted(moved["isr"]) == survivors
        assert "unclean-election" not in moved["kinds"]
        fenced = [r for r in rows if "broker-fenced" in r["kinds"]]
        assert fenced
        assert f"broker {leader} " in fenced[0]["detail"]
        assert fenced[0]["offset"] <= moved["offset"]

        cluster.brokers[leader].start()
        cluster.wait_isr("r03", 0, [1, 2, 3])
        wait_until(
            lambda: any("isr-expand" in r["kinds"] for r in timeline_rows(cluster, "r03")),
            timeout_s=30,
            what="the ISR expand in the timeline",
        )
        logs = [str(cluster.root / f"broker-{b}.log") for b in (1, 2, 3)]
        rows = timeline_rows(cluster, "r03", *(arg for log in logs for arg in ("--log", log)))
        expand = next(r for r in rows if "isr-expand" in r["kinds"])
        assert expand["leader_epoch"] == epoch + 1
        assert sorted(expand["isr"]) == [1, 2, 3]
        became = [
            r
            for r in rows
            if r["source"] == f"broker {new_leader}" and "became leader" in r["detail"]
        ]
        assert became
        assert f"epoch {epoch + 1}" in became[0]["detail"]
        times = [r["time_ms"] for r in rows]
        assert times == sorted(times)

        table = mk("timeline", "--topic", "r03", "--partition", "0", *boot(cluster)).stdout
        assert "LEADER" in table.splitlines()[1]
        assert "isr-shrink" in table
        html_file = tmp_path / "r03.html"
        png_file = tmp_path / "r03.png"
        mk(
            "timeline",
            "--topic",
            "r03",
            "--partition",
            "0",
            "--output",
            str(html_file),
            *boot(cluster),
        )
        mk(
            "timeline",
            "--topic",
            "r03",
            "--partition",
            "0",
            "--output",
            str(png_file),
            *boot(cluster),
        )
        page = html_file.read_text()
        assert "<svg" in page
        assert f"e{epoch + 1}" in page
        assert png_file.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
        unknown = mk("timeline", "--topic", "nope", "--partition", "0", *boot(cluster), check=False)
        assert unknown.returncode == 1
        assert "[UNKNOWN_TOPIC_OR_PARTITION]" in unknown.stderr


def test_standalone_broker_grows_a_topic_with_the_controllers_rules(
    standalone_broker: StandaloneBroker,
) -> None:
    """The standalone broker's admin calls run the controller's state machine: adding
    partitions opens them, persists across a restart, and shows in its history."""
    b = ["--bootstrap-server", standalone_broker.bootstrap]
    mk("topic", "create", "solo", *b)
    mk("topic", "alter", "solo", "--partitions", "3", *b)
    mk("produce", "--topic", "solo", "--partition", "2", *b, stdin="x\ny\n")
    before = offsets_of(mk("get-offsets", "--topic", "solo", *b).stdout)
    assert before == {("solo", 0): 0, ("solo", 1): 0, ("solo", 2): 2}
    refused = mk("topic", "alter", "solo", "--partitions", "2", *b, check=False)
    assert "partitions can be added, never removed" in refused.stderr
    too_big = mk("topic", "create", "wide", "--replication-factor", "2", *b, check=False)
    assert "[INVALID_REPLICATION_FACTOR]" in too_big.stderr
    out = mk("timeline", "--topic", "solo", "--partition", "2", "--json", *b).stdout
    (created,) = [json.loads(line) for line in out.splitlines()]
    assert created["kinds"] == ["created"]
    assert created["leader"] == 1
    process = standalone_broker.process
    assert process.terminate() == 0
    process.start()
    after = offsets_of(mk("get-offsets", "--topic", "solo", *b).stdout)
    assert after == before
