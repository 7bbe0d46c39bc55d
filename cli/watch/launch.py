"""`keeper job run`: the LaunchJob request built from the command line, and what each way
the launch can fail tells the operator to do.

| flag             | LaunchJobRequest field                                              |
|------------------|---------------------------------------------------------------------|
| `-- CMD...`      | entrypoint.run_command.argv (and submit_argv: what was typed)       |
| `--name NAME`    | name (the job id is /<the token's user>/<NAME>); default from CMD   |
| `--memory 5GB`   | resources.memory_bytes (binary units: 5GB is 5 GiB, as iris reads it) |
| `--region R`     | constraints: region EQ R                                            |
| `--env K=V`      | environment.env_vars[K] = V (repeatable)                            |
| (always)         | replicas 1, max_retries_preemption 1000 (iris's own client's)       |

keeper holds the request it launched, for an approved restart (domain/watch/relaunch.py): in
the watch's input when it carries no secret, else redacted there and kept whole in keeper's
launch store (watch.store_url), written before the launch, so a request keeper could not
keep is never launched.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from datetime import datetime

from keeper.cli.output import CommandFailed, UsageProblem
from keeper.domain.watch.relaunch import HeldLaunch, hold
from keeper.runtime.settings import Settings
from keeper.runtime.watch import deps
from keeper.runtime.watch.credentials import TOKEN_ENV, IrisToken, IrisTokenError
from keeper.runtime.watch.iris_errors import (
    IrisAlreadyExists,
    IrisAuthError,
    IrisError,
    IrisInvalidArgument,
    IrisNotFound,
    IrisTimedOut,
    IrisUnavailable,
)
from keeper.store.database import StoreUnavailable
from keeper.store.watch import open_launch_store
from keeper.wire.iris.codec import to_wire
from keeper.wire.iris.messages import (
    CommandEntrypoint,
    EnvironmentConfig,
    LaunchJobRequest,
    ResourceSpecProto,
    RuntimeEntrypoint,
)

# One component of an iris job name, as check_job_id accepts it.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*$", re.IGNORECASE)
_UNIT = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
_REGION = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,254}$")
# The iris constraint that pins a job to one region (iris.cluster.types: key "region", EQ).
REGION_KEY = "region"


def job_name(name: str | None, argv: Sequence[str], now: datetime) -> str:
    """The name given, or `<program>-<UTC time>` (a new name per launch, so a rerun of the
    same command does not collide with the last one)."""
    if name is None:
        program = re.sub(r"[^A-Za-z0-9._-]", "-", os.path.basename(argv[0])).strip("-._")
        name = f"{program or 'job'}-{now:%Y%m%d-%H%M%S}"
    if not _NAME.fullmatch(name):
        raise UsageProblem(
            f"{name!r} is not an iris job name: letters, digits, '.', '_' and '-', starting "
            "with a letter or digit, at most 128 characters; nothing was launched",
            "--name",
        )
    return name


def memory_bytes(text: str) -> int:
    """`5GB`, `512M`, `8Gi`, `1073741824`: bytes, in binary units."""
    match = _SIZE.fullmatch(text)
    if not match or (match.group(3) and match.group(3).lower() not in ("b", "ib", "i")):
        raise UsageProblem(
            f"{text!r} is not a size: a number and a unit, e.g. 5GB, 512MB, 8Gi; nothing was "
            "launched",
            "--memory",
        )
    size = int(float(match.group(1)) * _UNIT[match.group(2).upper()])
    if size <= 0:
        raise UsageProblem("give more than 0 bytes; nothing was launched", "--memory")
    return size


def region(text: str) -> str:
    if not _REGION.fullmatch(text):
        raise UsageProblem(
            f"{text!r} is not a region name (e.g. us-central1); nothing was launched", "--region"
        )
    return text


def env_vars(pairs: Sequence[str]) -> dict[str, str]:
    """`--env NAME=VALUE`, or `--env NAME` for the value of keeper's own variable NAME (so a
    secret need not be typed on a command line); each NAME once."""
    found: dict[str, str] = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not _ENV_NAME.fullmatch(name):
            raise UsageProblem(
                f"{name!r} is not a variable name (letters, digits and '_', not starting with "
                "a digit): give NAME=VALUE, or NAME to pass keeper's own $NAME; nothing was "
                "launched",
                "--env",
            )
        if not eq:
            if name not in os.environ:
                raise UsageProblem(
                    f"{name} is not set in keeper's environment: export it, or give "
                    f"{name}=VALUE; nothing was launched",
                    "--env",
                )
            value = os.environ[name]
        if name in found:
            raise UsageProblem(f"{name} is given twice; nothing was launched", "--env")
        found[name] = value
    return found


def launch_request(
    name: str,
    argv: Sequence[str],
    memory: int | None,
    in_region: str | None,
    env: dict[str, str] | None = None,
) -> LaunchJobRequest:
    fields: dict[str, object] = {
        "name": name,
        "entrypoint": RuntimeEntrypoint(run_command=CommandEntrypoint(argv=list(argv))),
        "submit_argv": list(argv),
        # iris's own client's defaults: the controller fails a job of 0 replicas at once,
        # and a budget of 0 preemptions ends the job at its first preemption.
        "replicas": 1,
        "max_retries_preemption": 1000,
    }
    if env:
        fields["environment"] = EnvironmentConfig(env_vars=dict(env))
    if memory is not None:
        fields["resources"] = ResourceSpecProto(memory_bytes=memory)
    if in_region is not None:
        # Kept as the wire writes it: constraints are passed through untyped.
        fields["constraints"] = [
            {"key": REGION_KEY, "op": "CONSTRAINT_OP_EQ", "value": {"stringValue": in_region}}
        ]
    return LaunchJobRequest(**fields)


def iris_token(settings: Settings, nothing: str = "nothing was launched") -> IrisToken:
    """KEEPER_IRIS_TOKEN, else the file watch.token_file names, else anonymous."""
    try:
        return deps.iris_token(settings.watch)
    except IrisTokenError as err:
        raise CommandFailed(
            f"{err}; {nothing}",
            hint=f"Fix {TOKEN_ENV} or watch.token_file (KEEPER_IRIS_TOKEN_FILE), or unset both "
            "to call iris anonymously.",
        ) from None


def launch_failure(settings: Settings, name: str, err: IrisError) -> CommandFailed:
    """A launch iris refused or never answered: what happened, and what to do next."""
    url = settings.watch.controller_url
    rows: list[tuple[type[IrisError], str, str]] = [
        (
            IrisAlreadyExists,
            f"iris already has a job named {name}; nothing was launched",
            f"Choose another --name, or watch that job with `keeper job watch /<user>/{name}`.",
        ),
        (
            IrisAuthError,
            "iris refused keeper's credentials; nothing was launched",
            "Check the iris token: KEEPER_IRIS_TOKEN, or the file watch.token_file "
            "(KEEPER_IRIS_TOKEN_FILE) names.",
        ),
        (
            IrisInvalidArgument,
            "iris refused the request; nothing was launched",
            "Fix the flags the message names and run again.",
        ),
        (
            IrisTimedOut,
            "iris did not answer the launch in time; the job MAY have been launched",
            f"Look for a job named {name} in iris before launching again; if it is there, "
            f"watch it with `keeper job watch /<user>/{name}`.",
        ),
        (
            IrisUnavailable,
            f"iris at {url} did not answer; nothing was launched",
            f"Check watch.controller_url (KEEPER_IRIS_CONTROLLER): is iris up at {url}?",
        ),
        (
            IrisError,
            f"the launch of {name} failed",
            f"Check the iris controller at {url} (watch.controller_url).",
        ),
    ]
    message, hint = next((m, h) for kind, m, h in rows if isinstance(err, kind))
    return CommandFailed(f"{message}: {err}", hint=hint, name=name, controller_url=url)


async def require_known_job(settings: Settings, job_id: str) -> str | None:
    """`keeper job watch` of a job iris does not know is refused at once (a watch of it
    would only end `missing` two checks later): GetJobStatus at watch.controller_url,
    before anything is started. A controller that does not answer is its own failure.
    Credentials iris refuses (this shell's, not the worker's) only cost the check: the
    note returned says so, and the watch goes ahead."""
    url = settings.watch.controller_url
    nothing = "nothing is watched"
    fields = {"job_id": job_id, "controller_url": url}
    token = iris_token(settings, nothing)
    try:
        async with deps.iris_controller(settings.watch, token) as iris:
            await iris.get_job_status(job_id)
    except IrisNotFound:
        raise CommandFailed(
            f"iris at {url} knows no job {job_id}; {nothing}",
            hint="Check the job id (its user and name, as `iris job list` shows them) and "
            "watch.controller_url (KEEPER_IRIS_CONTROLLER) if the job runs on another "
            "controller; to launch a new job and watch it, `keeper job run -- CMD`.",
            **fields,
        ) from None
    except IrisAuthError as err:
        return (
            f"could not check that iris knows {job_id}: iris at {url} refused this shell's "
            f"credentials ({err}; KEEPER_IRIS_TOKEN or watch.token_file); the watch reads "
            "iris with the worker's and ends `missing` if the job is not there"
        )
    except IrisUnavailable as err:
        raise CommandFailed(
            f"iris at {url} did not answer whether {job_id} exists: {err}; {nothing}",
            hint=f"Check watch.controller_url (KEEPER_IRIS_CONTROLLER): is iris up at {url}? "
            "Then run `keeper job watch` again.",
            **fields,
        ) from None
    except IrisError as err:
        raise CommandFailed(
            f"iris at {url} did not tell whether {job_id} exists: {err}; {nothing}",
            hint=f"Check the iris controller at {url} (watch.controller_url).",
            **fields,
        ) from None
    return None


def keep_launch(settings: Settings, request: LaunchJobRequest, key: str) -> HeldLaunch:
    """What the watch will hold of `request`; one that carries secrets is first kept whole in
    keeper's launch store (under `key`), or nothing is launched."""
    held = hold(to_wire(request), key)
    if held.stored is None:
        return held
    url = settings.watch.store_url
    try:
        store = open_launch_store(url)
        try:
            store.put(held.stored, request.name, request)
        finally:
            store.close()
    except (StoreUnavailable, ValueError) as err:
        raise CommandFailed(
            f"the request carries secrets ({', '.join(held.secrets)}) and keeper could not "
            f"keep it for a restart: {err}; nothing was launched",
            hint="Check watch.store_url (KEEPER_WATCH_STORE_URL): the worker reads the same "
            "store when a restart is approved.",
        ) from None
    return held
