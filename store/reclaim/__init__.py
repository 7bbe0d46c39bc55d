"""keeper's reclaim memory: holdings first seen, jobs seen, controller epochs, drains owned."""
