"""`python -m minikafka` is the `minikafka` command.

The one module of the kernel that reaches up to the command's package: an entry-point
shim run only as `__main__`, never imported by the kernel itself.
"""

from minikafka_cli.main import main

main(prog_name="minikafka")
