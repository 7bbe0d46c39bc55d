"""The job-watch family's activities."""
