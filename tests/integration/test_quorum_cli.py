"""`minikafka metadata-quorum describe` and `cluster status` against a real cluster with a
quorum of three controllers (processes), and the controller's refusals of bad quorum flags."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.test_cli import mk
from tests.integration.test_cli_errors import failed
from tests.support.cluster import Cluster, running_cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with running_cluster(tmp_path_factory.mktemp("quorum-cli"), controllers=3) as running:
        yield running


def fields(text: str) -> dict[str, str]:
    """`Name: value` lines (values may be padded, as kafka-metadata-quorum.sh pads them)."""
    out = {}
    for line in text.splitlines():
        name, sep, value = line.partition(":")
        assert sep, line
        out[name] = value.strip()
    return out


def test_status_through_a_broker_and_from_any_controller(cluster: Cluster) -> None:
    b = ["--bootstrap-server", cluster.bootstrap]
    status = fields(mk("metadata-quorum", "describe", "--status", *b).stdout)
    assert list(status) == [
        "ClusterId",
        "LeaderId",
        "LeaderEpoch",
        "HighWatermark",
        "MaxFollowerLag",
        "MaxFollowerLagTimeMs",
        "CurrentVoters",
        "CurrentObservers",
    ]
    assert status["ClusterId"].startswith("test-")
    assert status["CurrentVoters"] == "[1,2,3]"
    assert status["CurrentObservers"] == "[]"
    leader = int(status["LeaderId"])
    assert leader in (1, 2, 3)
    assert int(status["LeaderEpoch"]) >= 1
    assert int(status["HighWatermark"]) > 0
    # Asked at a standby, the answer leads to the leader: the same view.
    standby = next(p.address for n, p in cluster.controllers.items() if n != leader)
    again = fields(
        mk("metadata-quorum", "describe", "--status", "--bootstrap-controller", standby).stdout
    )
    assert again["LeaderId"] == str(leader)
    assert again["ClusterId"] == status["ClusterId"]
    # `cluster status` names the active controller.
    summary = mk("cluster", "status", "--bootstrap-server", cluster.bootstrap).stdout
    assert re.search(rf"Controller: {leader} \(active, epoch {status['LeaderEpoch']}\)", summary)


def test_replication_table(cluster: Cluster) -> None:
    out = mk(
        "metadata-quorum",
        "describe",
        "--replication",
        "--bootstrap-controller",
        ",".join(p.address for p in cluster.controllers.values()),
    ).stdout.splitlines()
    assert out[0].split() == [
        "NodeId",
        "LogEndOffset",
        "Lag",
        "LastFetchTimestamp",
        "LastCaughtUpTimestamp",
        "Status",
    ]
    rows = [line.split() for line in out[1:]]
    assert sorted(int(row[0]) for row in rows) == [1, 2, 3]
    assert rows[0][5] == "Leader"
    assert [row[5] for row in rows[1:]] == ["Follower", "Follower"]
    for row in rows:
        assert int(row[1]) > 0  # log end offset
        assert int(row[2]) >= 0  # lag
        assert int(row[3]) > 1_600_000_000_000  # a wall-clock timestamp in ms


def test_usage_errors(cluster: Cluster) -> None:
    both = mk(
        "metadata-quorum",
        "describe",
        "--status",
        "--replication",
        "--bootstrap-server",
        cluster.bootstrap,
        check=False,
    )
    assert "exactly one of --status and --replication" in failed(both, status=2)
    neither = mk("metadata-quorum", "describe", "--status", check=False)
    assert "--bootstrap-server and --bootstrap-controller" in failed(neither, status=2)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--quorum", "1@127.0.0.1:1,1@127.0.0.1:2"], "voter id 1 appears twice"),
        (["--quorum", "one@127.0.0.1:1"], "is not ID@HOST:PORT"),
        (["--quorum", "1@127.0.0.1:0"], "port 0 is not a port"),
    ],
    ids=["duplicate id", "not a number", "port 0"],
)
def test_bad_quorum_flags_are_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    result = mk(
        "controller",
        "--id",
        "1",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(tmp_path),
        *args,
        check=False,
    )
    assert message in failed(result, status=2)


def test_a_voter_outside_the_quorum_and_a_missing_cluster_id_are_refused(tmp_path: Path) -> None:
    outside = mk(
        "controller",
        "--id",
        "9",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(tmp_path),
        "--quorum",
        "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3",
        check=False,
    )
    assert "--id 9 is not one of the voters" in failed(outside)
    no_id = mk(
        "controller",
        "--id",
        "1",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(tmp_path),
        "--quorum",
        "1@127.0.0.1:1,2@127.0.0.1:2,3@127.0.0.1:3",
        check=False,
    )
    assert "needs --cluster-id" in failed(no_id)
