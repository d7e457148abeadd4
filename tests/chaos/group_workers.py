"""Consumer-group members as processes for the fault suite: start, kill -9, pause, resume
and stop `tests/support/group_worker.py` processes, record each fault in the run's
history (with the process's pid, as `group_checker` reads them), and watch the workers'
logs for a stable assignment.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from client import TopicPartition
from client.admin import Admin
from tests.chaos.group_checker import KILL, PAUSE, RESUME, Event, key_of, read_events
from tests.chaos.history import History
from tests.support.chaos_cluster import ChaosCluster
from tests.support.cluster import wait_until

#: Member session timeout: a kill -9'd or paused member is fenced after this.
SESSION_TIMEOUT_MS = 3000
#: The coordinator's heartbeat interval in the group scenarios (broker setting).
HEARTBEAT_INTERVAL_MS = 250
STOP_TIMEOUT_S = 20.0
#: Where `python -m tests.support.group_worker` finds the packages.
REPO_ROOT = Path(__file__).resolve().parents[2]
#: Bytes of a log's end read to find its last commit event.
TAIL_BYTES = 4096


class WorkerProcess:
    def __init__(self, name: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.proc = proc
        self.log = log
        self.paused = False

    def alive(self) -> bool:
        return self.proc.poll() is None


class GroupWorkers:
    """The members of one group over one topic, each a process with its own log."""

    def __init__(
        self,
        history: History,
        cluster: ChaosCluster,
        directory: Path,
        *,
        group: str,
        topic: str,
        partitions: int,
    ) -> None:
        self.history = history
        self.cluster = cluster
        self.directory = directory
        self.group = group
        self.topic = topic
        self.keys = [key_of((topic, p)) for p in range(partitions)]
        self.live: dict[str, WorkerProcess] = {}
        self.logs: list[Path] = []
        directory.mkdir(parents=True, exist_ok=True)

    # ---- processes ------------------------------------------------------------------

    def start(self, name: str) -> WorkerProcess:
        assert name not in self.live, f"{name} is running"
        log = self.directory / f"{name}-{len(self.logs)}.jsonl"
        self.logs.append(log)
        args = [
            sys.executable,
            "-m",
            "tests.support.group_worker",
            "--bootstrap",
            ",".join(self.cluster.client_bootstrap),
            "--group",
            self.group,
            "--topic",
            self.topic,
            "--log",
            str(log),
            "--name",
            name,
            "--session-timeout-ms",
            str(SESSION_TIMEOUT_MS),
            "--client-config",
            json.dumps(self.cluster.client_config),
        ]
        with open(log.with_suffix(".out"), "ab") as out:
            proc = subprocess.Popen(
                args, stdout=out, stderr=subprocess.STDOUT, env=dict(os.environ), cwd=REPO_ROOT
            )
        worker = WorkerProcess(name, proc, log)
        self.live[name] = worker
        self.history.nemesis("start-consumer", worker=name, pid=proc.pid)
        return worker

    def kill(self, name: str) -> None:
        worker = self.live.pop(name)
        self.history.nemesis(KILL, worker=name, pid=worker.proc.pid)
        worker.proc.kill()
        worker.proc.wait(timeout=10)

    def pause(self, name: str) -> None:
        worker = self.live[name]
        self.history.nemesis(PAUSE, worker=name, pid=worker.proc.pid)
        os.kill(worker.proc.pid, signal.SIGSTOP)
        worker.paused = True

    def resume(self, name: str) -> None:
        worker = self.live[name]
        os.kill(worker.proc.pid, signal.SIGCONT)
        worker.paused = False
        self.history.nemesis(RESUME, worker=name, pid=worker.proc.pid)

    def stop(self, name: str) -> None:
        """SIGTERM: the member leaves the group and exits (SIGKILL after a timeout)."""
        worker = self.live.pop(name)
        if worker.paused:
            os.kill(worker.proc.pid, signal.SIGCONT)
        self.history.nemesis("stop-consumer", worker=name, pid=worker.proc.pid)
        worker.proc.send_signal(signal.SIGTERM)
        try:
            worker.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.history.nemesis(KILL, worker=name, pid=worker.proc.pid)
            worker.proc.kill()
            worker.proc.wait(timeout=10)
            raise AssertionError(f"{name} did not stop within {STOP_TIMEOUT_S}s") from None

    def close(self) -> None:
        """Kill whatever still runs (cleanup; a scenario stops its members itself)."""
        for name in list(self.live):
            worker = self.live.pop(name)
            if worker.alive():
                if worker.paused:
                    os.kill(worker.proc.pid, signal.SIGCONT)
                worker.proc.kill()
                worker.proc.wait(timeout=10)

    # ---- observation ----------------------------------------------------------------

    def events(self) -> list[Event]:
        return read_events([log for log in self.logs if log.exists()])

    def owners(self) -> dict[str, set[str]]:
        """Partition key -> names of the running (live, not paused) workers whose log says
        they own it now."""
        owned: dict[int, set[str]] = {}
        names: dict[int, str] = {}
        for event in self.events():
            pid = int(event["pid"])
            names[pid] = event["name"]
            mine = owned.setdefault(pid, set())
            if event["event"] == "assigned":
                mine.update(key_of(tp) for tp in event["partitions"])
            elif event["event"] in ("revoked", "lost"):
                mine.difference_update(key_of(tp) for tp in event["partitions"])
            elif event["event"] == "stop":
                mine.clear()
        # A paused worker cannot log that it lost its partitions: not counted as owning.
        live_pids = {w.proc.pid for w in self.live.values() if w.alive() and not w.paused}
        out: dict[str, set[str]] = {key: set() for key in self.keys}
        for pid, keys in owned.items():
            if pid in live_pids:
                for key in keys:
                    out.setdefault(key, set()).add(names[pid])
        return out

    def check_alive(self) -> None:
        """Fail with its output if a worker that should run has exited."""
        for worker in self.live.values():
            if not worker.alive():
                output = worker.log.with_suffix(".out").read_text(errors="replace")
                raise AssertionError(
                    f"worker {worker.name} exited ({worker.proc.returncode}):\n{output[-4000:]}"
                )

    def stable(self, members: Sequence[str]) -> bool:
        """Every partition owned by exactly one of `members`, each of which owns some."""
        self.check_alive()
        owners = self.owners()
        if any(len(names) != 1 or not names <= set(members) for names in owners.values()):
            return False
        holding = {name for names in owners.values() for name in names}
        return holding == set(members)

    def wait_stable(self, members: Sequence[str], timeout_s: float = 30.0) -> float:
        """Until the assignment is stable over `members`; returns the seconds it took."""
        started = time.monotonic()
        wait_until(
            lambda: self.stable(members),
            timeout_s=timeout_s,
            interval_s=0.1,
            what=f"{self.group} stable over {sorted(members)}: {self.owners()}",
        )
        return time.monotonic() - started

    def commit_in_flight(self) -> bool:
        """A running worker's last logged commit event is an invoke: a commit is on its way
        (reads only the tail of each log)."""
        for worker in self.live.values():
            if worker.paused or not worker.log.exists():
                continue
            with worker.log.open("rb") as log:
                log.seek(max(0, log.seek(0, os.SEEK_END) - TAIL_BYTES))
                tail = log.read().decode(errors="replace").splitlines()
            for line in reversed(tail[1:]):
                if '"event": "commit"' in line:
                    if '"type": "invoke"' in line:
                        return True
                    break
        return False

    def processed(self) -> set[tuple[str, int]]:
        return {
            (key_of(e["tp"]), int(e["offset"])) for e in self.events() if e["event"] == "record"
        }

    def committed(self) -> dict[str, int]:
        """The group's committed offsets, read with the admin client."""
        admin = Admin(self.cluster.client_bootstrap, **self.cluster.client_config)
        try:
            found = admin.list_consumer_group_offsets(self.group)
        finally:
            admin.close()
        return {key_of((tp.topic, tp.partition)): meta.offset for tp, meta in found.items()}

    def partitions(self) -> list[TopicPartition]:
        return [TopicPartition(self.topic, int(key.rpartition("/")[2])) for key in self.keys]
