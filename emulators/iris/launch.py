"""LaunchJob's request as the real controller takes it, stores it and gives it back
(marin-iris 0.2.227.dev40316220070, checked on a local cluster).

Taking it: the controller parses the JSON body with protobuf's parser, which refuses a field
its LaunchJobRequest (or a message inside it) does not have, and an enum name it does not
know. The refusal is a Connect `unknown` error (HTTP 500) whose message is the parser's:

    Message type "iris.cluster.Controller.LaunchJobRequest" has no field named "reservation"
    at "LaunchJobRequest".\\n Available Fields(except extensions): "['name', ...]"

and, for a field inside a field, `Failed to parse <field> field: <that message>.` once per
level (a oneof member, `device.gpu` say, adds no level of its own).

Storing and giving it back: GetJobStatus rebuilds the request from the job's columns, so what
it returns is not what was sent:

| field                                    | returned                                        |
|------------------------------------------|-------------------------------------------------|
| name                                     | lowercased                                      |
| entrypoint.workdir_files                 | never (the bytes live elsewhere)                |
| bundle_blob                              | never; bundle_id is its sha256                  |
| client_revision_date, federation         | never (they belong to the submitting hop)       |
| environment.env_vars                     | credential-looking values `[REDACTED]`          |
| environment.secrets                      | every value `[REDACTED]`                        |
| resources                                | always; `device: {}` when sent without one      |
| entrypoint, environment                  | always (`{}` when not sent)                     |
| bundle_id, max_*, replicas, fail_if_     | always, zero included (replicas < 1 reads 0)    |
| exists, task_image, the policies         |                                                 |
| priority_band                            | INHERIT resolved: INTERACTIVE for a root job    |
| egress_policy                            | UNSPECIFIED resolved: CLUSTER (INTERNET in the  |
|                                          | sandbox profile)                                |
| timeout, scheduling_timeout              | only when over 0 ms                             |
| constraints                              | op and mode always, string values lowercased    |
|                                          | (iris also adds a GPU's or TPU's own: not here) |
| submit_argv, argv, ports                 | as sent (iris's CLI redacts submit_argv itself) |
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from keeper.domain.watch.redaction import REDACTED, redact_env

# ------------------------------------------------------------------ the controller's schema


@dataclass(frozen=True)
class Field:
    json: str
    proto: str
    message: str | None = None  # a message field's type (its full name)
    enum: str | None = None  # an enum field's type (its full name)
    repeated: bool = False
    is_map: bool = False
    oneof: str | None = None


def _f(json: str, proto: str | None = None, **kind: Any) -> Field:
    return Field(json, proto or json, **kind)


# Every message LaunchJobRequest carries, its fields in the controller's order.
MESSAGES: dict[str, tuple[Field, ...]] = {
    "iris.cluster.Controller.LaunchJobRequest": (
        _f("name"),
        _f("entrypoint", message="iris.job.RuntimeEntrypoint"),
        _f("resources", message="iris.job.ResourceSpecProto"),
        _f("environment", message="iris.job.EnvironmentConfig"),
        _f("bundleId", "bundle_id"),
        _f("bundleBlob", "bundle_blob"),
        _f("schedulingTimeout", "scheduling_timeout", message="iris.time.Duration"),
        _f("ports", repeated=True),
        _f("maxTaskFailures", "max_task_failures"),
        _f("maxRetriesFailure", "max_retries_failure"),
        _f("maxRetriesPreemption", "max_retries_preemption"),
        _f("constraints", message="iris.job.Constraint", repeated=True),
        _f("coscheduling", message="iris.job.CoschedulingConfig"),
        _f("replicas"),
        _f("timeout", message="iris.time.Duration"),
        _f("failIfExists", "fail_if_exists"),
        _f("preemptionPolicy", "preemption_policy", enum="iris.job.JobPreemptionPolicy"),
        _f("existingJobPolicy", "existing_job_policy", enum="iris.job.ExistingJobPolicy"),
        _f("priorityBand", "priority_band", enum="iris.job.PriorityBand"),
        _f("taskImage", "task_image"),
        _f("submitArgv", "submit_argv", repeated=True),
        _f("clientRevisionDate", "client_revision_date"),
        _f("containerProfile", "container_profile", enum="iris.job.ContainerProfile"),
        _f("egressPolicy", "egress_policy", enum="iris.job.EgressPolicy"),
        _f("federation", message="iris.cluster.Controller.FederationHandoff"),
    ),
    "iris.job.RuntimeEntrypoint": (
        _f("setupCommands", "setup_commands", repeated=True),
        _f("runCommand", "run_command", message="iris.job.CommandEntrypoint"),
        _f("workdirFiles", "workdir_files", is_map=True),
        _f("workdirFileRefs", "workdir_file_refs", is_map=True),
    ),
    "iris.job.CommandEntrypoint": (_f("argv", repeated=True),),
    "iris.job.ResourceSpecProto": (
        _f("cpuMillicores", "cpu_millicores"),
        _f("memoryBytes", "memory_bytes"),
        _f("diskBytes", "disk_bytes"),
        _f("device", message="iris.job.DeviceConfig"),
    ),
    "iris.job.DeviceConfig": (
        _f("cpu", message="iris.job.CpuDevice", oneof="device"),
        _f("gpu", message="iris.job.GpuDevice", oneof="device"),
        _f("tpu", message="iris.job.TpuDevice", oneof="device"),
    ),
    "iris.job.CpuDevice": (_f("variant"),),
    "iris.job.GpuDevice": (_f("variant"), _f("count")),
    "iris.job.TpuDevice": (_f("variant"), _f("topology"), _f("count")),
    "iris.job.EnvironmentConfig": (
        _f("envVars", "env_vars", is_map=True),
        _f("secrets", is_map=True),
        _f("setupScripts", "setup_scripts", repeated=True),
    ),
    "iris.time.Duration": (_f("milliseconds"),),
    "iris.job.Constraint": (
        _f("key"),
        _f("op", enum="iris.job.ConstraintOp"),
        _f("value", message="iris.job.AttributeValue"),
        _f("values", message="iris.job.AttributeValue", repeated=True),
        _f("mode", enum="iris.job.ConstraintMode"),
    ),
    "iris.job.AttributeValue": (
        _f("stringValue", "string_value", oneof="value"),
        _f("intValue", "int_value", oneof="value"),
        _f("floatValue", "float_value", oneof="value"),
    ),
    "iris.job.CoschedulingConfig": (_f("groupBy", "group_by"),),
    "iris.cluster.Controller.FederationHandoff": (
        _f("requesterId", "requester_id"),
        _f("ownerPrincipal", "owner_principal"),
        _f("submittingUser", "submitting_user"),
        _f("handoffNonce", "handoff_nonce"),
    ),
}
LAUNCH_JOB_REQUEST = "iris.cluster.Controller.LaunchJobRequest"

ENUMS: dict[str, tuple[str, ...]] = {
    # name -> its values' names by number (a tuple's index is the number)
    "iris.job.JobPreemptionPolicy": (
        "JOB_PREEMPTION_POLICY_UNSPECIFIED",
        "JOB_PREEMPTION_POLICY_TERMINATE_CHILDREN",
        "JOB_PREEMPTION_POLICY_PRESERVE_CHILDREN",
    ),
    "iris.job.ExistingJobPolicy": (
        "EXISTING_JOB_POLICY_UNSPECIFIED",
        "EXISTING_JOB_POLICY_ERROR",
        "EXISTING_JOB_POLICY_KEEP",
        "EXISTING_JOB_POLICY_RECREATE",
    ),
    "iris.job.PriorityBand": (
        "PRIORITY_BAND_INHERIT",
        "PRIORITY_BAND_PRODUCTION",
        "PRIORITY_BAND_INTERACTIVE",
        "PRIORITY_BAND_BATCH",
        "PRIORITY_BAND_SYSTEM",
    ),
    "iris.job.ContainerProfile": (
        "CONTAINER_PROFILE_UNSPECIFIED",
        "CONTAINER_PROFILE_RESTRICTED",
        "CONTAINER_PROFILE_DEFAULT",
        "CONTAINER_PROFILE_DOCKER_ACCESS",
        "CONTAINER_PROFILE_PRIVILEGED",
        "CONTAINER_PROFILE_GVISOR",
        "CONTAINER_PROFILE_SANDBOX",
    ),
    "iris.job.EgressPolicy": (
        "EGRESS_POLICY_UNSPECIFIED",
        "EGRESS_POLICY_CLUSTER",
        "EGRESS_POLICY_INTERNET",
        "EGRESS_POLICY_NONE",
    ),
    "iris.job.ConstraintOp": (
        "CONSTRAINT_OP_EQ",
        "CONSTRAINT_OP_NE",
        "CONSTRAINT_OP_EXISTS",
        "CONSTRAINT_OP_NOT_EXISTS",
        "CONSTRAINT_OP_GT",
        "CONSTRAINT_OP_GE",
        "CONSTRAINT_OP_LT",
        "CONSTRAINT_OP_LE",
        "CONSTRAINT_OP_IN",
    ),
    "iris.job.ConstraintMode": ("CONSTRAINT_MODE_REQUIRED", "CONSTRAINT_MODE_PREFERRED"),
}


class ParseRefusal(ValueError):
    """What protobuf's JSON parser says of a body the controller's messages cannot hold."""


def _field_of(message: str, key: str) -> Field | None:
    return next((f for f in MESSAGES[message] if key in (f.json, f.proto)), None)


def _check(message: str, data: Mapping[str, Any], path: str) -> None:
    seen_oneofs: set[str] = set()
    for key, value in data.items():
        field = _field_of(message, key)
        if field is None:
            available = [f.json for f in MESSAGES[message]]
            raise ParseRefusal(
                f'Message type "{message}" has no field named "{key}" at "{path}".\n'
                f' Available Fields(except extensions): "{available}"'
            )
        try:
            if field.oneof is not None and value is not None:
                if field.oneof in seen_oneofs:
                    raise ParseRefusal(
                        f'Message type "{message}" should not have multiple '
                        f'"{field.oneof}" oneof fields at "{path}".'
                    )
                seen_oneofs.add(field.oneof)
            if value is not None:
                _check_value(field, value, f"{path}.{key}")
        except ParseRefusal as err:
            if field.oneof is not None:
                raise
            raise ParseRefusal(f"Failed to parse {key} field: {err}.") from None


def _check_value(field: Field, value: Any, path: str) -> None:
    if field.is_map:
        return
    items = value if field.repeated and isinstance(value, list) else None
    if items is not None:
        for index, item in enumerate(items):
            _check_one(field, item, f"{path}[{index}]")
    elif not field.repeated:
        _check_one(field, value, path)


def _check_one(field: Field, value: Any, path: str) -> None:
    if field.message is not None and isinstance(value, Mapping):
        _check(field.message, value, path)
    elif field.enum is not None and isinstance(value, str) and not _known(field.enum, value):
        raise ParseRefusal(f"Invalid enum value {value} for enum type {field.enum} at {path}")


def _known(enum: str, value: str) -> bool:
    """A number (open enums take any) or one of the enum's names."""
    return value.lstrip("-").isdigit() or value in ENUMS[enum]


def launch_refusal(body: Mapping[str, Any]) -> str | None:
    """Why the controller's parser refuses this LaunchJob body (its message), or None."""
    try:
        _check(LAUNCH_JOB_REQUEST, body, "LaunchJobRequest")
    except ParseRefusal as err:
        return str(err)
    return None


# ------------------------------------------------------------------ what is stored


def canonical(message: str, data: Mapping[str, Any]) -> dict[str, Any]:
    """`data` with every field under its JSON name (a proto name is accepted on input) and
    nulls dropped; map keys are kept as they are."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        field = _field_of(message, key)
        if value is None:
            continue
        if field is None:
            out[key] = value
            continue
        if field.message is not None and not field.is_map:
            nested = field.message
            if field.repeated and isinstance(value, list):
                value = [canonical(nested, v) if isinstance(v, Mapping) else v for v in value]
            elif isinstance(value, Mapping):
                value = canonical(nested, value)
        out[field.json] = value
    return out


def _enum_name(enum: str, value: Any, default: int = 0) -> str:
    names = ENUMS[enum]
    if value is None:
        return names[default]
    if isinstance(value, int) or (isinstance(value, str) and value.lstrip("-").isdigit()):
        number = int(value)
        return names[number] if 0 <= number < len(names) else str(number)
    return str(value)


def _int(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _bundle_id(blob: str) -> str:
    text = blob.strip().replace("-", "+").replace("_", "/")
    try:
        data = base64.b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        data = blob.encode()
    return hashlib.sha256(data).hexdigest()


def _attribute(value: Any) -> dict[str, Any]:
    """An AttributeValue as iris keeps it: a string stripped and lowercased."""
    given = value if isinstance(value, Mapping) else {}
    if "stringValue" in given:
        return {"stringValue": str(given["stringValue"]).strip().lower()}
    if "intValue" in given:
        return {"intValue": str(_int(given["intValue"]))}
    if "floatValue" in given:
        return {"floatValue": float(given["floatValue"])}
    return {"stringValue": ""}


def _constraint(given: Mapping[str, Any]) -> dict[str, Any]:
    """A Constraint as iris rebuilds it: key, op and mode always; `value` for a one-value
    op, `values` for IN, neither for EXISTS and NOT_EXISTS."""
    op = _enum_name("iris.job.ConstraintOp", given.get("op"))
    out: dict[str, Any] = {"key": str(given.get("key") or ""), "op": op}
    if op == "CONSTRAINT_OP_IN":
        out["values"] = [_attribute(v) for v in given.get("values") or []]
    elif op not in ("CONSTRAINT_OP_EXISTS", "CONSTRAINT_OP_NOT_EXISTS"):
        out["value"] = _attribute(given.get("value"))
    out["mode"] = _enum_name("iris.job.ConstraintMode", given.get("mode"))
    return out


def stored_request(body: Mapping[str, Any], job_id: str) -> dict[str, Any]:
    """What the controller keeps of a LaunchJob body for job `job_id`, rebuilt as
    GetJobStatus returns it before redaction (see the table above)."""
    req = canonical(LAUNCH_JOB_REQUEST, body)
    out: dict[str, Any] = {"name": job_id.lower()}

    entry = dict(req.get("entrypoint") or {})
    entry.pop("workdirFiles", None)
    out["entrypoint"] = {
        key: value
        for key, value in entry.items()
        if key == "runCommand" or value not in ([], {}, None)
    }
    run = out["entrypoint"].get("runCommand")
    if isinstance(run, Mapping):
        out["entrypoint"]["runCommand"] = {k: v for k, v in run.items() if v != []}

    sent = req.get("resources")
    resources: dict[str, Any] = {}
    given: Mapping[str, Any] = sent if isinstance(sent, Mapping) else {}
    resources["cpuMillicores"] = _int(given.get("cpuMillicores"))
    resources["memoryBytes"] = str(_int(given.get("memoryBytes")))
    if sent is not None:
        resources["device"] = dict(given.get("device") or {})
    resources["diskBytes"] = str(_int(given.get("diskBytes")))
    out["resources"] = resources

    env = dict(req.get("environment") or {})
    out["environment"] = {
        key: env[key] for key in ("envVars", "secrets", "setupScripts") if env.get(key)
    }

    blob = str(req.get("bundleBlob") or "")
    out["bundleId"] = _bundle_id(blob) if blob else str(req.get("bundleId") or "")
    ms = _int((req.get("schedulingTimeout") or {}).get("milliseconds"))
    if ms > 0:
        out["schedulingTimeout"] = {"milliseconds": str(ms)}
    if req.get("ports"):
        out["ports"] = list(req["ports"])
    for key in ("maxTaskFailures", "maxRetriesFailure", "maxRetriesPreemption"):
        out[key] = _int(req.get(key))
    if req.get("constraints"):
        out["constraints"] = [_constraint(c) for c in req["constraints"] if isinstance(c, Mapping)]
    if isinstance(req.get("coscheduling"), Mapping):
        out["coscheduling"] = dict(req["coscheduling"])
    replicas = _int(req.get("replicas"))
    out["replicas"] = replicas if replicas >= 1 else 0
    ms = _int((req.get("timeout") or {}).get("milliseconds"))
    if ms > 0:
        out["timeout"] = {"milliseconds": str(ms)}
    out["failIfExists"] = bool(req.get("failIfExists"))
    out["preemptionPolicy"] = _enum_name(
        "iris.job.JobPreemptionPolicy", req.get("preemptionPolicy")
    )
    out["existingJobPolicy"] = _enum_name(
        "iris.job.ExistingJobPolicy", req.get("existingJobPolicy")
    )
    band = _enum_name("iris.job.PriorityBand", req.get("priorityBand"))
    out["priorityBand"] = "PRIORITY_BAND_INTERACTIVE" if band == "PRIORITY_BAND_INHERIT" else band
    out["taskImage"] = str(req.get("taskImage") or "")
    if req.get("submitArgv"):
        out["submitArgv"] = list(req["submitArgv"])
    profile = _enum_name("iris.job.ContainerProfile", req.get("containerProfile"))
    out["containerProfile"] = profile
    egress = _enum_name("iris.job.EgressPolicy", req.get("egressPolicy"))
    if egress == "EGRESS_POLICY_UNSPECIFIED":
        sandbox = profile == "CONTAINER_PROFILE_SANDBOX"
        egress = "EGRESS_POLICY_INTERNET" if sandbox else "EGRESS_POLICY_CLUSTER"
    out["egressPolicy"] = egress
    return out


def status_request(stored: Mapping[str, Any]) -> dict[str, Any]:
    """The `request` GetJobStatus returns: the stored one with its environment's secrets and
    credential-looking values hidden (domain/watch/redaction.py)."""
    shown = dict(stored)
    env = dict(stored.get("environment") or {})
    if env.get("envVars"):
        env["envVars"] = redact_env(env["envVars"])
    if env.get("secrets"):
        env["secrets"] = dict.fromkeys(env["secrets"], REDACTED)
    shown["environment"] = env
    return shown
