"""Job reclaim: what an agent may keep, what keeper releases, and how (pure rules)."""
