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

SIGINT: a shell without job control starts background commands with SIGINT and SIGQUIT
ignored, and an ignored signal stays ignored across `exec`, so `make test` started that
way (a CI runner, `cmd &` in a script) can hand SIG_IGN to its children. Two runs of the
suite under pytest-xdist, started that way, had both Ctrl-C tests of the CLI time out; the
`minikafka consume` they left behind showed `SigIgn: 0000000081001006` (SIGINT, SIGQUIT,
SIGPIPE, SIGXFSZ) and no SIGINT handler. (Not reproduced on demand: a CLI whose uvloop
loop runs on its main thread installs its own SIGINT handler over the SIG_IGN.) The suite
restores Python's default handler, so its children see Ctrl-C as a terminal user's do.
"""

from __future__ import annotations

import os
import signal

os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
