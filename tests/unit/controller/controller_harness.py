"""A pure in-memory controller for unit tests: handlers + replay, no journal, no sockets."""

from __future__ import annotations

from typing import TypeVar

from controller.model import ClusterState, PartitionKey, PartitionRegistration
from controller.state_machine import (
    ControllerResult,
    ElectionEvent,
    NewTopic,
    Settings,
    create_topics,
    heartbeat,
    register_broker,
    replay,
)
from minikafka.errors import ErrorCode

T = TypeVar("T")


class Harness:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings if settings is not None else Settings()
        self.state = ClusterState(cluster_id="test", controller_epoch=1)
        self.elections: list[ElectionEvent] = []
        self.warnings: list[str] = []

    def commit(self, result: ControllerResult[T]) -> T:
        offset = self.state.metadata_offset
        for record in result.records:
            offset += 1
            self.state = replay(self.state, offset, record)
        self.elections.extend(result.elections)
        self.warnings.extend(result.warnings)
        return result.reply

    def register(
        self,
        broker_id: int,
        *,
        clean_shutdown: bool = True,
        session_alive: bool = False,
        incarnation: str | None = None,
        rack: str = "",
        directory_id: str | None = None,
    ) -> int:
        """Register `broker_id`; `clean_shutdown` proves the previous registration's epoch
        (as a broker that stopped cleanly does), otherwise it sends none."""
        existing = self.state.brokers.get(broker_id)
        previous = existing.broker_epoch if existing is not None and clean_shutdown else -1
        reply = self.commit(
            register_broker(
                self.state,
                self.settings,
                broker_id=broker_id,
                host="127.0.0.1",
                port=9000 + broker_id,
                rack=rack,
                incarnation_id=incarnation
                or f"incarnation-{broker_id}-{self.state.metadata_offset}",
                previous_broker_epoch=previous,
                directory_id=f"dir-{broker_id}" if directory_id is None else directory_id,
                session_alive=session_alive,
            )
        )
        assert reply.error is ErrorCode.NONE, reply
        return reply.broker_epoch

    def unfence(self, broker_id: int) -> None:
        reply = self.commit(
            heartbeat(
                self.state,
                self.settings,
                broker_id=broker_id,
                broker_epoch=self.state.brokers[broker_id].broker_epoch,
                want_shutdown=False,
                caught_up_offset=self.state.metadata_offset,
            )
        )
        assert reply.error is ErrorCode.NONE
        assert not reply.is_fenced

    def start_brokers(self, *broker_ids: int) -> None:
        for broker_id in broker_ids:
            self.register(broker_id)
            self.unfence(broker_id)

    def create(
        self, name: str, *, partitions: int = 1, rf: int = 3, configs: dict[str, str] | None = None
    ) -> None:
        (result,) = self.commit(
            create_topics(
                self.state,
                self.settings,
                topics=[
                    NewTopic(
                        name=name,
                        num_partitions=partitions,
                        replication_factor=rf,
                        configs=configs or {},
                    )
                ],
                validate_only=False,
            )
        )
        assert result.error is ErrorCode.NONE, result

    def part(self, key: PartitionKey) -> PartitionRegistration:
        return self.state.partitions[key]
