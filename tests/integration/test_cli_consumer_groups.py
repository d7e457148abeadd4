"""`minikafka consumer-groups` against a standalone broker: list, describe (Kafka's
columns), reset offsets (refused while the group has members; dry run by default), and
delete (refused while the group has members)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from client import Consumer, Producer
from tests.integration.conftest import StandaloneBroker
from tests.support.cluster import wait_until

pytestmark = pytest.mark.integration

GROUP = "reports"
MINIKAFKA = [sys.executable, "-m", "minikafka"]
#: A console member that reads from the start and exits when nothing came for a minute.
FROM_START_FOR_A_MINUTE = ["--from-beginning", "--timeout-ms", "60000"]
TOPIC = "orders"


def mk(*args: str, status: int = 0) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "minikafka", *args],
        capture_output=True,
        text=True,
        timeout=90,
        env=dict(os.environ),
    )
    assert result.returncode == status, result.stdout + result.stderr
    return result


def rows(out: str) -> list[list[str]]:
    """The table lines after the header, split into columns."""
    lines = [line for line in out.splitlines() if line.strip()]
    header = next(i for i, line in enumerate(lines) if line.startswith("GROUP "))
    return [line.split() for line in lines[header + 1 :]]


def test_consumer_groups_tool(standalone_broker: StandaloneBroker) -> None:
    boot = ["--bootstrap-server", standalone_broker.bootstrap]
    mk("topic", "create", TOPIC, "--partitions", "2", "--replication-factor", "1", *boot)
    with Producer(bootstrap_servers=standalone_broker.bootstrap) as producer:
        for i in range(5):
            producer.send(TOPIC, f"a{i}".encode(), partition=0)
        for i in range(3):
            producer.send(TOPIC, f"b{i}".encode(), partition=1)
        producer.flush()

    consumer = Consumer(
        bootstrap_servers=standalone_broker.bootstrap,
        group_id=GROUP,
        client_id="report-writer",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        consumer.subscribe([TOPIC])
        seen = 0

        def consumed_all() -> bool:
            nonlocal seen
            seen += sum(len(r) for r in consumer.poll(timeout_ms=200).values())
            return seen == 8

        wait_until(consumed_all, what="8 records")
        consumer.commit()

        assert mk("consumer-groups", "--list", *boot).stdout.split() == [GROUP]
        described = rows(mk("consumer-groups", "--describe", "--group", GROUP, *boot).stdout)
        assert [r[:6] for r in described] == [
            [GROUP, TOPIC, "0", "5", "5", "0"],
            [GROUP, TOPIC, "1", "3", "3", "0"],
        ]
        assert {r[8] for r in described} == {"report-writer"}
        assert len({r[6] for r in described}) == 1  # one member owns both

        refused = mk(
            "consumer-groups",
            "--reset-offsets",
            "--group",
            GROUP,
            "--topic",
            TOPIC,
            "--to-earliest",
            "--execute",
            *boot,
            status=1,
        )
        assert (
            f"Assignments can only be reset if the group '{GROUP}' is inactive, but the "
            "current state is Stable." in refused.stderr
        )
        busy = mk("consumer-groups", "--delete", "--group", GROUP, *boot, status=1)
        assert "NON_EMPTY_GROUP" in busy.stderr
    finally:
        consumer.close()  # leaves the group

    out = mk("consumer-groups", "--describe", "--group", GROUP, *boot).stdout
    assert f"Consumer group '{GROUP}' has no active members." in out
    assert [r[3:9] for r in rows(out)] == [
        ["5", "5", "0", "-", "-", "-"],
        ["3", "3", "0", "-", "-", "-"],
    ]

    dry = mk(
        "consumer-groups",
        "--reset-offsets",
        "--group",
        GROUP,
        "--topic",
        TOPIC,
        "--to-offset",
        "1",
        *boot,
    )
    assert "No action will be performed" in dry.stderr
    assert rows(dry.stdout) == [[GROUP, TOPIC, "0", "1"], [GROUP, TOPIC, "1", "1"]]
    unchanged = rows(mk("consumer-groups", "--describe", "--group", GROUP, *boot).stdout)
    assert [r[3] for r in unchanged] == ["5", "3"]

    mk(
        "consumer-groups",
        "--reset-offsets",
        "--group",
        GROUP,
        "--topic",
        TOPIC,
        "--to-earliest",
        "--execute",
        *boot,
    )
    reset = rows(mk("consumer-groups", "--describe", "--group", GROUP, *boot).stdout)
    assert [(r[3], r[5]) for r in reset] == [("0", "5"), ("0", "3")]

    later = mk(
        "consumer-groups",
        "--reset-offsets",
        "--group",
        GROUP,
        "--topic",
        TOPIC,
        "--to-datetime",
        "2100-01-01T00:00:00.000",
        "--execute",
        *boot,
    )
    assert rows(later.stdout) == [[GROUP, TOPIC, "0", "5"], [GROUP, TOPIC, "1", "3"]]

    deleted = mk("consumer-groups", "--delete", "--group", GROUP, *boot)
    assert f"Deletion of requested consumer groups ('{GROUP}') was successful." in deleted.stdout
    assert mk("consumer-groups", "--list", *boot).stdout.split() == []
    gone = mk("consumer-groups", "--describe", "--group", GROUP, *boot, status=1)
    assert "GROUP_ID_NOT_FOUND" in gone.stderr

    usage = mk("consumer-groups", "--describe", *boot, status=2)
    assert "need --group" in usage.stderr
    both = mk("consumer-groups", "--list", "--delete", "--group", GROUP, *boot, status=2)
    assert "exactly one of --list, --describe, --reset-offsets, --delete" in both.stderr


def test_console_consumer_in_a_group(standalone_broker: StandaloneBroker) -> None:
    """`consume --group`: a run commits what it printed, the next run of the group goes on
    from there (--from-beginning only covers partitions without a committed offset), and
    a member stopped by SIGTERM still commits and leaves the group."""
    boot = ["--bootstrap-server", standalone_broker.bootstrap]
    topic = "console"
    mk("topic", "create", topic, "--partitions", "2", "--replication-factor", "1", *boot)
    sent = {f"p{p}-{i}" for p in (0, 1) for i in range(3)}
    with Producer(bootstrap_servers=standalone_broker.bootstrap) as producer:
        for value in sorted(sent):
            producer.send(topic, value.encode(), partition=int(value[1]))
        producer.flush()

    read = ["consume", topic, "--group", "console-group", "--from-beginning", "--timeout-ms"]
    first = mk(*read, "60000", "--max-messages", "4", *boot).stdout.split()
    assert len(first) == 4
    described = rows(mk("consumer-groups", "--describe", "--group", "console-group", *boot).stdout)
    assert sum(int(r[3]) for r in described) == 4
    assert {r[6] for r in described} == {"-"}  # it left the group on exit
    second = mk(*read, "60000", "--max-messages", "2", *boot).stdout.split()
    assert sorted(first + second) == sorted(sent)
    described = rows(mk("consumer-groups", "--describe", "--group", "console-group", *boot).stdout)
    assert [r[3:6] for r in described] == [["3", "3", "0"], ["3", "3", "0"]]

    member = subprocess.Popen(
        [*MINIKAFKA, "consume", topic, "--group", "stopped", *FROM_START_FOR_A_MINUTE, *boot],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    try:
        assert member.stdout is not None
        printed = [member.stdout.readline().strip() for _ in range(6)]
        assert sorted(printed) == sorted(sent)
        member.terminate()
        _, err = member.communicate(timeout=60)
        assert member.returncode == 143, err
    finally:
        if member.poll() is None:
            member.kill()
            member.wait()
    out = mk("consumer-groups", "--describe", "--group", "stopped", *boot).stdout
    assert "Consumer group 'stopped' has no active members." in out
    assert [r[3:6] for r in rows(out)] == [["3", "3", "0"], ["3", "3", "0"]]

    both = mk("consume", topic, "--group", "g", "--partition", "0", *boot, status=2)
    assert "Options group and partition cannot be specified together." in both.stderr


def test_console_group_member_commits_only_what_it_printed(
    standalone_broker: StandaloneBroker,
) -> None:
    """SIGTERM while `consume --group` is blocked writing a polled batch to a pipe nobody
    reads yet: it finishes that batch, commits exactly what it printed and leaves, so
    the group resumes after the last line shown (Kafka's console consumer seeks back to
    the first record it did not print before it closes)."""
    boot = ["--bootstrap-server", standalone_broker.bootstrap]
    topic = "bulk"
    mk("topic", "create", topic, "--partitions", "1", "--replication-factor", "1", *boot)
    count = 3_000
    with Producer(bootstrap_servers=standalone_broker.bootstrap) as producer:
        for i in range(count):
            # 1 KiB lines: one polled batch is far larger than the pipe's 64 KiB buffer.
            producer.send(topic, f"{i:06d}".encode() + b"x" * 1018)
        producer.flush()
    member = subprocess.Popen(
        [*MINIKAFKA, "consume", topic, "--group", "bulk-group", *FROM_START_FOR_A_MINUTE, *boot],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ),
        bufsize=0,  # unbuffered: `communicate` reads the pipe itself, after `readline`
    )
    try:
        assert member.stdout is not None
        first = member.stdout.readline()
        assert first.startswith(b"000000"), first
        member.terminate()  # most likely while blocked on the full pipe, mid-batch
        rest, err = member.communicate(timeout=120)
        assert member.returncode == 143, err
    finally:
        if member.poll() is None:
            member.kill()
            member.wait()
    lines = [first, *rest.splitlines(keepends=True)]
    assert all(line.endswith(b"\n") for line in lines)
    printed = len(lines)
    assert [int(line[:6]) for line in lines] == list(range(printed))
    assert printed < count  # it stopped: the test covered a stop, not the end of the log
    out = mk("consumer-groups", "--describe", "--group", "bulk-group", *boot).stdout
    assert "Consumer group 'bulk-group' has no active members." in out
    assert [r[3] for r in rows(out)] == [str(printed)]
