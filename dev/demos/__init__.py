"""`keeper-dev demo tpu|runner|reclaim|job`: each family's workflow at work on the local stack
that `keeper-dev up` runs, against the emulators."""

from __future__ import annotations

import click

from dev.demos.job import demo as job_demo
from dev.demos.reclaim import demo as reclaim_demo
from dev.demos.runner import demo as runner_demo
from dev.demos.tpu import demo as tpu_demo


@click.group(
    commands={"job": job_demo, "reclaim": reclaim_demo, "runner": runner_demo, "tpu": tpu_demo}
)
def demo() -> None:
    """Run one workflow family's demo on the local stack (`keeper-dev up` first).

    \b
      keeper-dev demo tpu      bootstrap a small demo slice and watch it go READY
      keeper-dev demo runner   seed runners, then delete one through its workflow
      keeper-dev demo reclaim  leak a job on a spur agent and watch keeper release it
      keeper-dev demo job      launch a job that is killed and retried, and watch it
    """
