"""ACLs in the controller's metadata: create/delete as records, replay, snapshots and the
journal (they survive a restart because they are records like any other)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.journal import Journal
from controller.model import ClusterState
from controller.records import AclRecord, RemoveAclRecord
from controller.state_machine import create_acls, delete_acls, replay, snapshot_records
from minikafka.acl import AclBinding, AclFilter, Operation, Permission, ResourceType
from minikafka.errors import ErrorCode


def acl(principal: str, operation: Operation, topic: str = "orders", **kw: object) -> AclBinding:
    return AclBinding(
        principal=principal,
        resource_type=ResourceType.TOPIC,
        resource_name=topic,
        operation=operation,
        **kw,  # type: ignore[arg-type]
    )


ALICE = acl("User:alice", Operation.WRITE)
BOB = acl("User:bob", Operation.READ)
BOB_DENY = acl("User:bob", Operation.WRITE, permission=Permission.DENY)


def apply(state: ClusterState, records: tuple[object, ...]) -> ClusterState:
    for record in records:
        state = replay(state, state.metadata_offset + 1, record)  # type: ignore[arg-type]
    return state


def test_create_writes_only_new_bindings() -> None:
    result = create_acls(ClusterState(), [ALICE, BOB, ALICE])
    assert result.reply.error is ErrorCode.NONE
    assert set(result.records) == {AclRecord(binding=ALICE), AclRecord(binding=BOB)}
    state = apply(ClusterState(), result.records)
    assert state.acls == {ALICE, BOB}
    assert create_acls(state, [ALICE]).records == ()


def test_create_is_all_or_nothing() -> None:
    bad = acl("alice", Operation.WRITE)
    result = create_acls(ClusterState(), [ALICE, bad])
    assert result.reply.error is ErrorCode.INVALID_REQUEST
    assert "User:NAME" in result.reply.message
    assert result.records == ()


@pytest.mark.parametrize(
    ("filters", "deleted"),
    [
        pytest.param([AclFilter(principal="User:bob")], {BOB, BOB_DENY}, id="by principal"),
        pytest.param([AclFilter(permission=Permission.DENY)], {BOB_DENY}, id="by permission"),
        pytest.param([AclFilter()], {ALICE, BOB, BOB_DENY}, id="everything"),
        pytest.param([AclFilter(resource_name="other")], set(), id="nothing"),
    ],
)
def test_delete_by_filter(filters: list[AclFilter], deleted: set[AclBinding]) -> None:
    state = apply(ClusterState(), create_acls(ClusterState(), [ALICE, BOB, BOB_DENY]).records)
    result = delete_acls(state, filters)
    assert set(result.reply.deleted) == deleted
    assert set(result.records) == {RemoveAclRecord(binding=b) for b in deleted}
    assert apply(state, result.records).acls == {ALICE, BOB, BOB_DENY} - deleted


def test_replay_is_idempotent_and_snapshots_keep_acls() -> None:
    state = apply(ClusterState(), (AclRecord(binding=ALICE), AclRecord(binding=ALICE)))
    assert state.acls == {ALICE}
    rebuilt = apply(ClusterState(), tuple(snapshot_records(state)))
    assert rebuilt.acls == state.acls


def test_acls_survive_a_journal_restart(tmp_path: Path) -> None:
    journal, state = Journal.open(tmp_path)
    for record in (AclRecord(binding=ALICE), AclRecord(binding=BOB), RemoveAclRecord(binding=BOB)):
        state = replay(state, journal.append([record]), record)
    journal.close()
    reopened, recovered = Journal.open(tmp_path)
    assert recovered.acls == {ALICE}
    reopened.close()
