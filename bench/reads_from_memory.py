"""`bench/worker_cpu.py --reads-from-memory`: keeper's watch worker with each job's check
answered from memory once it has read the job whole, so the figure beside the real one is a
check's worker CPU without its iris reads (the workflow, the activity attempts and the
observation's conversion all as in a real check).

Installed by the worker process's own command line, before keeper starts; nothing in keeper
knows of it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from keeper.activities.watch.observe import WatchObserver
from keeper.domain.watch.calls import Observation, ObserveCall


def install() -> None:
    read = WatchObserver._observe
    kept: dict[str, Observation] = {}

    async def from_memory(self: WatchObserver, call: ObserveCall) -> Observation:
        seen = kept.get(call.job_id)
        if seen is not None:
            return seen.model_copy(update={"at": datetime.now(UTC)})
        seen = await read(self, call)
        if seen.cpu:  # a whole read: the coordinator running, its CPU and threads read
            kept[call.job_id] = seen
        return seen

    WatchObserver._observe = from_memory  # type: ignore[method-assign]
