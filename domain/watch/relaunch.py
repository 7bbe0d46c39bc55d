"""What an approved restart may launch: keeper's own request, or the operator's command.

iris does not return the request a job was launched with: GetJobStatus rebuilds it from its
database, empties `workdir_files` and shows every secret and credential-looking value as
`[REDACTED]` (domain/watch/redaction.py). Resent, it would start a job with `[REDACTED]`
credentials and no workdir. So a restart relaunches only

| keeper holds                        | approval gives | keeper launches                         |
|-------------------------------------|----------------|-----------------------------------------|
| the request `keeper job run` sent   | nothing        | that request (secrets from the store)   |
| the request `keeper job run` sent   | a command      | that request, the command as its argv   |
| nothing (the job was only watched)  | a command      | iris's shape of the job, the command as |
|                                     |                | argv, the values iris redacted dropped  |
| nothing, or a redacted request      | nothing        | nothing: the approval is refused and    |
|                                     |                | asks for the command                    |

A request that carries secrets never enters history: the watch holds a copy with the secret
values redacted and the launch store's key for the full one (`HeldLaunch.stored`). A command
given at approval is in the update's history, so one that looks like it carries a secret is
refused. Requests are held in iris's JSON mapping (`LaunchJobRequest` as the wire writes it:
camelCase names, int64 as strings), exactly what LaunchJob takes.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from keeper.domain.watch.models import Proposal, ProposalKind
from keeper.domain.watch.redaction import REDACTED, redact_env, redact_text, redaction_marks
from keeper.domain.watch.values import Frozen

# A LaunchJobRequest in iris's JSON mapping.
Request = dict[str, Any]


class HeldLaunch(Frozen):
    """The request keeper launched a job with, as a restart will resend it.

    `request` is what history may show: the request itself when it carries no secret, else
    a copy with each secret value `[REDACTED]` (`secrets` names the fields) and `stored`,
    the key of the full request in keeper's launch store (store/watch)."""

    request: Request
    stored: str | None = Field(default=None, min_length=1, max_length=200)
    secrets: list[str] = Field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Whether a restart can launch it: nothing redacted, or the full one is stored."""
        return self.stored is not None or not self.secrets


def redacted(request: Request) -> Request:
    """`request` as history may hold it: what iris would redact, redacted."""
    shown = copy.deepcopy(request)
    env = shown.get("environment") or {}
    if env.get("envVars"):
        env["envVars"] = redact_env(env["envVars"])
    run = (shown.get("entrypoint") or {}).get("runCommand") or {}
    if run.get("argv"):
        run["argv"] = [redact_text(a) for a in run["argv"]]
    if shown.get("submitArgv"):
        shown["submitArgv"] = [redact_text(a) for a in shown["submitArgv"]]
    return shown


def hold(request: Request, key: str) -> HeldLaunch:
    """What a watch holds of a request keeper launches; `key` names the full request in the
    launch store when it carries secrets (the caller stores it there, under `key`)."""
    shown = redacted(request)
    marks = redaction_marks(shown)
    if shown == request and not marks:
        return HeldLaunch(request=request)
    return HeldLaunch(request=shown, stored=key, secrets=marks)


def secret_args(command: list[str]) -> list[int]:
    """The 1-based positions of the arguments iris would redact."""
    return [i for i, arg in enumerate(command, 1) if redact_text(arg) != arg]


def approve_with_command(job_id: str, proposal: str) -> str:
    return f"keeper job approve {job_id} {proposal} --by NAME -- COMMAND..."


def relaunch_problem(
    job_id: str, proposal: str, held: HeldLaunch | None, command: list[str] | None
) -> str | None:
    """Why an approval of restart `proposal` cannot be carried out as given, or None."""
    if command is not None:
        secret = secret_args(command)
        if secret:
            places = ", ".join(str(i) for i in secret)
            return (
                f"argument {places} of the command looks like a secret, and a command given "
                "at approval is kept in the watch's history; pass secrets in the job's "
                "environment (keeper job run --env) instead"
            )
        return None
    again = approve_with_command(job_id, proposal)
    if held is None:
        return (
            f"keeper holds no launch request for {job_id} (it was not launched with `keeper "
            "job run`), and the one iris returns has its secrets [REDACTED] and its workdir "
            f"files removed, so keeper will not resend it; approve with the command: {again}"
        )
    if not held.complete:
        fields = ", ".join(held.secrets)
        return (
            f"the launch request keeper holds for {job_id} is redacted ({fields}); approve "
            f"with the command: {again}"
        )
    return None


def needs_command(proposal: Proposal) -> bool:
    """Whether approving this proposal takes the command to run."""
    return proposal.kind is ProposalKind.RESTART and proposal.relaunch.startswith(_NEEDS)


_NEEDS = "nothing until an operator gives the command"


def relaunch_plan(held: bool, job_id: str, proposal: str) -> str:
    """What a restart proposal would launch, in a sentence (the proposal, its notice and the
    UI show it); `held`: keeper holds the job's complete launch request."""
    if held:
        return "the request `keeper job run` launched the job with (a new name, -r<N>)"
    return (
        f"{_NEEDS}: keeper holds no launch request of its own for this job, and iris "
        "returns it redacted; approve with " + approve_with_command(job_id, proposal)
    )


def launched_text(result_job: str, command: bool, from_iris: bool, dropped: list[str]) -> str:
    """A relaunch's outcome, as the proposal records it."""
    how = (
        "with the command given at approval"
        + (" and the job's shape in iris" if from_iris else " and keeper's own request")
        if command
        else "with the request keeper launched it with"
    )
    left = f"; not sent (iris had them redacted): {', '.join(dropped)}" if dropped else ""
    return f"relaunched as {result_job} {how}{left}"


class Composed(BaseModel):
    """A relaunch's request, and the environment variables left out of it."""

    model_config = ConfigDict(frozen=True)

    request: Request
    dropped_env: list[str] = Field(default_factory=list)


class IncompleteRequest(ValueError):
    """The request a relaunch would send still holds a redacted value."""


def compose(base: Request, name: str, command: list[str] | None, *, from_iris: bool) -> Composed:
    """The request to launch: `base` (keeper's full request, or iris's shape of the job when
    `from_iris`), renamed, with `command` as its argv if given. From iris's shape the
    environment values it redacted are dropped, and named."""
    data = copy.deepcopy(base)
    data["name"] = name
    if command is not None:
        entry = data.setdefault("entrypoint", {})
        entry["runCommand"] = {"argv": list(command)}
        data["submitArgv"] = list(command)
    dropped: list[str] = []
    if from_iris:
        env = data.setdefault("environment", {})
        values: dict[str, str] = env.get("envVars") or {}
        env["envVars"] = {k: v for k, v in values.items() if REDACTED not in v}
        dropped = sorted(set(values) - set(env["envVars"]))
    marks = redaction_marks(data)
    if marks:
        raise IncompleteRequest(
            f"the request still holds redacted values ({', '.join(marks)}); approve with a "
            "command, or relaunch by hand (keeper job run)"
        )
    return Composed(request=data, dropped_env=dropped)
