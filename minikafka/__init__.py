"""minikafka shared kernel: error codes, the record batch format, topic configs, limits,
config loading, gRPC options and the metrics endpoint.

`broker`, `controller` and `client` all import from here and never from each other; the
kernel imports none of them (the `minikafka` command lives in `minikafka_cli`, above).
"""

__version__ = "0.1.0"
