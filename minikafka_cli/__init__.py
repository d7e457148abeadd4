"""The `minikafka` command: client tools (`topic`, `produce`, `consume`, ...), the server
processes (`broker`, `controller`) and the local cluster (`minikafka dev`).

It sits above everything else: it imports `broker`, `controller`, `client` and the shared
kernel `minikafka`; nothing imports it (`python -m minikafka` is a shim that runs it).
"""
