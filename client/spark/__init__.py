"""PySpark source for minikafka: `spark.readStream.format("minikafka")` and `spark.read`.

    from client.spark import MiniKafkaDataSource

    spark.dataSource.register(MiniKafkaDataSource)
    df = (spark.readStream.format("minikafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "orders")
          .option("startingOffsets", "earliest")
          .load())

Rows have Spark's Kafka source schema (`key`, `value`, `topic`, `partition`, `offset`,
`timestamp`, `timestampType`, and `headers` with `includeHeaders=true`); only committed
records (below each partition's high watermark) are ever read. Needs the `spark` extra.
"""

from client.spark.errors import DataLossError, SourceOptionError, SourceReadError
from client.spark.source import (
    MiniKafkaBatchReader,
    MiniKafkaDataSource,
    MiniKafkaStreamReader,
    TopicPartitionRange,
)

__all__ = [
    "DataLossError",
    "MiniKafkaBatchReader",
    "MiniKafkaDataSource",
    "MiniKafkaStreamReader",
    "SourceOptionError",
    "SourceReadError",
    "TopicPartitionRange",
]
