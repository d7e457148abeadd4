"""`python -m benchmarks` (`make bench`): the benchmark suite.

Runs the storage micro-benchmark (PartitionLog vs plain os.write, same run). The client
throughput benchmark needs a running cluster: `python -m benchmarks.client_bench
--bootstrap HOST:PORT`.
"""

from benchmarks.storage_bench import main

main()
