"""The controller process: owns cluster metadata (brokers, topics, partition registrations).

Pure core (`election`, `partition_change`, `placement`, `topic_config`, `rebalance`,
`state_machine`) and a thin shell (`journal`, `liveness`, `dispatcher`, `server`, `app`).
"""
