"""Search attributes more than one family sets, so each is defined once."""

from temporalio.common import SearchAttributeKey

# The job a workflow is about: a spur job id (reclaim) or an iris job id (watch).
JOB_ID = SearchAttributeKey.for_keyword("JobId")
# Where a run is, in every family: a bootstrap's phase (assign, provision, ...), a runner
# deletion's step, a reclaim's step, a watch's job state. One column for all four, so
# `KeeperStep = 'escalated'` reads the same in the UI whichever family it finds.
KEEPER_STEP = SearchAttributeKey.for_keyword("KeeperStep")
