"""deploy/ and the production docs. The Kubernetes manifests validate against Kubernetes'
own schemas (the Prometheus Operator's ServiceMonitor and PrometheusRule, whose schemas are not
Kubernetes', by their shape) and agree with keeper's settings (the settings file loads, the
probes and ports match the health address, every variable is one keeper reads), with each
other (the kustomization lists every manifest and sets the image and the build id in one place;
the selectors match the workers' labels), with deploy/prometheus's alert rules and with the
Dockerfile, which builds the wheel and runs it as a non-root user; the README and
docs/operations.md list every search attribute. Images cannot be built here; this is what can
be checked without one. `kubectl kustomize` (kustomize built into kubectl), where installed,
renders the kustomization as `kubectl apply -k` would, and the render validates too."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
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
from tests.common.test_cli_conventions import subcommands

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
ALERTS = ROOT / "deploy" / "prometheus" / "keeper-alerts.yaml"
KUBERNETES_VERSION = "1.30.0"  # the oldest minor still in upstream support when written

KNOWN_KINDS = {
    "Namespace", "ServiceAccount", "Secret", "Service", "Deployment", "PodDisruptionBudget",
    "Job", "ServiceMonitor", "PrometheusRule",
}  # fmt: skip
# The Prometheus Operator's custom resources: Kubernetes' schemas do not know them.
OPERATOR_KINDS = {"ServiceMonitor", "PrometheusRule"}
# What the kustomization leaves out: an example, never applied as it is.
NOT_APPLIED = {"secret.example.yaml"}
# What selects the workers of every build: the Service, the PodDisruptionBudget, the
# ServiceMonitor and the topology spread. The Deployment adds its build's version.
WORKERS = {"app.kubernetes.io/name": "keeper", "app.kubernetes.io/component": "worker"}
VERSION_LABEL = "app.kubernetes.io/version"
# The secrets the worker reads from its environment, each from the keeper-secrets Secret.
SECRET_VARIABLES = {
    temporal_env.API_KEY_ENV, GITHUB_TOKEN_ENV, SPUR_TOKEN_ENV, IRIS_TOKEN_ENV, ALERT_WEBHOOK_ENV,
    "PGPASSWORD",  # libpq's own: the runner store's and reclaim memory's PostgreSQL password
}  # fmt: skip
KEEPER_VARIABLES = {*ENV_OVERRIDES, CONFIG_ENV, *SECRET_VARIABLES}


def _documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                docs.append((path.name, doc))
    return docs


DOCUMENTS = _documents()
KUSTOMIZATION: dict[str, Any] = yaml.safe_load((K8S / "kustomization.yaml").read_text())


def _one(kind: str, name: str | None = None) -> dict[str, Any]:
    (doc,) = [
        d
        for _, d in DOCUMENTS
        if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]
    return doc


def _jobs() -> list[dict[str, Any]]:
    return [doc for _, doc in DOCUMENTS if doc["kind"] == "Job"]


def _pod_spec(doc: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = doc["spec"]["template"]["spec"]
    return spec


def _worker_container() -> dict[str, Any]:
    (container,) = _pod_spec(_one("Deployment"))["containers"]
    return dict(container)


def _config_generator(name: str = "keeper-config") -> tuple[str, str, Path]:
    """A ConfigMap kustomize generates from the settings file (keeper-config for the workers,
    keeper-config-jobs for the Jobs): its name, its one key and the file that key holds."""
    (generator,) = [g for g in KUSTOMIZATION["configMapGenerator"] if g["name"] == name]
    (entry,) = generator["files"]
    key, _, file = entry.partition("=")
    return generator["name"], key, K8S / file


def test_the_workers_and_the_jobs_read_one_settings_file() -> None:
    workers, jobs = _config_generator(), _config_generator("keeper-config-jobs")
    assert {g["name"] for g in KUSTOMIZATION["configMapGenerator"]} == {workers[0], jobs[0]}
    assert workers[1:] == jobs[1:], "one settings file, one key"
    (jobs_generator,) = [g for g in KUSTOMIZATION["configMapGenerator"] if g["name"] == jobs[0]]
    # A Job's pod template cannot change: the Jobs' ConfigMap keeps its name.
    assert jobs_generator["options"]["disableNameSuffixHash"] is True


def _settings() -> Settings:
    _, _, file = _config_generator()
    return load_settings(file, env={})


def _validate(documents: list[tuple[str, dict[str, Any]]]) -> None:
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for name, doc in documents:
        for key in ("apiVersion", "kind", "metadata"):
            assert key in doc, f"{name}: no {key}"
        assert doc["metadata"].get("name"), f"{name}: no metadata.name"
        if doc["kind"] in OPERATOR_KINDS:
            _check_operator_resource(name, doc)
            continue
        try:
            kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as err:
            raise AssertionError(f"{name} ({doc['kind']}): {err.message} at {err.path}") from None


def _check_operator_resource(name: str, doc: dict[str, Any]) -> None:
    """The fields of the Prometheus Operator's v1 ServiceMonitor and PrometheusRule that these
    manifests use, and nothing it would refuse: its CRDs' schemas are not available here."""
    assert doc["apiVersion"] == "monitoring.coreos.com/v1", name
    assert set(doc) == {"apiVersion", "kind", "metadata", "spec"}, name
    spec = doc["spec"]
    if doc["kind"] == "ServiceMonitor":
        assert set(spec) <= {"selector", "endpoints", "namespaceSelector", "jobLabel"}, name
        assert set(spec["selector"]) == {"matchLabels"}, name
        assert spec["endpoints"], name
        for endpoint in spec["endpoints"]:
            assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout", "relabelings"}
            assert isinstance(endpoint["port"], str) and endpoint["path"].startswith("/")
            assert re.fullmatch(r"\d+[smh]", endpoint.get("interval", "30s")), name
            for relabel in endpoint.get("relabelings", []):
                assert set(relabel) <= {"action", "targetLabel", "replacement", "sourceLabels"}
                assert relabel["action"] == "replace" and relabel["targetLabel"], name
        return
    assert set(spec) == {"groups"} and spec["groups"], name
    for group in spec["groups"]:
        assert set(group) <= {"name", "interval", "rules"} and group["rules"], name
        for rule in group["rules"]:
            assert ("alert" in rule) != ("record" in rule), f"{name}: {rule}"
            assert set(rule) <= {"alert", "record", "expr", "for", "labels", "annotations"}
            assert isinstance(rule["expr"], str) and rule["expr"].strip(), f"{name}: {rule}"
            for key in ("labels", "annotations"):
                values = rule.get(key, {})
                assert all(isinstance(v, str) for v in values.values()), f"{name}: {rule}"


def test_every_manifest_validates_against_the_kubernetes_schema() -> None:
    assert {kind for _, doc in DOCUMENTS for kind in [doc["kind"]]} == KNOWN_KINDS
    _validate(DOCUMENTS)


def test_the_configmap_is_a_settings_file_keeper_loads_and_keeper_config_names_it() -> None:
    settings = _settings()
    assert settings.worker.health_address
    name, key, _ = _config_generator()
    jobs_name, _, _ = _config_generator("keeper-config-jobs")
    for doc in (_one("Deployment"), *_jobs()):
        if doc["kind"] == "Job":
            name = jobs_name
        (container,) = _pod_spec(doc)["containers"]
        env = {e["name"]: e for e in container["env"]}
        (mount,) = [m for m in container["volumeMounts"] if m["name"] == "config"]
        assert env[CONFIG_ENV]["value"] == f"{mount['mountPath']}/{key}"
        (volume,) = [v for v in _pod_spec(doc)["volumes"] if v["name"] == "config"]
        # kustomize renames the workers' generated ConfigMap (name-<hash>) and every
        # reference to it; the Jobs' keeps its name.
        assert volume["configMap"]["name"] == name


def test_the_probes_answer_on_the_health_port_the_settings_serve() -> None:
    settings = _settings()
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


def test_the_grace_period_outlasts_the_workers_graceful_shutdown() -> None:
    settings = _settings()
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


def test_the_jobs_run_keepers_registration_and_set_current_version_commands() -> None:
    ran = set()
    for job in _jobs():
        (container,) = _pod_spec(job)["containers"]
        program, *path = container["command"]
        assert program == "keeper"
        command: Any = cli
        for name in path:
            command = subcommands(command)[name]
        ran.add(command.name)
        # The workers' image, so the one `images:` entry sets it.
        assert container["image"] == _worker_container()["image"]
    assert ran == {"register-search-attributes", "set-current-version"}
    # It makes current the build the workers poll as.
    (setter,) = _pod_spec(_one("Job", "keeper-set-current-version"))["containers"]
    build = {e["name"]: e.get("value") for e in setter["env"]}["KEEPER_BUILD_ID"]
    assert (
        build == {e["name"]: e.get("value") for e in _worker_container()["env"]}["KEEPER_BUILD_ID"]
    )


# -- the kustomization: one release in one place ------------------------------------------


def _image_name(image: str) -> tuple[str, str]:
    name, _, tag = image.rpartition(":")
    return name, tag


def _containers() -> list[tuple[str, dict[str, Any]]]:
    return [
        (doc["metadata"]["name"], container)
        for doc in (_one("Deployment"), *_jobs())
        for container in _pod_spec(doc)["containers"]
    ]


def test_the_kustomization_lists_every_manifest_and_generates_the_settings() -> None:
    assert KUSTOMIZATION["apiVersion"] == "kustomize.config.k8s.io/v1beta1"
    assert KUSTOMIZATION["kind"] == "Kustomization"
    files = {path.name for path in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    resources = KUSTOMIZATION["resources"]
    assert len(resources) == len(set(resources)), resources
    assert set(resources) == files - NOT_APPLIED, "kustomization.yaml's resources"
    # Every manifest in the one namespace the kustomization sets.
    for name, doc in DOCUMENTS:
        if doc["kind"] != "Namespace":
            assert doc["metadata"]["namespace"] == KUSTOMIZATION["namespace"], name
    assert _one("Namespace")["metadata"]["name"] == KUSTOMIZATION["namespace"]
    # The settings file is generated into the ConfigMap, not a manifest of its own.
    _, _, file = _config_generator()
    assert file.is_file() and file.parent != K8S, file
    assert not [d for _, d in DOCUMENTS if d["kind"] == "ConfigMap"]


def test_the_image_and_the_build_id_are_set_in_one_place() -> None:
    (image,) = KUSTOMIZATION["images"]
    for owner, container in _containers():
        name, tag = _image_name(container["image"])
        assert name == image["name"], f"{owner}: {container['image']} is not images[0]"
        assert tag == image["newTag"], f"{owner}: the manifests show the kustomization's tag"
        build = {e["name"]: e.get("value") for e in container["env"]}.get("KEEPER_BUILD_ID")
        assert build in (None, tag), f"{owner}: KEEPER_BUILD_ID {build} is not the tag {tag}"
    # The replacement takes the build id from the tag of the worker's image ...
    (replacement,) = KUSTOMIZATION["replacements"]
    source = replacement["source"]
    deployment = _one("Deployment")
    assert (source["kind"], source["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert source["fieldPath"] == "spec.template.spec.containers.[name=worker].image"
    assert source["options"] == {"delimiter": ":", "index": 1}
    # ... into every KEEPER_BUILD_ID, the version label, and the names of the Deployment and
    # the Jobs (appended after a '-').
    paths = {
        (target["select"]["kind"], target["select"].get("name"), path): target.get("options")
        for target in replacement["targets"]
        for path in target["fieldPaths"]
    }
    build_env = "env.[name=KEEPER_BUILD_ID].value"
    for owner, container in _containers():
        if any(e["name"] == "KEEPER_BUILD_ID" for e in container["env"]):
            kind = "Deployment" if owner == deployment["metadata"]["name"] else "Job"
            path = f"spec.template.spec.containers.[name={container['name']}].{build_env}"
            assert paths.get((kind, owner, path), "missing") is None, (owner, path)
    for path in ("metadata.labels", "spec.selector.matchLabels", "spec.template.metadata.labels"):
        key = ("Deployment", deployment["metadata"]["name"], f"{path}.[{VERSION_LABEL}]")
        assert key in paths, key
    append = {"delimiter": "-", "index": 99}
    assert paths[("Deployment", deployment["metadata"]["name"], "metadata.name")] == append
    assert paths[("Job", None, "metadata.name")] == append
    # The files read as rendered: the version label is the tag too.
    for labels in (
        deployment["metadata"]["labels"],
        deployment["spec"]["selector"]["matchLabels"],
        deployment["spec"]["template"]["metadata"]["labels"],
    ):
        assert labels[VERSION_LABEL] == image["newTag"]


def test_the_service_the_budget_the_monitor_and_the_spread_select_every_builds_workers() -> None:
    deployment = _one("Deployment")
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert selector == pod_labels == {**WORKERS, VERSION_LABEL: pod_labels[VERSION_LABEL]}
    service = _one("Service")
    budget = _one("PodDisruptionBudget")
    monitor = _one("ServiceMonitor")
    assert service["spec"]["selector"] == WORKERS
    assert budget["spec"]["selector"] == {"matchLabels": WORKERS}
    assert monitor["spec"]["selector"] == {"matchLabels": WORKERS}
    # The monitor finds the Service by its labels and scrapes its metrics port, by name.
    assert WORKERS.items() <= service["metadata"]["labels"].items()
    (endpoint,) = monitor["spec"]["endpoints"]
    (port,) = service["spec"]["ports"]
    assert endpoint["port"] == port["name"] == "metrics"
    assert endpoint["path"] == "/metrics"
    # A drain takes one worker at a time, never the last one.
    assert budget["spec"]["maxUnavailable"] == 1 < deployment["spec"]["replicas"]
    spread = _pod_spec(deployment)["topologySpreadConstraints"]
    assert {c["topologyKey"] for c in spread} == {
        "kubernetes.io/hostname", "topology.kubernetes.io/zone",
    }  # fmt: skip
    for constraint in spread:
        assert constraint["labelSelector"] == {"matchLabels": WORKERS}
        assert constraint["matchLabelKeys"] == ["pod-template-hash"]


def _alert_groups() -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = yaml.safe_load(ALERTS.read_text())["groups"]
    return groups


def test_the_prometheusrule_holds_exactly_the_alert_rules_of_deploy_prometheus() -> None:
    assert _one("PrometheusRule")["spec"]["groups"] == _alert_groups(), (
        "deploy/k8s/prometheusrule.yaml no longer holds deploy/prometheus/keeper-alerts.yaml's "
        "rules: copy that file's `groups:` block under the PrometheusRule's `spec:`"
    )


def test_the_monitor_names_the_scrape_job_the_worker_rules_select() -> None:
    (endpoint,) = _one("ServiceMonitor")["spec"]["endpoints"]
    (relabel,) = [r for r in endpoint["relabelings"] if r["targetLabel"] == "job"]
    jobs = {
        job
        for group in _alert_groups()
        for rule in group["rules"]
        for job in re.findall(r'job="([^"]+)"', rule["expr"])
    }
    assert relabel["replacement"] in jobs, (relabel, jobs)
    # The other job is the reclaim tap's, which runs outside this Deployment.
    assert jobs - {relabel["replacement"]} == {"keeper-reclaim-tap"}


KUBECTL = shutil.which("kubectl")


def _kustomize(directory: Path) -> list[tuple[str, dict[str, Any]]]:
    assert KUBECTL is not None
    done = subprocess.run(
        [KUBECTL, "kustomize", str(directory)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return [(f"render:{d['kind']}", d) for d in yaml.safe_load_all(done.stdout) if d]


@pytest.mark.skipif(
    KUBECTL is None, reason="kubectl (with its built-in kustomize) is not installed"
)
def test_kubectl_kustomize_renders_a_release_from_its_tag_and_rolls_on_a_settings_change(
    tmp_path: Path,
) -> None:
    release = tmp_path / "k8s"
    shutil.copytree(K8S, release)
    kustomization = release / "kustomization.yaml"
    text = kustomization.read_text()
    assert text.count('newTag: "1.0.0"') == 1
    kustomization.write_text(
        text.replace('newTag: "1.0.0"', 'newTag: "2026.12.1-rc1"').replace(
            "newName: ghcr.io/example/keeper", "newName: registry.example.com/ml/keeper"
        )
    )
    rendered = _kustomize(release)
    _validate(rendered)
    kinds = sorted(doc["kind"] for _, doc in rendered)
    assert kinds == sorted(
        [*(d["kind"] for n, d in DOCUMENTS if n not in NOT_APPLIED), "ConfigMap", "ConfigMap"]
    )

    def of(kind: str) -> list[dict[str, Any]]:
        return [doc for _, doc in rendered if doc["kind"] == kind]

    (deployment,) = of("Deployment")
    assert deployment["metadata"]["name"] == "keeper-worker-2026.12.1-rc1"
    assert deployment["spec"]["selector"]["matchLabels"][VERSION_LABEL] == "2026.12.1-rc1"
    assert {job["metadata"]["name"] for job in of("Job")} == {
        "keeper-register-search-attributes-2026.12.1-rc1",
        "keeper-set-current-version-2026.12.1-rc1",
    }
    for doc in (deployment, *of("Job")):
        (container,) = _pod_spec(doc)["containers"]
        assert container["image"] == "registry.example.com/ml/keeper:2026.12.1-rc1"
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env.get("KEEPER_BUILD_ID", "2026.12.1-rc1") == "2026.12.1-rc1", doc["metadata"]
    # The settings: for the workers, a ConfigMap named by a hash of the file; for the Jobs,
    # the same file under a fixed name.
    name, key, file = _config_generator()
    jobs_name, _, _ = _config_generator("keeper-config-jobs")
    maps = {doc["metadata"]["name"]: doc for doc in of("ConfigMap")}
    (configmap,) = [m for n, m in maps.items() if n.startswith(f"{name}-") and n != jobs_name]
    assert set(maps) == {configmap["metadata"]["name"], jobs_name}
    for doc in maps.values():
        assert doc["data"] == {key: file.read_text()}
    for doc, mounted in (
        (deployment, configmap["metadata"]["name"]),
        *((j, jobs_name) for j in of("Job")),
    ):
        (volume,) = [v for v in _pod_spec(doc)["volumes"] if v["name"] == "config"]
        assert volume["configMap"]["name"] == mounted, doc["metadata"]["name"]

    # A changed setting is a new ConfigMap name in the pod template: the workers roll.
    changed = release / file.relative_to(K8S)
    changed.write_text(
        changed.read_text().replace("graceful_shutdown: 30s", "graceful_shutdown: 20s")
    )
    again = _kustomize(release)
    (after,) = [d for _, d in again if d["kind"] == "Deployment"]
    (volume,) = [v for v in _pod_spec(after)["volumes"] if v["name"] == "config"]
    assert volume["configMap"]["name"] != configmap["metadata"]["name"]
    assert volume["configMap"]["name"].startswith(f"{name}-")
    # ... and the Jobs stay as they were: `kubectl apply` may not change a Job's template.
    assert [d for _, d in again if d["kind"] == "Job"] == of("Job")


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
