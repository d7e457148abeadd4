"""Settings for every test process, applied before any test module imports gRPC.

`GRPC_ENABLE_FORK_SUPPORT=false`: the suite forks children from a process that has live
gRPC threads (the Spark fixture starts its JVM with `Popen(preexec_fn=...)`, a plain
`fork()`). With fork support on, grpcio 1.81+ runs its post-fork handlers in the child and
the poller of the *parent* then fails with "epoll_wait error: Bad file descriptor"
(grpc/grpc#43055); a full `make test` once lost its Spark session that way ("Java gateway
process exited before sending its port number"). Every child here execs at once, which is
the case gRPC documents this setting for.

`make test` runs the suite on several pytest-xdist workers with `--dist loadfile`: a
test file's tests stay on one worker, as module-scoped fixtures assume (a broker shared
by a module, a teardown check over what the module's tests did). (`--dist loadgroup`
would also keep the Spark files on one JVM, but with pytest 9.2 it silently stops
grouping: pytest-dev/pytest-xdist#1386.)
"""

from __future__ import annotations

import os

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
