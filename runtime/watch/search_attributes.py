"""The search attributes of the job-watch family's workflows: the one place their names live."""

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

# JobId: the iris job watched. KeeperStep (every family's "where this run is"): for a watch,
# the job's iris state in lower case (running, succeeded, failed, killed, ...; unknown before
# the first check, missing when iris does not know the job).
from keeper.runtime.shared_search_attributes import JOB_ID, KEEPER_STEP

# The liveness verdict of the job's latest attempt: running, stalled or unknown, as a
# one-value list (`Verdict = 'stalled'` finds it): SQL visibility has ten Keyword columns and
# keeper's families fill them (runtime/search_attributes.py).
VERDICT = SearchAttributeKey.for_keyword_list("Verdict")

WATCH_ATTRIBUTES = (JOB_ID, KEEPER_STEP, VERDICT)


def for_job(job_id: str) -> TypedSearchAttributes:
    """Set at the start, so a watch is findable by job before its first check."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(JOB_ID, job_id),
            SearchAttributePair(KEEPER_STEP, "unknown"),
            SearchAttributePair(VERDICT, ["unknown"]),
        ]
    )
