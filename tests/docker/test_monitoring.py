"""The compose `monitoring` profile's Prometheus image: `promtool check rules` and
`promtool check config` on the files the image carries (Debian's prometheus package ships
promtool). Runs with the compose test when the monitoring profile is part of the run
(`MINIKAFKA_COMPOSE_MONITORING=1`): building the image installs Debian's package, which
needs the base image's Debian mirror. Skips with the reason otherwise."""

from __future__ import annotations

import os
import uuid

import pytest

from tests.docker.compose import (
    ComposeProject,
    base_image,
    compose_command,
    docker_unavailable_reason,
    run,
)

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

MONITORING_ENV = "MINIKAFKA_COMPOSE_MONITORING"
PROMETHEUS_TEST_IMAGE = "minikafka-prometheus:compose-test"


def test_promtool_accepts_the_monitoring_profile() -> None:
    reason = docker_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    if os.environ.get(MONITORING_ENV) != "1":
        pytest.skip(f"the monitoring profile is not part of this run ({MONITORING_ENV}=1)")
    command = compose_command()
    assert command is not None
    compose = ComposeProject(command, f"mkmon{uuid.uuid4().hex[:10]}", {})
    compose.env["MINIKAFKA_PYTHON_IMAGE"] = base_image(300.0)
    compose.env["MINIKAFKA_PROMETHEUS_IMAGE"] = PROMETHEUS_TEST_IMAGE
    compose.compose("--profile", "monitoring", "build", "prometheus", timeout_s=600)
    for args in (
        ["check", "rules", "/etc/prometheus/rules.yml"],
        ["check", "config", "/etc/prometheus/prometheus.yml"],
    ):
        out = run(
            ["docker", "run", "--rm", "--entrypoint", "promtool", PROMETHEUS_TEST_IMAGE, *args],
            timeout_s=120,
        )
        assert "SUCCESS" in out, out
