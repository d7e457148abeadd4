"""Spark's Kafka source progress metrics for the minikafka source.

Spark's Kafka source reports `minOffsetsBehindLatest`, `maxOffsetsBehindLatest` and
`avgOffsetsBehindLatest` in each source's `metrics` of a query's progress. PySpark 4.3
gives Python sources no hook to fill `metrics`, but the same numbers follow from what
the progress does hold: `endOffset` (where the micro-batch ended) and `latestOffset`
(each partition's high watermark when it was planned, from `reportLatestOffset`).

    progress = query.lastProgress
    metrics = source_metrics(progress["sources"][0])
    # {"minOffsetsBehindLatest": "0", "maxOffsetsBehindLatest": "120",
    #  "avgOffsetsBehindLatest": "60.0"}

Also works on the `SourceProgress` objects a `StreamingQueryListener` gets. The
minikafka source adds `truncatedRecords`: how many delivered records this run of the
query found truncated under it (an unclean election) with `failOnDataLoss=false`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from client.spark.offsets import TRUNCATED_KEY, Offsets, flatten


def offsets_behind_latest(consumed: Mapping[Any, int], latest: Mapping[Any, int]) -> dict[str, str]:
    """Spark's `KafkaMicroBatchStream.metrics`: per partition of `latest`, how far the
    consumed offset (0 when the query has not read it yet) is behind; min, max and mean
    as strings (mean as a float, as Scala prints a Double). Empty without partitions."""
    behind = [offset - consumed.get(tp, 0) for tp, offset in latest.items()]
    if not behind:
        return {}
    return {
        "minOffsetsBehindLatest": str(min(behind)),
        "maxOffsetsBehindLatest": str(max(behind)),
        "avgOffsetsBehindLatest": str(sum(behind) / len(behind)),
    }


def _offsets(value: Any) -> Offsets | None:
    if value is None:
        return None
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, Mapping):
        raise ValueError(f"expected offsets like {{'topic': {{'0': 42}}}}, got {value!r}")
    return flatten(value)


def source_metrics(source: Any) -> dict[str, str]:
    """The Kafka source's progress metrics of one source's progress: a dict from
    `query.lastProgress["sources"]` or a `SourceProgress` from a listener. Empty before
    the first micro-batch (no `endOffset` or `latestOffset` yet)."""
    if isinstance(source, Mapping):
        end, latest = source.get("endOffset"), source.get("latestOffset")
    else:
        end, latest = getattr(source, "endOffset", None), getattr(source, "latestOffset", None)
    consumed, available = _offsets(end), _offsets(latest)
    if consumed is None or available is None:
        return {}
    metrics = offsets_behind_latest(consumed, available)
    if isinstance(latest, str):
        latest = json.loads(latest)
    truncated = latest.get(TRUNCATED_KEY) if isinstance(latest, Mapping) else None
    if isinstance(truncated, Mapping) and "records" in truncated:
        metrics["truncatedRecords"] = str(truncated["records"])
    return metrics
