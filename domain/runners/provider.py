"""What a GARM external provider answered, as keeper's workflows reason about it.

keeper deletes a runner's compute through a GARM external-provider executable, so any
provider written for GARM plugs in unchanged. The executable's only channels are its exit
code, stdout and stderr; this module turns them into values a workflow can branch on. It is
pure and deterministic (workflows import it), so the subprocess itself lives in
`keeper.runtime.runners.garm_provider`.
"""

from __future__ import annotations

from datetime import timedelta
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

# The default of runners.provider.lease_margin: how long an instance's lease outlives its
# provider call. The provider's process group is killed at its deadline and reaped within
# seconds; the rest covers clock skew between hosts.
DEFAULT_LEASE_MARGIN = timedelta(seconds=15)

# garm-provider-common maps ErrNotFound to this exit code (and ErrDuplicateEntity to 31).
# GARM itself treats 30 from DeleteInstance as success: the instance is already gone.
NOT_FOUND_EXIT_CODE = 30

# Enough of stderr to carry a provider's final error line (Go providers print it last)
# without letting a chatty provider bloat workflow history.
MESSAGE_LIMIT = 500


class ProviderOutcome(StrEnum):
    DELETED = "deleted"
    NOT_FOUND = "not-found"
    FAILED = "failed"
    TIMED_OUT = "timed-out"


class ProviderAnswer(BaseModel):
    """One DeleteInstance call: how it ended, and the tail of what the provider said."""

    model_config = ConfigDict(frozen=True)

    outcome: ProviderOutcome
    exit_code: int | None = None  # None when keeper killed it before it exited
    message: str = ""
    duration_s: float

    @property
    def gone(self) -> bool:
        """The instance no longer exists, whether this call removed it or an earlier one did.

        A TIMED_OUT delete may have succeeded anyway; only a retry (NOT_FOUND) can tell.
        """
        return self.outcome in (ProviderOutcome.DELETED, ProviderOutcome.NOT_FOUND)


class InstanceStatus(StrEnum):
    """GARM's InstanceStatus. Providers report only running, stopped, error and unknown;
    the others are statuses GARM's controller sets, accepted so a lenient read never fails."""

    RUNNING = "running"
    STOPPED = "stopped"
    ERROR = "error"
    UNKNOWN = "unknown"
    PENDING_DELETE = "pending_delete"
    DELETING = "deleting"
    PENDING_CREATE = "pending_create"
    CREATING = "creating"


class Address(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")

    address: str
    type: str = "private"  # GARM's AddressType: "public" or "private"


class ProviderInstance(BaseModel):
    """garm-provider-common's params.ProviderInstance, the fields keeper reads.

    GARM rejects an answer without provider_id or name, and so does this model.
    """

    model_config = ConfigDict(frozen=True, extra="ignore")

    provider_id: str = Field(min_length=1)
    name: str = Field(min_length=1)
    status: InstanceStatus = InstanceStatus.UNKNOWN
    pool_id: str | None = None  # not in the Go struct, but GARM's docs ask providers for it
    os_type: str = ""
    os_name: str = ""
    os_version: str = ""
    os_arch: str = ""
    addresses: list[Address] = []
    # A Go []byte, so base64 text on the wire; kept as sent.
    provider_fault: str = ""

    @model_validator(mode="before")
    @classmethod
    def _null_means_unset(cls, data: Any) -> Any:
        # Providers outside Go print null for empty fields; GARM's decoder ignores those.
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v is not None}
        return data


def stderr_tail(stderr: str, limit: int = MESSAGE_LIMIT) -> str:
    text = stderr.strip()
    if len(text) <= limit:
        return text
    return "…" + text[-(limit - 1) :].lstrip()


def classify_exit(exit_code: int, stderr: str, duration_s: float) -> ProviderAnswer:
    """How a DeleteInstance that exited ended. Negative codes are deaths by signal."""
    message = stderr_tail(stderr)
    if exit_code == 0:
        outcome = ProviderOutcome.DELETED
    elif exit_code == NOT_FOUND_EXIT_CODE:
        outcome = ProviderOutcome.NOT_FOUND
    else:
        outcome = ProviderOutcome.FAILED
        if not message:
            message = (
                f"killed by signal {-exit_code}"
                if exit_code < 0
                else f"exit code {exit_code} with nothing on stderr"
            )
    return ProviderAnswer(
        outcome=outcome, exit_code=exit_code, message=message, duration_s=duration_s
    )


def timed_out(timeout_s: float, stderr: str, duration_s: float) -> ProviderAnswer:
    """A DeleteInstance keeper killed at its deadline. The delete may still have happened."""
    said = stderr_tail(stderr, MESSAGE_LIMIT - 80)
    message = f"no exit within {timeout_s:g}s; process group killed"
    return ProviderAnswer(
        outcome=ProviderOutcome.TIMED_OUT,
        exit_code=None,
        message=f"{message}: {said}" if said else message,
        duration_s=duration_s,
    )


def describe_provider(answer: ProviderAnswer) -> str:
    """One line for the UI: how the call ended, its exit code and the provider's words."""
    text = answer.outcome.value
    if answer.exit_code is not None:
        text += f" (exit {answer.exit_code})"
    if answer.message and not answer.gone:
        text += f": {answer.message[:200]}"
    return text + f" in {answer.duration_s:.1f}s"
