"""Settings for every test process, applied before any test module imports gRPC.

`GRPC_ENABLE_FORK_SUPPORT=false`: the suite forks children from a process that has live
gRPC threads (the Spark fixture starts its JVM with `Popen(preexec_fn=...)`, a plain
`fork()`). With fork support on, grpcio 1.81+ runs its post-fork handlers in the child and
the poller of the *parent* then fails with "epoll_wait error: Bad file descriptor"
(grpc/grpc#43055); a full `make test` once lost its Spark session that way ("Java gateway
process exited before sending its port number"). Every child here execs at once, which is
the case gRPC documents this setting for.

`make test` runs the suite on several pytest-xdist workers (`--dist loadgroup`); the
Spark tests and the Docker tests each stay on one worker (`xdist_group`), so one JVM
serves every Spark module and one worker builds the compose images.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

#: Test directories whose tests share one xdist worker, by group name.
_WORKER_GROUPS = {"spark": "spark", "docker": "docker"}
_TESTS = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.relative_to(_TESTS).parts if item.path.is_relative_to(_TESTS) else ()
        group = _WORKER_GROUPS.get(parts[0]) if parts else None
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
