"""The broker process: storage (`log/`), replication (`replica/`) and gRPC servicers (`server/`)."""
