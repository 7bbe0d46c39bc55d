"""The search attributes of the runner family's workflows: the one place their names live.

Where a deletion is (its step) is KeeperStep, the attribute every family shares."""

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

from keeper.runtime.shared_search_attributes import KEEPER_STEP

RUNNER_NAME = SearchAttributeKey.for_keyword("RunnerName")
SCALE_SET = SearchAttributeKey.for_keyword("ScaleSet")

RUNNER_ATTRIBUTES = (RUNNER_NAME, SCALE_SET, KEEPER_STEP)


def for_runner(runner: str) -> TypedSearchAttributes:
    return TypedSearchAttributes([SearchAttributePair(RUNNER_NAME, runner)])
