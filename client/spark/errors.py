"""Errors raised by the minikafka Spark source: bad options and lost data."""

from __future__ import annotations

from minikafka.errors import ErrorCode, MiniKafkaError


class SourceOptionError(ValueError):
    """An option given to `spark.read(Stream).format("minikafka")` is missing or invalid."""


class DataLossError(MiniKafkaError):
    """Offsets the query planned to read are gone (retention, truncation, deleted topic).

    Raised only with `failOnDataLoss=true` (the default); with `false` the source logs a
    warning and skips the missing range instead.
    """

    default_code = ErrorCode.OFFSET_OUT_OF_RANGE


class SourceReadError(MiniKafkaError):
    """The cluster could not serve a read within the source's time bound."""

    default_code = ErrorCode.REQUEST_TIMED_OUT


class SinkOptionError(ValueError):
    """An option or a column given to `df.write(Stream).format("minikafka")` is missing
    or invalid."""


class SinkWriteError(MiniKafkaError):
    """A sink task could not deliver its rows (the task fails; Spark retries it)."""

    default_code = ErrorCode.UNKNOWN_SERVER_ERROR
