"""Job reclaim: adapters over spur's controller, its agents and keeper's reclaim memory."""
