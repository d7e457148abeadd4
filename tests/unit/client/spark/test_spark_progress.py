"""Spark's Kafka source progress metrics computed from a progress (client/spark/progress.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import pytest

from client.spark.progress import offsets_behind_latest, source_metrics


@pytest.mark.parametrize(
    ("consumed", "latest", "expected"),
    [
        ({}, {}, {}),
        (
            {("t", 0): 4, ("t", 1): 10},
            {("t", 0): 10, ("t", 1): 10},
            {
                "minOffsetsBehindLatest": "0",
                "maxOffsetsBehindLatest": "6",
                "avgOffsetsBehindLatest": "3.0",
            },
        ),
        (  # a partition not read yet counts from 0, as in Spark
            {("t", 0): 5},
            {("t", 0): 5, ("t", 1): 3},
            {
                "minOffsetsBehindLatest": "0",
                "maxOffsetsBehindLatest": "3",
                "avgOffsetsBehindLatest": "1.5",
            },
        ),
    ],
    ids=["no-partitions", "two-partitions", "new-partition"],
)
def test_offsets_behind_latest(
    consumed: dict[Any, int], latest: dict[Any, int], expected: dict[str, str]
) -> None:
    assert offsets_behind_latest(consumed, latest) == expected


def test_source_metrics_from_a_progress_dict_or_a_listener_object() -> None:
    end = {"t": {"0": 4, "1": 2}}
    latest = {"t": {"0": 10, "1": 2}}
    expected = {
        "minOffsetsBehindLatest": "0",
        "maxOffsetsBehindLatest": "6",
        "avgOffsetsBehindLatest": "3.0",
    }
    assert source_metrics({"endOffset": end, "latestOffset": latest}) == expected
    listener = SimpleNamespace(endOffset=json.dumps(end), latestOffset=json.dumps(latest))
    assert source_metrics(listener) == expected
    assert source_metrics({"endOffset": end, "latestOffset": None}) == {}
    with pytest.raises(ValueError, match="expected offsets like"):
        source_metrics({"endOffset": "[1]", "latestOffset": latest})


def test_source_metrics_report_the_truncated_records_of_the_run() -> None:
    got = source_metrics(
        {
            "endOffset": {"t": {"0": 35}},
            "latestOffset": {"t": {"0": 35}, "@truncated": {"records": 20}},
        }
    )
    assert got["truncatedRecords"] == "20"
    assert got["maxOffsetsBehindLatest"] == "0"
