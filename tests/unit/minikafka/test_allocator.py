"""The broker's allocator tuning: applied on glibc, skipped when the user set glibc's
own variables. Each case runs in a fresh interpreter (mallopt is process-wide)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CALL = "from minikafka.allocator import tune_for_large_buffers as t; print(t())"


def _run(extra_env: dict[str, str]) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(extra_env)
    done = subprocess.run(
        [sys.executable, "-c", CALL], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc only")
def test_applied_on_glibc() -> None:
    assert _run({}) == "True"


@pytest.mark.parametrize("variable", ["MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"])
def test_the_users_own_setting_wins(variable: str) -> None:
    assert _run({variable: "131072"}) == "False"
