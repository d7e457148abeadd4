"""Consumer groups, KIP-848 style: the coordinator assigns, members heartbeat.

Pure core (no I/O, time passed in): `model` (the immutable group and member records),
`assignors` (server-side `range` and `uniform`), `reconcile` (one member's way from what it
owns to its target, revoke before assign) and `membership` (the heartbeat, leave, session
and rebalance-timeout transitions of a whole group, and the member-epoch check of offset
commits).
"""
