"""Job watch: what iris shows of a long pipeline job, and whether it is alive (pure rules)."""
