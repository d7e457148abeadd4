"""Every metric of docs/metrics.md exists on a running cluster, and every `minikafka_`
metric a process exposes is in docs/metrics.md (a controller and three brokers as
processes, scraped after a produce and a consume)."""

from __future__ import annotations

import re
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.cluster import Cluster
from tests.support.processes import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "docs" / "metrics.md"
#: `| `name` | process | type | ...` rows of the "Every metric" table.
ROW = re.compile(r"^\| `(?P<name>minikafka_[a-z0-9_]+)` \| (?P<process>broker|controller|both) \|")


def documented() -> dict[str, str]:
    """metric name -> the process that exposes it ("both" for every process)."""
    text = REFERENCE.read_text()
    section = text.split("## Every metric", 1)[1]
    return {m["name"]: m["process"] for m in map(ROW.match, section.splitlines()) if m}


def exposed_names(text: str) -> set[str]:
    """Sample names (counters with `_total`, histograms by family name), `_created` left out."""
    names: set[str] = set()
    for family in text_string_to_metric_families(text):
        if family.name.endswith("_created"):
            continue
        names.add(family.name + "_total" if family.type == "counter" else family.name)
    return names


@pytest.fixture(scope="module")
def scraped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, set[str]]]:
    cluster = Cluster(tmp_path_factory.mktemp("metrics"))
    ports: dict[str, int] = {}
    processes = [("controller", cluster.controller)]
    processes += [(f"broker-{b}", process) for b, process in cluster.brokers.items()]
    for name, process in processes:
        port = free_port()
        process.args += ["--metrics-listen", f"127.0.0.1:{port}"]
        ports[name] = port
    cluster.start()
    try:
        cluster.create_topic("m", partitions=2, rf=3)
        boot = ["--bootstrap-server", cluster.bootstrap]
        for args, stdin in [
            (["produce", "--topic", "m"], b"a\nb\nc\nd\n"),
            (["consume", "--topic", "m", "--from-beginning", "--max-messages", "4"], None),
        ]:
            subprocess.run(
                [sys.executable, "-m", "minikafka", *args, *boot],
                input=stdin,
                capture_output=True,
                check=True,
                timeout=60,
            )
        pages: dict[str, set[str]] = {}
        for name, port in ports.items():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as page:
                pages[name] = exposed_names(page.read().decode())
        yield pages
    finally:
        cluster.stop()


def test_the_reference_table_is_read() -> None:
    names = documented()
    assert len(names) >= 30
    assert names["minikafka_controller_offline_partitions"] == "controller"
    assert names["minikafka_under_replicated_partitions"] == "broker"


def test_every_documented_metric_exists(scraped: dict[str, set[str]]) -> None:
    brokers = [names for process, names in scraped.items() if process.startswith("broker")]
    missing = []
    for name, process in documented().items():
        if process in ("controller", "both") and name not in scraped["controller"]:
            missing.append(f"{name} (controller)")
        if process in ("broker", "both"):
            missing.extend(f"{name} ({i + 1})" for i, b in enumerate(brokers) if name not in b)
    assert missing == []


def test_every_exposed_metric_is_documented(scraped: dict[str, set[str]]) -> None:
    names = documented()
    undocumented = sorted(
        f"{name} ({process})"
        for process, exposed in scraped.items()
        for name in exposed
        if name.startswith("minikafka_") and name not in names
    )
    assert undocumented == [], "add these to docs/metrics.md"
    foreign = sorted(
        name
        for exposed in scraped.values()
        for name in exposed
        if not name.startswith("minikafka_")
    )
    assert foreign == [], "every metric starts with minikafka_"
