"""The controller process: owns cluster metadata (brokers, topics, partition registrations).

Pure core (`election`, `partition_change`, `placement`, `rebalance`,
`state_machine`, the Raft core `raft`; topic configs and limits live in the kernel,
`minikafka.topic_config` and `minikafka.limits`) and a thin shell: the metadata log
(`quorum` runs the Raft core, `raft_transport` / `raft_wire` carry its messages,
`metadata_log` puts records and snapshots in it, `metadata_dir` formats the data directory
and converts the single-controller `journal`), the active controller (`engine`, `liveness`,
`dispatcher`), `server`, `app`.
"""
