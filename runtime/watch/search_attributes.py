"""The search attributes of the job-watch family's workflows: the one place their names live."""

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from keeper.runtime.shared_search_attributes import JOB_ID

# The job's iris state, lower case (running, succeeded, failed, killed, ...).
JOB_STATE = SearchAttributeKey.for_keyword("JobState")
# The liveness verdict of the job's latest attempt: running, stalled or unknown, as a
# one-value list (`Verdict = 'stalled'` finds it): SQL visibility has ten Keyword columns and
# keeper's families fill them (runtime/search_attributes.py).
VERDICT = SearchAttributeKey.for_keyword_list("Verdict")

WATCH_ATTRIBUTES = (JOB_ID, JOB_STATE, VERDICT)


def for_job(job_id: str) -> TypedSearchAttributes:
    """Set at the start, so a watch is findable by job before its first check."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(JOB_ID, job_id),
            SearchAttributePair(JOB_STATE, "unknown"),
            SearchAttributePair(VERDICT, ["unknown"]),
        ]
    )
