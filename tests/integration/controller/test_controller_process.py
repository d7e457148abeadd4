"""`controller.app.run` as a real process: listens, then stops gracefully on SIGTERM/SIGINT."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

PROGRAM = (
    "import sys\n"
    "from controller.app import run\n"
    "from controller.config import ControllerConfig\n"
    "run(ControllerConfig(data_dir=sys.argv[1], listen='127.0.0.1:0'))\n"
)


def read_until(process: subprocess.Popen[str], pattern: str, timeout_s: float) -> re.Match[str]:
    assert process.stderr is not None
    deadline = time.monotonic() + timeout_s
    seen: list[str] = []
    while time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    raise AssertionError(f"no line matching {pattern!r} in:\n{''.join(seen)}")


@pytest.mark.parametrize("signal_number", [signal.SIGTERM, signal.SIGINT], ids=["TERM", "INT"])
def test_signal_stops_gracefully(tmp_path: Path, signal_number: signal.Signals) -> None:
    process = subprocess.Popen(
        [sys.executable, "-c", PROGRAM, str(tmp_path / "data")],
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[3],
    )
    try:
        read_until(process, r"listening on 127\.0\.0\.1:(\d+)", timeout_s=20)
        process.send_signal(signal_number)
        read_until(process, r"controller 0 stopped", timeout_s=20)
        assert process.wait(timeout=20) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()
    assert (tmp_path / "data" / "raft" / "raft.log").exists()
