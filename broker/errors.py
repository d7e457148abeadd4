"""Errors the broker returns per partition; each carries its wire `ErrorCode`."""

from __future__ import annotations

from minikafka.errors import ErrorCode, MiniKafkaError


class BrokerError(MiniKafkaError):
    """Base of broker-side request errors."""


class NotLeaderOrFollowerError(BrokerError):
    default_code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class UnknownTopicOrPartitionError(BrokerError):
    default_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class FencedLeaderEpochError(BrokerError):
    default_code = ErrorCode.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(BrokerError):
    default_code = ErrorCode.UNKNOWN_LEADER_EPOCH


class NotEnoughReplicasError(BrokerError):
    default_code = ErrorCode.NOT_ENOUGH_REPLICAS


class InvalidRequiredAcksError(BrokerError):
    default_code = ErrorCode.INVALID_REQUIRED_ACKS


class InvalidRequestError(BrokerError):
    default_code = ErrorCode.INVALID_REQUEST


class StaleBrokerEpochError(BrokerError):
    default_code = ErrorCode.STALE_BROKER_EPOCH


class StaleControllerEpochError(BrokerError):
    default_code = ErrorCode.STALE_CONTROLLER_EPOCH


class ReplicaNotAvailableError(BrokerError):
    default_code = ErrorCode.REPLICA_NOT_AVAILABLE
