"""The job-watch family's workflows."""
