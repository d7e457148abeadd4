"""`python -m minikafka_cli` is the `minikafka` command."""

from minikafka_cli.main import main

main(prog_name="minikafka")
