"""The source's synchronous wire reader against a real cluster (no JVM needed)."""

from __future__ import annotations

import logging

import pytest

from client.spark.errors import DataLossError
from client.spark.wire import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, WireReader
from tests.spark.conftest import bootstrap, produce_values
from tests.support.cluster import Cluster

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]


def test_list_offsets_and_exact_range_reads(cluster: Cluster) -> None:
    cluster.create_topic("wire", partitions=2, rf=3)
    produce_values(cluster, "wire", [b"a", b"b", b"c", b"d", b"e"], key=b"k")
    with WireReader(bootstrap(cluster).split(","), timeout_ms=10_000) as wire:
        tps = [("wire", 0), ("wire", 1)]
        assert wire.list_offsets(tps, EARLIEST_TIMESTAMP) == {("wire", 0): 0, ("wire", 1): 0}
        assert wire.list_offsets(tps, LATEST_TIMESTAMP) == {("wire", 0): 5, ("wire", 1): 0}
        chunks = list(wire.fetch_range("wire", 0, 1, 4, fail_on_data_loss=True))
    assert [o for c in chunks for o in c.offsets] == [1, 2, 3]
    assert [v for c in chunks for v in c.values] == [b"b", b"c", b"d"]


def test_missing_offsets_fail_or_are_skipped_per_fail_on_data_loss(
    cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    cluster.create_topic("wire-loss", rf=3)
    produce_values(cluster, "wire-loss", [b"a", b"b"])
    with WireReader(bootstrap(cluster).split(","), timeout_ms=10_000) as wire:
        with pytest.raises(DataLossError, match=r"offsets \[5, 9\) of wire-loss-0 are gone"):
            list(wire.fetch_range("wire-loss", 0, 5, 9, fail_on_data_loss=True))
        with caplog.at_level(logging.WARNING, logger="client.spark.wire"):
            assert list(wire.fetch_range("wire-loss", 0, 5, 9, fail_on_data_loss=False)) == []
    assert "skipping lost records" in caplog.text
