"""`keeper reclaim`: list, status, report, release and the heartbeat tap."""
