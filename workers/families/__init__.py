"""Workflow families: what each one serves, needs and schedules, and the one map of them.

A family is one lifecycle (TPU slices, runner deletions, ...). It exports its workflows,
the input help its workflows give, the clients its activities need (opened only by a worker
that serves it), its activities built on those clients, and its schedules. `keeper worker
--family` serves any subset, each family on its own task queue with its own activity slots.
"""

from __future__ import annotations

from keeper.workers.families.family import Family, ScheduleSpecOf
from keeper.workers.families.reclaim import RECLAIM
from keeper.workers.families.runners import RUNNERS
from keeper.workers.families.tpu import TPU
from keeper.workers.families.watch import WATCH

FAMILIES: dict[str, Family] = {family.name: family for family in (TPU, RUNNERS, RECLAIM, WATCH)}

__all__ = ["FAMILIES", "Family", "ScheduleSpecOf"]
