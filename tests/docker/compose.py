"""Drive one throw-away project of deploy/docker-compose.yml: images, up, health, kill, down.

Works with both Compose tools (`docker compose` plugin and the `docker-compose` program). On a
machine that cannot pull images the base image comes from deploy/ci-base-image.sh (a local
debootstrap of Debian bookworm), unless MINIKAFKA_PYTHON_IMAGE names one already.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
COMPOSE_FILE = DEPLOY / "docker-compose.yml"
#: The TLS override (certificates service, TLS listeners), used on top of COMPOSE_FILE.
TLS_COMPOSE_FILE = DEPLOY / "docker-compose.tls.yml"
#: Kept between runs as a layer cache, like the base image; rebuilt when the code changes.
TEST_IMAGE = "minikafka:compose-test"
#: The spark profile's image (Java + minikafka[spark]), kept the same way.
TEST_SPARK_IMAGE = "minikafka-spark:compose-test"
DEFAULT_PYTHON_IMAGE = "python:3.11-slim"
CONTROLLER_SERVICES = ("controller-1", "controller-2", "controller-3")
CLUSTER_SERVICES = (*CONTROLLER_SERVICES, "broker-1", "broker-2", "broker-3")


def _succeeds(command: Sequence[str], timeout_s: float = 20.0) -> bool:
    try:
        done = subprocess.run(command, capture_output=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def docker_unavailable_reason() -> str | None:
    """Why the compose test cannot run here, or None when it can."""
    if shutil.which("docker") is None:
        return "no `docker` command on PATH (the compose test needs a Docker engine)"
    if not _succeeds(["docker", "info"]):
        return "no usable Docker engine (`docker info` failed)"
    if compose_command() is None:
        return "no Compose tool (neither `docker compose` nor `docker-compose` works)"
    return None


def compose_command() -> list[str] | None:
    """The Compose tool to use: MINIKAFKA_COMPOSE (e.g. "docker-compose"), else the first found."""
    configured = os.environ.get("MINIKAFKA_COMPOSE")
    candidates = [configured.split()] if configured else [["docker", "compose"], ["docker-compose"]]
    for candidate in candidates:
        if shutil.which(candidate[0]) and _succeeds([*candidate, "version"]):
            return candidate
    return None


class CommandError(RuntimeError):
    pass


def run(command: Sequence[str], *, timeout_s: float, env: dict[str, str] | None = None) -> str:
    """Run `command` (bounded); its stdout, or CommandError carrying stdout and stderr."""
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=env,
            cwd=REPO,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise CommandError(f"{' '.join(command)} timed out after {timeout_s:.0f}s") from exc
    if done.returncode != 0:
        raise CommandError(
            f"{' '.join(command)} exited with {done.returncode}\n"
            f"--- stdout\n{done.stdout[-4000:]}\n--- stderr\n{done.stderr[-4000:]}"
        )
    return done.stdout


def image_id(tag: str) -> str | None:
    try:
        return run(["docker", "image", "inspect", "--format", "{{.Id}}", tag], timeout_s=30).strip()
    except CommandError:
        return None


#: Builds of the shared images (base, test, spark) and the host wheels take turns: two
#: test workers (or two checkouts on one machine) building the same tags at once would
#: race on the tag and on deploy/'s wheel directory.
BUILD_LOCK = Path(tempfile.gettempdir()) / "minikafka-docker-build.lock"


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    with BUILD_LOCK.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def base_image(timeout_s: float) -> str:
    """The Python base image, chosen like deploy/up.sh does.

    MINIKAFKA_PYTHON_IMAGE if set; else python:3.11-slim when it is present or can be pulled;
    else (no registry access, as on CI) the local Debian image of deploy/ci-base-image.sh, built
    once and then reused.
    """
    configured = os.environ.get("MINIKAFKA_PYTHON_IMAGE")
    if configured:
        return configured
    with build_lock():
        return _base_image(timeout_s)


def _base_image(timeout_s: float) -> str:
    if image_id(DEFAULT_PYTHON_IMAGE) is not None or _succeeds(
        ["docker", "pull", "-q", DEFAULT_PYTHON_IMAGE], timeout_s=120
    ):
        return DEFAULT_PYTHON_IMAGE
    out = run([str(DEPLOY / "ci-base-image.sh")], timeout_s=timeout_s)
    return out.strip().splitlines()[-1]


class ComposeProject:
    """One compose project with its own name and host ports; `down()` removes all it created.
    `overrides` are further compose files applied on top of deploy/docker-compose.yml;
    `profiles` the compose profiles switched on (`spark` also builds the spark image)."""

    def __init__(
        self,
        command: list[str],
        name: str,
        broker_ports: dict[int, int],
        overrides: Sequence[Path] = (),
        profiles: Sequence[str] = (),
    ) -> None:
        self.command = command
        self.name = name
        self.broker_ports = broker_ports
        self.files = [COMPOSE_FILE, *overrides]
        self.profiles = list(profiles)
        self.env = dict(os.environ)
        self.env["MINIKAFKA_IMAGE"] = TEST_IMAGE
        self.env["MINIKAFKA_SPARK_IMAGE"] = TEST_SPARK_IMAGE
        for broker_id, port in broker_ports.items():
            self.env[f"MINIKAFKA_BROKER_{broker_id}_PORT"] = str(port)

    def compose(self, *args: str, timeout_s: float = 120.0) -> str:
        return run(
            [
                *self.command,
                "-p",
                self.name,
                *(arg for path in self.files for arg in ("-f", str(path))),
                *(arg for profile in self.profiles for arg in ("--profile", profile)),
                *args,
            ],
            timeout_s=timeout_s,
            env=self.env,
        )

    def build(self, python_image: str, timeout_s: float) -> None:
        """Host wheels, then the project image (and with the spark profile the spark image)
        through the compose file's build sections."""
        with build_lock():
            self._build(python_image, time.monotonic() + timeout_s)

    def _build(self, python_image: str, deadline: float) -> None:
        timeout_s = max(deadline - time.monotonic(), 1.0)
        spark = "spark" in self.profiles
        run(
            [str(DEPLOY / "build-wheels.sh"), *(["--spark"] if spark else [])],
            timeout_s=timeout_s,
            env={**self.env, "PYTHON": sys.executable},
        )
        self.env["MINIKAFKA_PYTHON_IMAGE"] = python_image
        # All the services share the image; building it through one service builds it once.
        builds = [(TEST_IMAGE, "controller-1")] + (
            [(TEST_SPARK_IMAGE, "spark-master")] if spark else []
        )
        for tag, service in builds:
            previous = image_id(tag)
            self.compose("build", service, timeout_s=max(deadline - time.monotonic(), 1.0))
            current = image_id(tag)
            if previous is not None and previous != current:
                # Our own superseded test image: drop it so repeated runs do not pile up.
                subprocess.run(
                    ["docker", "image", "rm", previous], capture_output=True, check=False
                )

    def up(self, timeout_s: float) -> None:
        self.compose("up", "-d", "--no-build", timeout_s=timeout_s)

    def container(self, service: str) -> str:
        """The id of the service's container, running or stopped."""
        container_id = self.compose("ps", "-a", "-q", service, timeout_s=30).strip()
        if not container_id:
            raise CommandError(f"no container for service {service}")
        return container_id

    def state(self, service: str) -> dict[str, object]:
        out = run(
            ["docker", "inspect", "--format", "{{json .State}}", self.container(service)],
            timeout_s=30,
        )
        state: dict[str, object] = json.loads(out)
        return state

    def health(self, service: str) -> str:
        health = self.state(service).get("Health")
        return str(health.get("Status")) if isinstance(health, dict) else "none"

    def wait_healthy(self, services: Sequence[str], timeout_s: float) -> None:
        """Poll Docker's health status (the gRPC health check) until every service is healthy."""
        deadline = time.monotonic() + timeout_s
        statuses: dict[str, str] = {}
        while time.monotonic() < deadline:
            statuses = {service: self.health(service) for service in services}
            if all(status == "healthy" for status in statuses.values()):
                return
            if "unhealthy" in statuses.values():
                break
            time.sleep(1.0)
        raise TimeoutError(f"services not healthy within {timeout_s:.0f}s: {statuses}")

    def kill(self, service: str) -> None:
        """SIGKILL the service's container (`docker kill`): no controlled shutdown."""
        run(["docker", "kill", self.container(service)], timeout_s=30)

    def start(self, service: str, timeout_s: float) -> None:
        """Start a stopped service's container again (same volume) and wait until healthy."""
        run(["docker", "start", self.container(service)], timeout_s=30)
        self.wait_healthy([service], timeout_s)

    def copy_out(self, service: str, path: str, destination: Path) -> Path:
        """`docker cp` one file out of the service's container (which may have exited)."""
        run(["docker", "cp", f"{self.container(service)}:{path}", str(destination)], timeout_s=30)
        return destination

    def logs(self, tail_lines: int = 60) -> str:
        try:
            return self.compose("logs", "--no-color", "--tail", str(tail_lines), timeout_s=60)
        except CommandError as exc:
            return str(exc)

    @contextlib.contextmanager
    def logs_on_failure(self) -> Iterator[None]:
        """Print the services' last log lines if the block fails (pytest shows them)."""
        try:
            yield
        except BaseException:
            print(self.logs())
            raise

    def down(self) -> None:
        """Remove the project's containers, network and volumes (also after a failed start)."""
        self.compose("down", "-v", "--remove-orphans", "--timeout", "10", timeout_s=180)
