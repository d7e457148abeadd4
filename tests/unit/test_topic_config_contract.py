"""Contract: a standalone broker and a cluster's controller accept the same topic configs,
normalise them the same way, refuse the same values with the same code and message, and
apply the same limits (issue 21 item 1, issue 23). Rows are generated from the one table,
`minikafka.topic_config.TOPIC_CONFIGS`, so a new key is covered without editing this file.

The standalone side is the broker's store behind the admin backend the `minikafka`
command composes for it (`minikafka_cli.standalone_admin`), as a running broker has it;
the cluster side is the controller's state machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.clock import SystemClock
from broker.config import BrokerConfig
from broker.log.manager import LogManager
from broker.metadata_cache import MetadataCache
from broker.replica.manager import ReplicaManager
from broker.standalone import StandaloneStore
from broker.topic_settings import resolve_topic_settings
from controller.state_machine import NewTopic, Settings, create_topics
from minikafka.errors import ErrorCode, code_from_wire
from minikafka.limits import TopicLimits
from minikafka.topic_config import INT64_MAX, TOPIC_CONFIGS, Kind
from minikafka.v1 import common_pb2, controller_pb2
from minikafka_cli.standalone_admin import StateMachineAdmin
from tests.unit.controller.controller_harness import Harness

LIMITS = TopicLimits(
    max_partitions_per_topic=8,
    max_partitions_per_cluster=10,
    max_partitions_per_broker=10,
    min_segment_bytes=4096,
    min_segment_ms=1000,
)
#: For the configs test: room for one single-partition topic per row.
ROOMY = TopicLimits(min_segment_bytes=4096, min_segment_ms=1000)


def _values() -> Iterator[tuple[str, str]]:
    """For every key: its default, its bounds and the values just outside them, and junk."""
    for key, definition in sorted(TOPIC_CONFIGS.items()):
        yield key, "junk"
        if definition.default is not None:
            yield key, definition.default
        if definition.kind is Kind.INT:
            low = {"segment.bytes": 4096, "segment.ms": 1000}.get(key, definition.minimum)
            yield key, str(low)
            yield key, str(low - 1)
            yield key, str(definition.maximum)
            if definition.maximum < INT64_MAX:
                yield key, str(definition.maximum + 1)
            for special in definition.special:
                yield key, str(special)
        elif definition.kind is Kind.BOOL:
            yield from ((key, "TRUE"), (key, "false"))
        else:
            yield from ((key, choice) for choice in definition.choices)
            yield key, definition.choices[0].upper()
    yield "no.such.key", "1"


class Both:
    """One standalone broker's topic store and one controller state machine."""

    def __init__(self, tmp_path: Path, limits: TopicLimits) -> None:
        config = BrokerConfig(
            broker_id=1,
            listen="127.0.0.1:0",
            data_dir=str(tmp_path),
            standalone=True,
            max_partitions_per_topic=limits.max_partitions_per_topic,
            max_partitions_per_cluster=limits.max_partitions_per_cluster,
            max_partitions_per_broker=limits.max_partitions_per_broker,
            min_segment_bytes=limits.min_segment_bytes,
            min_segment_ms=limits.min_segment_ms,
        )
        assert config.topic_limits() == limits
        self.logs = LogManager(tmp_path, resolve_topic_settings(config, {}).log, now_ms=0)
        metadata = MetadataCache()
        replicas = ReplicaManager(
            config=config,
            logs=self.logs,
            clock=SystemClock(),
            topic_configs=lambda topic: dict(metadata.topic_configs.get(topic, {})),
        )
        self.store = StandaloneStore(
            data_dir=tmp_path, broker_id=1, replicas=replicas, metadata=metadata, now_ms=0
        )
        self.standalone = StateMachineAdmin(
            store=self.store,
            config=config,
            endpoint=common_pb2.BrokerEndpoint(broker_id=1, host="127.0.0.1", port=1),
            clock=SystemClock(),
        )
        self.cluster = Harness(Settings(limits=limits))
        self.cluster.start_brokers(1)

    async def create(
        self, name: str, partitions: int, configs: dict[str, str]
    ) -> tuple[tuple[ErrorCode, str, dict[str, str]], tuple[ErrorCode, str, dict[str, str]]]:
        response = await self.standalone.create_topics(
            controller_pb2.CreateTopicsRequest(
                topics=[
                    controller_pb2.CreatableTopic(
                        name=name, num_partitions=partitions, replication_factor=1, configs=configs
                    )
                ]
            )
        )
        reply = response.topics[0]
        standalone = (
            code_from_wire(reply.error_code),
            reply.error_message,
            self.store.topic_configs(name),
        )
        result = self.cluster.commit(
            create_topics(
                self.cluster.state,
                self.cluster.settings,
                topics=[
                    NewTopic(
                        name=name, num_partitions=partitions, replication_factor=1, configs=configs
                    )
                ],
                validate_only=False,
            )
        )[0]
        record = self.cluster.state.topics.get(name)
        cluster = (result.error, result.message, dict(record.configs) if record else {})
        return standalone, cluster


@pytest.fixture
def both(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Both]:
    stores = Both(tmp_path, ROOMY if "configs" in request.node.name else LIMITS)
    try:
        yield stores
    finally:
        stores.logs.shutdown()


async def test_standalone_and_cluster_accept_the_same_topic_configs(both: Both) -> None:
    accepted = 0
    for index, (key, value) in enumerate(_values()):
        standalone, cluster = await both.create(f"t{index}", 1, {key: value})
        assert standalone == cluster, (key, value)
        if standalone[0] is ErrorCode.NONE:
            accepted += 1
        else:
            assert standalone[0] is ErrorCode.INVALID_CONFIG, (key, value, standalone)
    assert accepted > len(TOPIC_CONFIGS)


@pytest.mark.parametrize(
    ("partitions", "code", "message"),
    [
        pytest.param(9, ErrorCode.INVALID_PARTITIONS, "max.partitions.per.topic=8", id="per-topic"),
        pytest.param(0, ErrorCode.INVALID_PARTITIONS, "at least 1", id="zero"),
        pytest.param(
            100_000, ErrorCode.INVALID_PARTITIONS, "max.partitions.per.topic=8", id="absurd"
        ),
        pytest.param(8, ErrorCode.NONE, "", id="at-the-limit"),
    ],
)
async def test_standalone_and_cluster_apply_the_same_partition_limits(
    both: Both, partitions: int, code: ErrorCode, message: str
) -> None:
    standalone, cluster = await both.create("t", partitions, {})
    assert standalone == cluster
    assert standalone[0] is code
    assert message in standalone[1]


async def test_the_cluster_and_broker_limits_count_existing_partitions(both: Both) -> None:
    await both.create("a", 6, {})
    standalone, cluster = await both.create("b", 6, {})
    assert standalone[0] is cluster[0] is ErrorCode.POLICY_VIOLATION
    assert "max.partitions.per.cluster=10" in standalone[1]
    assert "max.partitions.per.cluster=10" in cluster[1]
