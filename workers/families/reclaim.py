"""The job-reclaim family."""
