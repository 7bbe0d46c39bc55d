"""The search attributes of the runner family's workflows: the one place their names live."""

from temporalio.common import SearchAttributeKey, SearchAttributePair, TypedSearchAttributes

RUNNER_NAME = SearchAttributeKey.for_keyword("RunnerName")
SCALE_SET = SearchAttributeKey.for_keyword("ScaleSet")
RUNNER_STEP = SearchAttributeKey.for_keyword("RunnerStep")

RUNNER_ATTRIBUTES = (RUNNER_NAME, SCALE_SET, RUNNER_STEP)


def for_runner(runner: str) -> TypedSearchAttributes:
    return TypedSearchAttributes([SearchAttributePair(RUNNER_NAME, runner)])
