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
records (below each partition's high watermark) are ever read.

    (df.write.format("minikafka")            # or df.writeStream...start()
       .option("kafka.bootstrap.servers", "127.0.0.1:9092")
       .option("topic", "orders").mode("append").save())

writes columns `value`, `key`, `topic`, `partition`, `headers` as Spark's Kafka sink
does (at-least-once; see `client.spark.sink`). Needs the `spark` extra.
"""

from client.spark.errors import (
    DataLossError,
    SinkOptionError,
    SinkWriteError,
    SourceOptionError,
    SourceReadError,
)
from client.spark.progress import source_metrics
from client.spark.sink import MiniKafkaStreamWriter, MiniKafkaWriter, SinkCommitMessage
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
    "MiniKafkaStreamWriter",
    "MiniKafkaWriter",
    "SinkCommitMessage",
    "SinkOptionError",
    "SinkWriteError",
    "SourceOptionError",
    "SourceReadError",
    "TopicPartitionRange",
    "source_metrics",
]
