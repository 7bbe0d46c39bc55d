"""Job reclaim: spur clients, the heartbeat tap and the intake."""
