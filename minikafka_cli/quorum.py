"""`minikafka metadata-quorum describe --status|--replication` (kafka-metadata-quorum.sh).

The answer comes from the active controller: through any broker (`--bootstrap-server`,
which forwards `DescribeQuorum`), or straight from the controllers
(`--bootstrap-controller`, one or more addresses: a standby's answer names the leader's
address, which is asked next). The output keeps Kafka's field names so scripts written for
its tool can read it: `--status` prints one `Name: value` line per field, `--replication`
a table with one row per voter, the leader first.
"""

from __future__ import annotations

from collections.abc import Sequence

import click

from minikafka.config import ConfigError, parse_bootstrap_servers
from minikafka.errors import ErrorCode, code_name
from minikafka.v1 import raft_pb2
from minikafka_cli.common import (
    CONTEXT_SETTINGS,
    config_file_option,
    fail,
    grpc_channel,
    opt,
    tls_client_options,
)

RPC_TIMEOUT_S = 5.0

#: kafka-metadata-quorum.sh --replication's columns.
REPLICATION_COLUMNS = (
    "NodeId",
    "LogEndOffset",
    "Lag",
    "LastFetchTimestamp",
    "LastCaughtUpTimestamp",
    "Status",
)


# ---- what is printed (pure) ----------------------------------------------------------------


def _leader_end(reply: raft_pb2.DescribeQuorumResponse) -> int:
    for replica in reply.replicas:
        if replica.node_id == reply.leader_id:
            return replica.log_end_offset
    return reply.log_end_offset


def status_lines(reply: raft_pb2.DescribeQuorumResponse) -> list[str]:
    """`--status`: ClusterId, LeaderId, LeaderEpoch, HighWatermark, MaxFollowerLag,
    MaxFollowerLagTimeMs, CurrentVoters, CurrentObservers (as Kafka's tool)."""
    followers = [r for r in reply.replicas if r.node_id != reply.leader_id]
    leader_end = _leader_end(reply)
    max_lag = max((max(0, leader_end - r.log_end_offset) for r in followers), default=0)
    lag_time_ms = -1
    if followers:
        slowest = min(followers, key=lambda r: (r.log_end_offset, r.last_caught_up_timestamp_ms))
        if slowest.last_caught_up_timestamp_ms >= 0:
            lag_time_ms = max(0, reply.now_ms - slowest.last_caught_up_timestamp_ms)
    voters = ",".join(str(v.node_id) for v in sorted(reply.voters, key=lambda v: v.node_id))
    fields = [
        ("ClusterId", reply.cluster_id),
        ("LeaderId", str(reply.leader_id)),
        ("LeaderEpoch", str(reply.leader_epoch)),
        ("HighWatermark", str(reply.high_watermark)),
        ("MaxFollowerLag", str(max_lag)),
        ("MaxFollowerLagTimeMs", str(lag_time_ms)),
        ("CurrentVoters", f"[{voters}]"),
        ("CurrentObservers", "[]"),
    ]
    return [f"{name + ':':<24}{value}" for name, value in fields]


def replication_rows(reply: raft_pb2.DescribeQuorumResponse) -> list[tuple[str, ...]]:
    """`--replication`: one row per voter (the leader first, then by id)."""
    leader_end = _leader_end(reply)
    ordered = sorted(reply.replicas, key=lambda r: (r.node_id != reply.leader_id, r.node_id))
    return [
        (
            str(r.node_id),
            str(r.log_end_offset),
            str(max(0, leader_end - r.log_end_offset)),
            str(r.last_fetch_timestamp_ms),
            str(r.last_caught_up_timestamp_ms),
            "Leader" if r.node_id == reply.leader_id else "Follower",
        )
        for r in ordered
    ]


def table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


# ---- asking -------------------------------------------------------------------------------


def _via_broker(addresses: list[str]) -> raft_pb2.DescribeQuorumResponse:
    import grpc

    from minikafka.v1 import broker_pb2_grpc

    last_error = ""
    for address in addresses:
        with grpc_channel(address) as channel:
            try:
                reply: raft_pb2.DescribeQuorumResponse = broker_pb2_grpc.BrokerServiceStub(
                    channel
                ).DescribeQuorum(raft_pb2.DescribeQuorumRequest(), timeout=RPC_TIMEOUT_S)
            except grpc.RpcError as error:
                last_error = f"{address}: {error.code().name} {error.details()}"
                continue
        if reply.error_code != ErrorCode.NONE:
            fail(f"{code_name(reply.error_code)}: {reply.error_message or 'no quorum'}")
        return reply
    fail(f"no broker answered ({last_error})")


def _via_controllers(addresses: list[str]) -> raft_pb2.DescribeQuorumResponse:
    """The active controller's answer; a standby's names where to ask next."""
    import grpc

    from minikafka.v1 import controller_pb2_grpc

    todo = list(addresses)
    asked: set[str] = set()
    first: raft_pb2.DescribeQuorumResponse | None = None
    last_error = ""
    while todo:
        address = todo.pop(0)
        if address in asked:
            continue
        asked.add(address)
        with grpc_channel(address) as channel:
            try:
                reply: raft_pb2.DescribeQuorumResponse = controller_pb2_grpc.ControllerServiceStub(
                    channel
                ).DescribeQuorum(raft_pb2.DescribeQuorumRequest(), timeout=RPC_TIMEOUT_S)
            except grpc.RpcError as error:
                last_error = f"{address}: {error.code().name} {error.details()}"
                continue
        if reply.active or reply.replicas:
            return reply
        first = first or reply
        if reply.leader_address and reply.leader_address not in asked:
            todo.insert(0, reply.leader_address)
    if first is not None:
        return first
    fail(f"no controller answered ({last_error})")


def _addresses(value: str, option: str) -> list[str]:
    try:
        return parse_bootstrap_servers(value, what=option)
    except ConfigError as exc:
        raise click.BadParameter(str(exc), param_hint=f"'--{option}'") from exc


# ---- the command --------------------------------------------------------------------------


@click.group("metadata-quorum", context_settings=CONTEXT_SETTINGS)
def metadata_quorum() -> None:
    """The controller quorum (like kafka-metadata-quorum.sh)."""


@metadata_quorum.command("describe", context_settings=CONTEXT_SETTINGS)
@config_file_option
@opt(
    "--bootstrap-server",
    metavar="HOST:PORT",
    help="Any broker of the cluster (or several, comma-separated); it asks the controllers.",
)
@opt(
    "--bootstrap-controller",
    metavar="HOST:PORT",
    help="A controller (or several, comma-separated); a standby's answer leads to the leader.",
)
@tls_client_options
@click.option("--status", "show_status", is_flag=True, help="Leader, epoch, lag, voters.")
@click.option("--replication", "show_replication", is_flag=True, help="One row per voter.")
def describe(
    bootstrap_server: str | None,
    bootstrap_controller: str | None,
    show_status: bool,
    show_replication: bool,
) -> None:
    """Describe the metadata quorum: --status or --replication."""
    if show_status == show_replication:
        raise click.UsageError("give exactly one of --status and --replication")
    if (bootstrap_server is None) == (bootstrap_controller is None):
        raise click.UsageError("give exactly one of --bootstrap-server and --bootstrap-controller")
    if bootstrap_server is not None:
        reply = _via_broker(_addresses(bootstrap_server, "bootstrap-server"))
    else:
        assert bootstrap_controller is not None
        reply = _via_controllers(_addresses(bootstrap_controller, "bootstrap-controller"))
    if show_status:
        for line in status_lines(reply):
            click.echo(line)
        return
    if not reply.replicas:
        fail(
            "no active controller answered (an election may be under way; the replication "
            f"state is the leader's): controller {reply.node_id} is {reply.role}"
        )
    for line in table(REPLICATION_COLUMNS, replication_rows(reply)):
        click.echo(line)
