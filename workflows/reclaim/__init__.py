"""Job reclaim: the JobReclaim workflow, one per fence key."""
