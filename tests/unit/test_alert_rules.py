"""The Prometheus alert rules of the compose `monitoring` profile: every metric they use
is one minikafka exposes (docs/metrics.md, checked against a running cluster by
tests/integration/test_metrics_reference.py), and `promtool check rules` accepts them
when promtool is installed (Debian's `prometheus` package ships it; the compose
monitoring image runs the same check, tests/docker/test_monitoring.py)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "rules.yml"
REFERENCE = ROOT / "docs" / "metrics.md"
METRIC = re.compile(r"\bminikafka_[a-z0-9_]+\b")
#: The alerts issue 21 asks for, next to the replication ones.
REQUIRED_ALERTS = (
    "MinikafkaUnderReplicatedPartitions",
    "MinikafkaUnderMinIsrPartitions",
    "MinikafkaOfflinePartitions",
    "MinikafkaUncleanLeaderElection",
)


def test_rules_use_only_documented_metrics() -> None:
    documented = set(re.findall(r"`(minikafka_[a-z0-9_]+)`", REFERENCE.read_text()))
    used = set(METRIC.findall(RULES.read_text()))
    assert used
    assert sorted(used - documented) == []


def test_the_alerts_are_there() -> None:
    text = RULES.read_text()
    assert [name for name in REQUIRED_ALERTS if f"alert: {name}\n" not in text] == []


def test_promtool_accepts_the_rules() -> None:
    promtool = os.environ.get("MINIKAFKA_PROMTOOL") or shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (apt-get install prometheus, or MINIKAFKA_PROMTOOL)")
    result = subprocess.run(
        [promtool, "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout
