"""minikafka shared kernel: error codes, the record batch format, config loading and the CLI.

`broker`, `controller` and `client` all import from here and never from each other.
"""

__version__ = "0.1.0"
