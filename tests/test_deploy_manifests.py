"""deploy/ and the production docs. The Kubernetes manifests validate against Kubernetes'
own schemas and agree with keeper's settings (the ConfigMap loads, the probes and ports match
the health address, every variable is one keeper reads) and with the Dockerfile, which builds
the wheel and runs it as a non-root user; the README and docs/operations.md list every search
attribute. Images cannot be built here; this is what can be checked without one."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from keeper.cli.main import cli
from keeper.runtime import temporal_env
from keeper.runtime.alerts import ALERT_WEBHOOK_ENV
from keeper.runtime.reclaim.credentials import TOKEN_ENV as SPUR_TOKEN_ENV
from keeper.runtime.runners.github_client import TOKEN_ENV as GITHUB_TOKEN_ENV
from keeper.runtime.search_attributes import registrations
from keeper.runtime.settings import CONFIG_ENV, ENV_OVERRIDES, Settings, load_settings
from keeper.runtime.watch.credentials import TOKEN_ENV as IRIS_TOKEN_ENV
from tests import lint_imports

ROOT = Path(__file__).resolve().parent.parent
K8S = ROOT / "deploy" / "k8s"
KUBERNETES_VERSION = "1.30.0"  # the oldest minor still in upstream support when written

KNOWN_KINDS = {
    "Namespace", "ServiceAccount", "ConfigMap", "Secret", "Service", "Deployment", "Job",
}  # fmt: skip
# The secrets the worker reads from its environment, each from the keeper-secrets Secret.
SECRET_VARIABLES = {
    temporal_env.API_KEY_ENV, GITHUB_TOKEN_ENV, SPUR_TOKEN_ENV, IRIS_TOKEN_ENV, ALERT_WEBHOOK_ENV,
    "PGPASSWORD",  # libpq's own: the runner store's and reclaim memory's PostgreSQL password
}  # fmt: skip
KEEPER_VARIABLES = {*ENV_OVERRIDES, CONFIG_ENV, *SECRET_VARIABLES}


def _documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                docs.append((path.name, doc))
    return docs


DOCUMENTS = _documents()


def _one(kind: str) -> dict[str, Any]:
    (doc,) = [d for _, d in DOCUMENTS if d["kind"] == kind]
    return doc


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["template"]["spec"]
    return spec


def _worker_container() -> dict[str, Any]:
    (container,) = _pod_spec(_one("Deployment"))["containers"]
    return dict(container)


def _configmap_settings(tmp_path: Path) -> tuple[Path, Settings]:
    data = _one("ConfigMap")["data"]
    (key,) = data
    file = tmp_path / key
    file.write_text(data[key])
    return file, load_settings(file, env={})


def test_every_manifest_validates_against_the_kubernetes_schema() -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    assert {kind for _, doc in DOCUMENTS for kind in [doc["kind"]]} == KNOWN_KINDS
    for name, doc in DOCUMENTS:
        for key in ("apiVersion", "kind", "metadata"):
            assert key in doc, f"{name}: no {key}"
        assert doc["metadata"].get("name"), f"{name}: no metadata.name"
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            raise AssertionError(f"{name} ({doc['kind']}): {err.message} at {err.path}") from None


def test_the_configmap_is_a_settings_file_keeper_loads_and_keeper_config_names_it(
    tmp_path: Path,
) -> None:
    _, settings = _configmap_settings(tmp_path)
    assert settings.worker.health_address
    container = _worker_container()
    env = {e["name"]: e for e in container["env"]}
    (mount,) = [m for m in container["volumeMounts"] if m["name"] == "config"]
    (key,) = _one("ConfigMap")["data"]
    assert env[CONFIG_ENV]["value"] == f"{mount['mountPath']}/{key}"
    (volume,) = [v for v in _pod_spec(_one("Deployment"))["volumes"] if v["name"] == "config"]
    assert volume["configMap"]["name"] == _one("ConfigMap")["metadata"]["name"]


def test_the_probes_answer_on_the_health_port_the_settings_serve(tmp_path: Path) -> None:
    _, settings = _configmap_settings(tmp_path)
    container = _worker_container()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["health"] == int(settings.worker.health_address.rpartition(":")[2])
    assert ports["metrics"] == 9464
    probes = {name: container[name]["httpGet"] for name in ("livenessProbe", "readinessProbe")}
    assert probes["livenessProbe"]["path"] == "/healthz"
    assert probes["readinessProbe"]["path"] == "/readyz"
    for probe in (*probes.values(), container["startupProbe"]["httpGet"]):
        assert probe["port"] in ports, f"probe port {probe['port']} is not declared"
    (service_port,) = _one("Service")["spec"]["ports"]
    assert service_port["targetPort"] in ports


def test_the_grace_period_outlasts_the_workers_graceful_shutdown(tmp_path: Path) -> None:
    _, settings = _configmap_settings(tmp_path)
    grace = _pod_spec(_one("Deployment"))["terminationGracePeriodSeconds"]
    assert grace > settings.worker.graceful_shutdown.total_seconds() + 5


def test_every_variable_is_one_keeper_reads_and_every_secret_comes_from_the_secret() -> None:
    secret = _one("Secret")
    for name, doc in DOCUMENTS:
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        for container in _pod_spec(doc)["containers"]:
            for var in container.get("env", []):
                assert var["name"] in KEEPER_VARIABLES, f"{name}: keeper reads no {var['name']}"
                ref = var.get("valueFrom", {}).get("secretKeyRef")
                if var["name"] in SECRET_VARIABLES:
                    assert ref, f"{name}: {var['name']} is a secret; take it from the Secret"
                if ref:
                    assert ref["name"] == secret["metadata"]["name"]
                    assert ref["key"] in secret["stringData"], f"{name}: no key {ref['key']}"
    worker_env = {e["name"] for e in _worker_container()["env"]}
    assert worker_env >= SECRET_VARIABLES
    # The example holds placeholders only.
    for key, value in secret["stringData"].items():
        assert re.fullmatch(r"<[^<>]+>", value), f"secret.example.yaml: {key} is not a placeholder"


def test_pods_run_as_a_non_root_user_without_privileges() -> None:
    for name, doc in DOCUMENTS:
        if doc["kind"] not in ("Deployment", "Job"):
            continue
        pod = _pod_spec(doc)
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["runAsUser"] != 0, name
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["allowPrivilegeEscalation"] is False, name
            assert context["capabilities"]["drop"] == ["ALL"], name
            assert "memory" in container["resources"]["limits"], name


def test_the_job_runs_the_search_attribute_registration_command() -> None:
    (container,) = _pod_spec(_one("Job"))["containers"]
    program, *path = container["command"]
    assert program == "keeper"
    command: Any = cli
    for name in path:
        command = command.commands[name]
    assert command.name == "register-search-attributes"


def _dockerfile() -> list[tuple[str, str]]:
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "")
        for line in lines
        if line and not line.startswith("#")
    ]


def test_the_dockerfile_installs_the_wheel_on_python_slim_as_the_pods_user() -> None:
    instructions = _dockerfile()
    args = dict(a.split("=", 1) for kind, a in instructions if kind == "ARG" and "=" in a)
    bases = [a.split()[0] for kind, a in instructions if kind == "FROM"]
    assert len(bases) == 2, "multi-stage: a build stage and the runtime stage"
    assert {args.get(b.strip("${}"), b) for b in bases} == {"python:3.11-slim"}
    (entrypoint,) = [a for kind, a in instructions if kind == "ENTRYPOINT"]
    assert json.loads(entrypoint) == ["keeper", "worker"]
    assert ("STOPSIGNAL", "SIGTERM") in instructions
    (user,) = [a for kind, a in instructions if kind == "USER"]
    assert user.split(":")[0] == str(_pod_spec(_one("Deployment"))["securityContext"]["runAsUser"])
    (healthcheck,) = [a for kind, a in instructions if kind == "HEALTHCHECK"]
    health_port = _worker_container()["ports"][1]["containerPort"]
    assert f"127.0.0.1:{health_port}/healthz" in healthcheck
    env = " ".join(a for kind, a in instructions if kind == "ENV")
    assert f"KEEPER_HEALTH_ADDRESS=0.0.0.0:{health_port}" in env
    runs = " ".join(a for kind, a in instructions if kind == "RUN")
    assert "pip wheel" in runs and "/wheels/keeper_temporal-*.whl" in runs
    # The build stage copies exactly the packages the wheel holds (setup.py's RUNTIME).
    copied = {
        a.split()[0].rstrip("/") for kind, a in instructions if kind == "COPY" and "--from" not in a
    } - {"pyproject.toml"}
    assert copied == set(lint_imports.RUNTIME)


def test_the_readme_and_the_runbook_list_every_search_attribute_with_its_type() -> None:
    wanted = registrations()
    for doc in (ROOT / "README.md", ROOT / "docs" / "operations.md"):
        listed = dict(re.findall(r"^\| `(\w+)` \| (Keyword\w*) \|", doc.read_text(), re.M))
        assert listed == wanted, f"{doc.name} lists {listed}; keeper sets {wanted}"
