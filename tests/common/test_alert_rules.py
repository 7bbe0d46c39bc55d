"""deploy/prometheus/keeper-alerts.yaml through a real Prometheus' promtool: the rules load
(`promtool check rules`), and their unit tests, deploy/prometheus/keeper-alerts.test.yaml,
pass (`promtool test rules`), with a case that fires and one that stays quiet for every rule.

promtool comes from Debian's prometheus package (`make promtool`). A bare `pytest` without it
skips these; `make test` sets KEEPER_REQUIRE_PROMTOOL=1, so there a missing promtool fails.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.harness import env_flag

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "keeper-alerts.yaml"
RULE_TESTS = ROOT / "deploy" / "prometheus" / "keeper-alerts.test.yaml"
REQUIRE_ENV = "KEEPER_REQUIRE_PROMTOOL"


@pytest.fixture
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        message = (
            "promtool is not installed; `make promtool` installs Debian's prometheus package, "
            "which has it (or put a promtool from prometheus.io on PATH)"
        )
        if env_flag(REQUIRE_ENV):
            pytest.fail(message)
        pytest.skip(message)
    return path


def _run(promtool: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool, *args], capture_output=True, text=True, timeout=60, cwd=RULES.parent
    )


def _rules() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["alert"] for group in groups for rule in group["rules"]]


def _rule(alert: str) -> dict:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    (rule,) = [rule for group in groups for rule in group["rules"] if rule["alert"] == alert]
    return rule


def test_promtool_checks_the_rules(promtool: str) -> None:
    done = _run(promtool, "check", "rules", RULES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in done.stdout, done.stdout


def test_the_rules_pass_their_promtool_unit_tests(promtool: str) -> None:
    done = _run(promtool, "test", "rules", RULE_TESTS.name)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_rule_has_a_case_that_fires_and_one_that_stays_quiet() -> None:
    fires: set[str] = set()
    quiet: set[str] = set()
    for case in yaml.safe_load(RULE_TESTS.read_text())["tests"]:
        for check in case["alert_rule_test"]:
            (fires if check["exp_alerts"] else quiet).add(check["alertname"])
    assert set(_rules()) - fires == set(), "rules without a case where they fire"
    assert set(_rules()) - quiet == set(), "rules without a case where they stay quiet"


STUCK = (
    'keeper_compensations_total{event="stuck",family="tpu",instance="w1:9464",'
    'job="keeper-worker",namespace="default",task_queue="keeper-tpu",'
    'workflow_type="TpuSliceBootstrapRun"}'
)


@pytest.mark.parametrize(
    ("values", "fires"),
    [
        # Published at 0 when the worker started, 1 from minute 10.
        ("0x9 1x20", True),
        # No series until the first stuck compensation: born at 1 at minute 10.
        ("_x9 1x20", False),
    ],
)
def test_only_a_counter_published_at_zero_fires_on_its_first_increment(
    promtool: str, tmp_path: Path, values: str, fires: bool
) -> None:
    """Why the worker publishes the counters the rules watch at 0 (workers/alerts.py):
    promtool fails a case that expects the alert exactly when it does not fire."""
    case = {
        "rule_files": [str(RULES)],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": STUCK, "values": values}],
                "alert_rule_test": [
                    {
                        "eval_time": "15m",
                        "alertname": "KeeperCompensationStuck",
                        "exp_alerts": [
                            {
                                "exp_labels": {
                                    "severity": "page",
                                    "event": "stuck",
                                    "family": "tpu",
                                    "instance": "w1:9464",
                                    "job": "keeper-worker",
                                    "namespace": "default",
                                    "task_queue": "keeper-tpu",
                                    "workflow_type": "TpuSliceBootstrapRun",
                                },
                                "exp_annotations": {
                                    key: text.replace("{{ $labels.family }}", "tpu")
                                    for key, text in _rule("KeeperCompensationStuck")[
                                        "annotations"
                                    ].items()
                                },
                            }
                        ],
                    }
                ],
            }
        ],
    }
    tests = tmp_path / "stuck.test.yaml"
    tests.write_text(yaml.safe_dump(case))
    done = subprocess.run(
        [promtool, "test", "rules", str(tests)], capture_output=True, text=True, timeout=60
    )
    assert (done.returncode == 0) is fires, done.stdout + done.stderr
    if not fires:
        assert "KeeperCompensationStuck" in done.stdout + done.stderr
