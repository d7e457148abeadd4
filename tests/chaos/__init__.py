"""Fault suite: history recorder and checker, nemeses, and the reliability scenarios.

- `history.py` records every client op (invoke / ok / fail / info) as JSON lines;
  `checker.py` analyses a history (lost, unseen, vanished, duplicate, inconsistent
  offsets, unexpected, G1a, poll skips and non-monotonic polls/sends) and writes
  `results.json` + `results.txt`; `workload.py` drives the real client and records.
- Nemeses live in `tests/support/chaos_proxy.py` (network) and
  `tests/support/chaos_cluster.py` (processes, storage, elections); `test_nemesis.py`
  proves each does what it claims.
- Consumer groups: `group_workers.py` runs group members as processes
  (`tests/support/group_worker.py`, each logging its records, assignments and commits)
  and `group_checker.py` judges their logs (concurrent owners, unprocessed records,
  lost or backward commits, accepted zombie commits, resumes off the committed offset);
  scenarios G01-G03 in `test_groups.py`.
- Scenarios are named after the reliability matrix (R01-R32). `pytest tests/chaos` runs
  the CI subset; `MINIKAFKA_CHAOS_LONG=1` adds seeds and the R21 soak;
  `MINIKAFKA_CHAOS_SEED=N pytest tests/chaos -k r05` replays one seed.
"""
