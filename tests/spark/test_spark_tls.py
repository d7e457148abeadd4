"""The Spark source and sink over TLS (issue 22, Deliver 3): a `minikafka dev --tls` cluster
(mutual TLS), the sink writes with `kafka.security.protocol=SSL` and the client certificate,
the source reads the same rows back with the same options, and a sink without them fails."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

from client import Admin, NewTopic
from minikafka_cli.devcluster import DevCluster

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

TOPIC = "tls-rows"


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    cluster = DevCluster(
        brokers=1,
        controllers=1,
        data_dir=tmp_path_factory.mktemp("spark-tls"),
        base_port=0,
        log_level="INFO",
        tls=True,
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def spark_tls_options(cluster: DevCluster) -> dict[str, str]:
    files = cluster.client_files()
    return {
        "kafka.bootstrap.servers": cluster.bootstrap,
        "kafka.security.protocol": "SSL",
        "kafka.ssl.cafile": files["ssl_cafile"],
        "kafka.ssl.certfile": files["ssl_certfile"],
        "kafka.ssl.keyfile": files["ssl_keyfile"],
    }


def test_sink_and_source_pass_tls_options_through(
    spark: SparkSession, tls_cluster: DevCluster
) -> None:
    files = tls_cluster.client_files()
    with Admin(tls_cluster.bootstrap, **files) as admin:
        admin.create_topics(NewTopic(TOPIC, num_partitions=2, replication_factor=1))
    rows = [(b"k%d" % (i % 3), b"v%02d" % i, i % 2) for i in range(20)]
    df = spark.createDataFrame(rows, "key binary, value binary, partition int")
    options = spark_tls_options(tls_cluster)
    df.write.format("minikafka").options(**options).option("topic", TOPIC).mode("append").save()

    got = (
        spark.read.format("minikafka")
        .options(**options)
        .option("subscribe", TOPIC)
        .load()
        .collect()
    )
    assert sorted((r.key, r.value, r.partition) for r in got) == sorted(rows)

    # Plaintext against the mutual-TLS listener: the write fails, nothing more is appended.
    plain = {"kafka.bootstrap.servers": tls_cluster.bootstrap, "kafka.max.block.ms": "2000"}
    with pytest.raises(Exception, match=r"(?i)timed out|unavailable|connect|metadata"):
        df.write.format("minikafka").options(**plain).option("topic", TOPIC).mode("append").save()
    again = spark.read.format("minikafka").options(**options).option("subscribe", TOPIC).load()
    assert again.count() == len(rows)
