"""The search attributes of the job-reclaim family's workflows: the one place their names live.

`KeeperStep` (shared by every family) holds the reclaim's step: assess, graceful-cancel,
forced-kill, drained, observing, done.
"""

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from keeper.runtime.shared_search_attributes import JOB_ID, KEEPER_STEP

NODE = SearchAttributeKey.for_keyword("Node")

RECLAIM_ATTRIBUTES = (NODE, JOB_ID, KEEPER_STEP)


def for_holding(node: str, job_id: int, step: str) -> TypedSearchAttributes:
    """Set at the start, so a reclaim is findable by node and job before its first task."""
    return TypedSearchAttributes(
        [
            SearchAttributePair(NODE, node),
            SearchAttributePair(JOB_ID, str(job_id)),
            SearchAttributePair(KEEPER_STEP, step),
        ]
    )
