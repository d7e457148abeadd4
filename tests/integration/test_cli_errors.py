"""The `minikafka` command line on bad input, unreachable brokers, Ctrl-C and closed pipes:
one `Error: ...` line on stderr and a non-zero status, never a traceback."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from minikafka_cli.devcluster import DevCluster, StartupInterrupted, wait_serving
from tests.integration.conftest import StandaloneBroker
from tests.integration.test_cli import mk
from tests.support.cluster import running_cluster
from tests.support.processes import ServerProcess, free_port

pytestmark = pytest.mark.integration


def _signal_state(pid: int | str) -> str:
    """The SigBlk/SigIgn/SigPnd lines of /proc/<pid>/status ('self' for this thread)."""
    path = (
        f"/proc/{pid}/status"
        if pid != "self"
        else f"/proc/self/task/{threading.get_native_id()}/status"
    )
    try:
        with open(path) as status:
            return " ".join(
                line.strip() for line in status if line.startswith(("SigBlk", "SigIgn", "SigPnd"))
            )
    except OSError as exc:
        return str(exc)


def wait_interrupted(proc: subprocess.Popen[bytes]) -> int:
    """Wait for a child sent SIGINT; if it is still running after 30 s, fail with its
    signal masks, the test thread's, and what it wrote to stderr (seen twice under
    pytest-xdist at load 10 and not reproduced; this says which side held the signal)."""
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        child = _signal_state(proc.pid)
        on_main = threading.current_thread() is threading.main_thread()
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(
            f"still running 30 s after SIGINT; child {child}; test thread "
            f"{_signal_state('self')} (main thread: {on_main}); "
            f"stderr: {err.decode(errors='replace')[-2000:]}"
        ) from None


def failed(result: subprocess.CompletedProcess[str], status: int = 1) -> str:
    """Assert a clean failure: `status`, no traceback, and (for errors of the command
    itself, status 1) exactly one line on stderr. Returns stderr."""
    assert result.returncode == status, result.stdout + result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    if status == 1:
        assert len(result.stderr.splitlines()) == 1, result.stderr
        assert result.stderr.startswith("Error: "), result.stderr
    return result.stderr


def start(*args: str, stdout: int = subprocess.PIPE) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "minikafka", *args],
        stdin=subprocess.DEVNULL,
        stdout=stdout,
        stderr=subprocess.PIPE,
    )


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("foo", "'foo' is not HOST:PORT"),
        ("host:notaport", "port 'notaport' is not a number"),
        ("127.0.0.1:99999", "port 99999 is out of range"),
        (":9092", "':9092' is not HOST:PORT"),
        ("", "bootstrap server is empty"),
    ],
)
def test_bad_bootstrap_server_is_a_usage_error(address: str, reason: str) -> None:
    for command in (["topic", "list"], ["consume", "t"], ["produce", "t"], ["cluster", "status"]):
        result = mk(*command, "--bootstrap-server", address, stdin="", check=False)
        stderr = failed(result, status=2)
        assert "Invalid value for '--bootstrap-server'" in stderr
        assert reason in stderr


def test_unreachable_broker_fails_with_one_line() -> None:
    nobody = f"127.0.0.1:{free_port()}"
    produced = mk("produce", "t", "--bootstrap-server", nobody, stdin="x\n", check=False)
    assert "is the cluster running" in failed(produced)
    consumed = mk("consume", "t", "--bootstrap-server", nobody, check=False)
    assert "is the cluster running" in failed(consumed)


def test_controller_address_as_bootstrap_server_says_so(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    controller = ServerProcess(
        ["controller", "--id", "0", "--listen", address, "--data-dir", str(tmp_path / "c")],
        address=address,
        log_path=tmp_path / "controller.log",
    ).start()
    try:
        result = mk("topic", "list", "--bootstrap-server", controller.address, check=False)
        assert "not the controller's" in failed(result)
    finally:
        controller.terminate()


def test_missing_topics_and_partitions(standalone_broker: StandaloneBroker) -> None:
    b = ["--bootstrap-server", standalone_broker.bootstrap]
    assert failed(mk("topic", "describe", "ghost", *b, check=False)) == (
        "Error: topic 'ghost' does not exist\n"
    )
    assert failed(mk("consume", "ghost", "--timeout-ms", "500", *b, check=False)) == (
        "Error: topic 'ghost' does not exist\n"
    )
    election = mk("leader-election", "--type", "preferred", "--topic", "ghost", *b, check=False)
    assert failed(election) == "Error: topic 'ghost' does not exist\n"
    mk("topic", "create", "two", "--partitions", "2", *b)
    out_of_range = mk("consume", "two", "--partition", "7", "--timeout-ms", "500", *b, check=False)
    assert failed(out_of_range) == (
        "Error: partition 7 of topic 'two' does not exist (it has 2 partitions)\n"
    )


def test_topic_create_and_delete_like_kafka_topics(standalone_broker: StandaloneBroker) -> None:
    b = ["--bootstrap-server", standalone_broker.bootstrap]
    assert mk("topic", "create", "--topic", "kt", *b).stdout == "Created topic kt.\n"
    again = mk("topic", "create", "kt", *b, check=False)
    assert "already exists" in failed(again)
    quiet = mk("topic", "create", "--topic", "kt", "--if-not-exists", *b)
    assert (quiet.stdout, quiet.stderr) == ("", "")
    mk("topic", "create", "other", *b)
    described = mk("topic", "describe", "kt", "--topic", "other", *b).stdout
    assert "Topic: kt\tPartitionCount: 1" in described
    assert "Topic: other\tPartitionCount: 1" in described
    assert mk("topic", "delete", "--topic", "kt", *b).stdout == "Deleted topic kt.\n"
    gone = mk("topic", "delete", "kt", *b, check=False)
    assert "does not exist" in failed(gone)
    assert mk("topic", "delete", "kt", "--if-exists", *b).stdout == ""
    file_name = mk("topic", "create", "x", "--config", "opts.toml", *b, check=False)
    assert "the options file is --config-file FILE" in failed(file_name, status=2)


def test_produce_input_errors(standalone_broker: StandaloneBroker) -> None:
    b = ["--bootstrap-server", standalone_broker.bootstrap]
    mk("topic", "create", "keyed", *b)
    nosep = mk("produce", "keyed", "--key-separator", ":", *b, stdin="a:1\nplain\n", check=False)
    assert failed(nosep) == "Error: line 2 has no key separator ':': 'plain'\n"
    empty = mk("produce", "keyed", "--key-separator", "", *b, stdin="a\n", check=False)
    assert "'--key-separator': must not be empty" in failed(empty, status=2)
    acks = mk("produce", "keyed", "--acks", "2", *b, stdin="a\n", check=False)
    assert "Invalid value for '--acks'" in failed(acks, status=2)
    huge = mk("produce", "keyed", *b, stdin="x" * 2_000_000 + "\n", check=False)
    assert "MESSAGE_TOO_LARGE" in failed(huge)
    # Nothing on stdin is nothing to do; binary lines go through byte for byte.
    assert mk("produce", "keyed", *b, stdin="").returncode == 0
    binary = bytes(range(256)).replace(b"\n", b"") + b"\r\n" + b"\x00\xff\n"
    sent = subprocess.run(
        [sys.executable, "-m", "minikafka", "produce", "keyed", *b],
        input=binary,
        capture_output=True,
        timeout=60,
    )
    assert sent.returncode == 0, sent.stderr
    read_flags = ["--print-key", "--key-separator", "|", "--max-messages", "3", *b]
    read = subprocess.run(
        [sys.executable, "-m", "minikafka", "consume", "keyed", "--from-beginning", *read_flags],
        capture_output=True,
        timeout=60,
    )
    assert read.returncode == 0, read.stderr
    # a:1 was written before the line without a separator failed the command
    assert read.stdout.split(b"\n")[:3] == [
        b"a|1",
        b"null|" + bytes(range(256)).replace(b"\n", b""),
        b"null|\x00\xff",
    ]


def test_consume_offsets_like_kafka(standalone_broker: StandaloneBroker) -> None:
    b = ["--bootstrap-server", standalone_broker.bootstrap]
    mk("topic", "create", "offs", *b)
    mk("produce", "offs", *b, stdin="a\nb\nc\n")
    earliest = mk(
        "consume", "offs", "--partition", "0", "--offset", "earliest", "--max-messages", "2", *b
    )
    assert earliest.stdout == "a\nb\n"
    latest = mk(
        "consume", "offs", "--partition", "0", "--offset", "latest", "--timeout-ms", "500", *b
    )
    assert latest.stdout == ""
    both = mk(
        "consume", "offs", "--partition", "0", "--offset", "1", "--from-beginning", *b, check=False
    )
    assert "--offset and --from-beginning exclude each other" in failed(both, status=2)
    bogus = mk("consume", "offs", "--partition", "0", "--offset", "soon", *b, check=False)
    assert "'soon' is not an offset" in failed(bogus, status=2)
    beyond = mk("consume", "offs", "--partition", "0", "--offset", "99", "--timeout-ms", "500", *b)
    assert beyond.stdout == ""
    assert beyond.stderr == (
        "Warning: offset 99 is outside offs-0 (offsets 0 to 3); reading from the end\n"
    )


def test_ctrl_c_during_consume_exits_130_quietly(standalone_broker: StandaloneBroker) -> None:
    b = ["--bootstrap-server", standalone_broker.bootstrap]
    mk("topic", "create", "waiting", *b)
    mk("produce", "waiting", *b, stdin="only\n")
    proc = start("consume", "waiting", "--from-beginning", *b)
    assert proc.stdout is not None
    assert proc.stderr is not None
    assert proc.stdout.readline() == b"only\n"  # it is now waiting for more
    proc.send_signal(signal.SIGINT)
    assert wait_interrupted(proc) == 130
    assert proc.stderr.read() == b""


def test_closed_stdout_pipe_exits_141_quietly(standalone_broker: StandaloneBroker) -> None:
    b = ["--bootstrap-server", standalone_broker.bootstrap]
    mk("topic", "create", "many", *b)
    lines = 50_000  # ~300 KB of output: more than a pipe holds, so a write must fail
    mk("produce", "many", *b, stdin="".join(f"line-{i}\n" for i in range(lines)))
    proc = start("consume", "many", "--from-beginning", "--timeout-ms", "20000", *b)
    assert proc.stdout is not None
    assert proc.stderr is not None
    assert proc.stdout.readline() == b"line-0\n"
    proc.stdout.close()  # as `| head -1` does
    assert proc.wait(timeout=60) == 141
    assert proc.stderr.read() == b""


def test_log_dump_of_the_wrong_path(standalone_broker: StandaloneBroker, tmp_path: Path) -> None:
    not_a_log = tmp_path / "notes.txt"
    not_a_log.write_text("hello\n")
    assert "neither a partition directory nor a .log" in failed(
        mk("log", "dump", str(not_a_log), check=False)
    )
    broker_dir = mk("log", "dump", str(standalone_broker.data_dir), check=False)
    assert "holds no .log segment files" in failed(broker_dir)


def test_options_file_errors_and_precedence(
    standalone_broker: StandaloneBroker, tmp_path: Path
) -> None:
    b = standalone_broker.bootstrap
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe")
    assert "is not UTF-8 text" in failed(
        mk("topic", "list", "--config", str(binary), check=False), status=2
    )
    listed = tmp_path / "list.toml"
    listed.write_text(f'bootstrap-server = ["{b}"]\n')
    assert "--bootstrap-server takes one value, not a list" in failed(
        mk("topic", "list", "--config", str(listed), check=False), status=2
    )
    wrong_type = tmp_path / "int.toml"
    wrong_type.write_text("bootstrap-server = 5\n")
    assert "bootstrap server '5' is not HOST:PORT" in failed(
        mk("topic", "list", "--config", str(wrong_type), check=False), status=2
    )
    # One file for several commands: options of other commands are fine, a typo is named.
    shared = tmp_path / "shared.toml"
    shared.write_text(
        f'bootstrap-server = "{b}"\npartitions = 2\nbootstrap-sever = "x"\n'
        '[config]\n"retention.ms" = 7000\n'
    )
    listing = mk("topic", "list", "--config", str(shared))
    assert listing.stderr.splitlines() == [
        f"Warning: config file {shared}: no minikafka command has an option "
        "--bootstrap-sever; ignored"
    ]
    # topic create reads `config` (a table or a list of KEY=VALUE) and partitions from it;
    # MINIKAFKA_CONFIG_FILE names the file too.
    mk("topic", "create", "fromfile", env={"MINIKAFKA_CONFIG_FILE": str(shared)})
    described = mk("topic", "describe", "fromfile", "--bootstrap-server", b).stdout
    assert (
        "PartitionCount: 2\tReplicationFactor: 1\tConfigs: min.insync.replicas=1,retention.ms=7000"
        in described
    )
    # Flags win over the environment, which wins over the file.
    env = {"MINIKAFKA_PARTITIONS": "3"}
    mk("topic", "create", "fromenv", "--config-file", str(shared), env=env)
    mk("topic", "create", "fromflag", "--config-file", str(shared), "--partitions", "4", env=env)
    counts = mk("topic", "describe", "fromenv", "fromflag", "--bootstrap-server", b).stdout
    assert "Topic: fromenv\tPartitionCount: 3\t" in counts
    assert "Topic: fromflag\tPartitionCount: 4\t" in counts


def test_server_address_flags_are_checked_before_starting(tmp_path: Path) -> None:
    data = ["--id", "1", "--data-dir", str(tmp_path / "b")]
    listen = mk("broker", *data, "--listen", "foo", "--standalone", check=False)
    assert "Invalid value for '--listen'" in failed(listen, status=2)
    assert "INFO" not in listen.stderr  # refused before anything started
    controller = mk(
        "broker", *data, "--listen", "127.0.0.1:0", "--controller", "garbage", check=False
    )
    assert "Invalid value for '--controller'" in failed(controller, status=2)
    level = mk(
        "broker",
        *data,
        "--listen",
        "127.0.0.1:0",
        "--standalone",
        "--log-level",
        "LOUD",
        check=False,
    )
    assert "Invalid value for '--log-level'" in failed(level, status=2)
    heartbeat = mk(
        "controller",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(tmp_path / "c"),
        "--heartbeat-interval-ms",
        "5000",
        check=False,
    )
    assert (
        "--heartbeat-interval-ms (5000) must be smaller than --session-timeout-ms (1500)"
        in failed(heartbeat, status=2)
    )


def test_leader_election_failure_lines(standalone_broker: StandaloneBroker) -> None:
    b = ["--bootstrap-server", standalone_broker.bootstrap]
    mk("topic", "create", "el", *b)
    result = mk(
        "leader-election",
        "--type",
        "preferred",
        "--topic",
        "el",
        "--partition",
        "9",
        *b,
        check=False,
    )
    assert failed(result) == "Error: 1 replica(s) could not be elected\n"
    assert result.stdout.startswith(
        "Error completing leader election (PREFERRED) for partition: el-9: "
    )
    assert "el-9: el-9" not in result.stdout


def test_dev_cluster_startup_stops_on_ctrl_c(tmp_path: Path) -> None:
    # wait_serving gives up as soon as the stop event is set ...
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        stop = threading.Event()
        threading.Timer(0.3, stop.set).start()
        began = time.monotonic()
        with pytest.raises(StartupInterrupted):
            wait_serving(f"127.0.0.1:{free_port()}", sleeper, 60.0, stop)
        assert time.monotonic() - began < 10
    finally:
        sleeper.kill()
        sleeper.wait(timeout=10)
    # ... so a cluster asked to stop while starting stops its children at once.
    stop = threading.Event()
    stop.set()
    cluster = DevCluster(brokers=1, data_dir=tmp_path, base_port=0, log_level="INFO", stop=stop)
    try:
        with pytest.raises(StartupInterrupted):
            cluster.start()
    finally:
        cluster.stop()
    assert [name for name, _, _ in cluster.children] == ["controller"]
    assert all(proc.poll() is not None for _, _, proc in cluster.children)


def test_unexpected_errors_are_one_line_unless_debugging(tmp_path: Path) -> None:
    # A directory where a segment file is expected: an OSError deep in the dump code.
    odd = tmp_path / "t-0"
    (odd / "00000000000000000000.log").mkdir(parents=True)
    result = mk("log", "dump", str(odd), check=False)
    assert failed(result).startswith("Error: ")
    debug = mk("log", "dump", str(odd), env={"MINIKAFKA_DEBUG": "1"}, check=False)
    assert debug.returncode == 1
    assert "Traceback" in debug.stderr


def test_topic_create_refusals(standalone_broker: StandaloneBroker) -> None:
    b = ["--bootstrap-server", standalone_broker.bootstrap]
    for partitions in ("0", "-1"):
        usage = mk("topic", "create", "p", "--partitions", partitions, *b, check=False)
        assert "Invalid value for '--partitions'" in failed(usage, status=2)
    above_rf = mk("topic", "create", "m", "--config", "min.insync.replicas=2", *b, check=False)
    refused = failed(above_rf)  # (standalone and controller word it slightly differently)
    assert "min.insync.replicas" in refused
    assert "is larger than the replication factor 1" in refused
    for name in (".", "..", "a/b", "x" * 250):
        assert "[INVALID_TOPIC_EXCEPTION]" in failed(mk("topic", "create", name, *b, check=False))
    bad_value = mk("topic", "create", "v", "--config", "retention.ms=soon", *b, check=False)
    assert "retention.ms" in failed(bad_value)
    assert "[INVALID_CONFIG]" in bad_value.stderr
    status = mk("cluster", "status", *b).stdout
    assert "Partitions: 0 total, 0 under-replicated, 0 offline (0 topics)" in status


def test_ctrl_c_during_produce_exits_130_quietly(standalone_broker: StandaloneBroker) -> None:
    b = ["--bootstrap-server", standalone_broker.bootstrap]
    mk("topic", "create", "typed", *b)
    proc = subprocess.Popen(
        [sys.executable, "-m", "minikafka", "produce", "typed", *b],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdin is not None
    assert proc.stderr is not None
    proc.stdin.write(b"typed in\n")
    proc.stdin.flush()
    # Once the line can be read back, the producer is waiting for the next line.
    read = mk("consume", "typed", "--from-beginning", "--max-messages", "1", *b)
    assert read.stdout == "typed in\n"
    proc.send_signal(signal.SIGINT)
    assert wait_interrupted(proc) == 130
    assert proc.stderr.read() == b""
    proc.stdin.close()


def test_produce_delivery_timeout_bounds_a_retriable_failure(tmp_path: Path) -> None:
    with running_cluster(tmp_path, brokers=2) as cluster:
        cluster.create_topic("guarded", rf=2, min_insync_replicas="2")
        leader, _, _ = cluster.leader_of("guarded")
        follower = next(b for b in cluster.brokers if b != leader)
        cluster.brokers[follower].kill()
        cluster.wait_isr("guarded", 0, [leader])
        b = ["--bootstrap-server", cluster.brokers[leader].address]
        began = time.monotonic()
        result = mk(
            "produce", "guarded", "--delivery-timeout-ms", "2000", *b, stdin="x\n", check=False
        )
        assert "NOT_ENOUGH_REPLICAS" in failed(result)
        assert time.monotonic() - began < 20  # not the default two minutes
        too_short = mk(
            "produce", "guarded", "--delivery-timeout-ms", "3", *b, stdin="x\n", check=False
        )
        assert "must be larger than --linger-ms (5)" in failed(too_short, status=2)
