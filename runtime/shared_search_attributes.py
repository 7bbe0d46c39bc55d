"""Search attributes more than one family sets, so each is defined once."""

from temporalio.common import SearchAttributeKey

# The job a workflow is about: a spur job id (reclaim) or an iris job id (watch).
JOB_ID = SearchAttributeKey.for_keyword("JobId")
