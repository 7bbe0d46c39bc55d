"""Job watch: the iris controller client, its typed errors and its token."""
