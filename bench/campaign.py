"""keeper's fault campaign: randomized runs of every workflow family with faults, then an
audit of what the emulators still hold against what the workflows say they own.

Run from the repository root:

    python bench/campaign.py                  # the short draw of tests/common/test_campaign.py
    python bench/campaign.py --seed 7 --bootstraps 40 --deletions 40
    python bench/campaign.py --long           # 500 bootstraps, 2,000 deletions, SIGKILLed
                                              # workers, the property tests at 10,000 examples
    python bench/campaign.py --seed N ...     # replays the draw of seed N

Every random choice comes from `random.Random(seed)` (bench/campaign_plan.py), so a seed and
the same counts replay the same runs with the same faults. The figures (runs by family,
faults by kind, leaks, zombie phone-homes, wrongful kills, records written twice, the
secrets scan, the seed) go to stdout, or as JSON with --json; raw JSON also goes to
bench/results/campaign-<UTC time>.json. Exit 1 when anything was found.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from run_record import Run  # noqa: E402
from script_runner import (  # noqa: E402
    Interrupted,
    configure,
    progress,
    run_for_figures,
    start_dev_server,
)

from bench.campaign_report import Report  # noqa: E402
from bench.campaign_restart import server_restart  # noqa: E402
from bench.campaign_run import CampaignConfig, run_campaign, secrets_of  # noqa: E402
from emulators.tpu import EmulatorConfig, TpuEmulator  # noqa: E402
from tests.conftest import claimed_ip_prefix  # noqa: E402
from tests.harness import free_port  # noqa: E402

RESULTS = ROOT / "bench" / "results"
LONG = {"bootstraps": 500, "deletions": 2000, "reclaims": 12, "watches": 24}
SHORT = {"bootstraps": 12, "deletions": 6, "reclaims": 3, "watches": 4}
PROPERTY_EXAMPLES = 10_000
# Runner interleavings run this many at a time in one world (one hypothesis example), so
# 10,000 of them cost 400 worlds and worker starts instead of 10,000.
RUNNER_PROPERTY_BATCH = 25
# Past about 50 scenarios an example outgrows hypothesis's draw budget and is dropped.
MAX_RUNNER_PROPERTY_BATCH = 50
# Bootstraps and deletions in flight across each dev-server restart.
RESTART_RUNS = 10
# The property tests the long version runs at PROPERTY_EXAMPLES, each a pytest subprocess.
RUNNER_PROPERTIES = "tests/runners/test_runner_properties.py"
RECLAIM_PROPERTIES = "tests/reclaim/test_reclaim_properties.py"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=None, help="the draw's seed (default: time)")
    parser.add_argument("--bootstraps", type=int, help="TPU bootstrap runs")
    parser.add_argument("--deletions", type=int, help="runner deletion runs")
    parser.add_argument("--reclaims", type=int, help="job reclaim runs")
    parser.add_argument("--watches", type=int, help="job watch runs")
    parser.add_argument(
        "--long", action="store_true", help="the long version: see the counts above"
    )
    parser.add_argument(
        "--property-examples",
        type=int,
        default=None,
        help=f"property-test examples (--long: {PROPERTY_EXAMPLES:,}; 0 skips them)",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        default=None,
        help="runs of one family in flight at once (default 32; at 128 the long version "
        "overloaded the one event loop that also serves every emulator)",
    )
    parser.add_argument(
        "--runner-property-examples",
        type=int,
        default=None,
        help="interleavings for the runner property test alone, which costs seconds each "
        "(default: --property-examples)",
    )
    parser.add_argument(
        "--runner-property-batch",
        type=int,
        default=RUNNER_PROPERTY_BATCH,
        help="runner interleavings run at once in one world, sharing its store, GitHub, "
        f"provider and worker (default {RUNNER_PROPERTY_BATCH})",
    )
    parser.add_argument(
        "--server-restarts",
        type=int,
        default=None,
        help="dev-server restarts, each under 10 bootstraps and 10 deletions (--long: 1)",
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("-v", "--verbose", action="store_true", help="SDK logs and each run")
    args = parser.parse_args(argv)
    sizes = LONG if args.long else SHORT
    for name, default in sizes.items():
        value = getattr(args, name)
        if value is None:
            setattr(args, name, default)
        elif value < 0:
            parser.error(f"--{name} must be 0 or more, not {value}")
    if args.concurrency is None:
        args.concurrency = 32
    elif args.concurrency < 1:
        parser.error(f"--concurrency must be 1 or more, not {args.concurrency}")
    if args.server_restarts is None:
        args.server_restarts = 1 if args.long else 0
    if not 1 <= args.runner_property_batch <= MAX_RUNNER_PROPERTY_BATCH:
        parser.error(
            f"--runner-property-batch must be 1 to {MAX_RUNNER_PROPERTY_BATCH}, "
            f"not {args.runner_property_batch}"
        )
    if args.property_examples is None:
        args.property_examples = PROPERTY_EXAMPLES if args.long else 0
    if args.seed is None:
        args.seed = int(time.time())
    return args


def replay_command(args: argparse.Namespace) -> str:
    """The command line that draws the same runs and cases again: every count and option
    spelled out, so a default changed later does not change what it replays."""
    parts = ["python", "bench/campaign.py", "--seed", str(args.seed)]
    if args.long:
        parts.append("--long")
    for name in ("bootstraps", "deletions", "reclaims", "watches", "concurrency"):
        parts += [f"--{name}", str(getattr(args, name))]
    parts += ["--server-restarts", str(args.server_restarts)]
    parts += ["--property-examples", str(args.property_examples)]
    if args.runner_property_examples is not None:
        parts += ["--runner-property-examples", str(args.runner_property_examples)]
    parts += ["--runner-property-batch", str(args.runner_property_batch)]
    return shlex.join(parts)


def run_properties(examples: dict[str, tuple[int, int]], seed: int) -> dict[str, dict[str, Any]]:
    """Each property file as a pytest subprocess with (cases, batch): `cases` drawn from
    `seed`, `batch` of them to an example (the files read KEEPER_PROPERTY_EXAMPLES,
    KEEPER_PROPERTY_BATCH and KEEPER_PROPERTY_SEED)."""
    found: dict[str, dict[str, Any]] = {}
    for path, (count, batch) in examples.items():
        if count <= 0:
            continue
        # Fewer cases than a batch are one example of that many; otherwise whole batches.
        batch = min(batch, count)
        hypothesis_examples = -(-count // batch)
        env = {
            **os.environ,
            "KEEPER_PROPERTY_EXAMPLES": str(hypothesis_examples),
            "KEEPER_PROPERTY_BATCH": str(batch),
            "KEEPER_PROPERTY_SEED": str(seed),
            "PYTHONPATH": str(ROOT),
        }
        progress(
            f"{path}: {hypothesis_examples * batch:,} cases per property "
            f"({hypothesis_examples:,} examples of {batch}), seed {seed}"
        )
        started = time.monotonic()
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-s",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:xdist",
                path,
            ],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        summary = done.stdout.strip().splitlines()[-1:] or [done.stderr.strip()[-200:]]
        found[Path(path).stem] = {
            "cases": hypothesis_examples * batch,
            "examples": hypothesis_examples,
            "batch": batch,
            "seed": seed,
            "passed": done.returncode == 0,
            "seconds": round(time.monotonic() - started, 1),
            "summary": summary[0],
        }
        if done.returncode != 0:
            # What it failed on: hypothesis prints the failing example and its notes there.
            found[Path(path).stem]["failure"] = failure_of(done.stdout, done.stderr)
            # And the whole report beside the figures, for what the cut left out.
            stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
            report = RESULTS / f"property-{Path(path).stem}-{stamp}.txt"
            report.write_text(done.stdout + "\n--- stderr ---\n" + done.stderr[-20_000:])
            found[Path(path).stem]["report_file"] = str(report.relative_to(ROOT))
    return found


# Lines kept of a failing property run's report: its start, every line that names an error,
# and its end. A batch's falsifying example alone can run to thousands of lines of reprs, and
# the error hypothesis reports (a FlakyFailure wraps the first one) comes after it.
FAILURE_HEAD = 40
FAILURE_ERRORS = 200
FAILURE_TAIL = 200
ERROR_LINE = re.compile(
    r"Error|Exception|assert|Traceback|Falsifying|stranded|timed out|^\s*(\|\s*)*E\s"
)


def failure_of(stdout: str, stderr: str) -> list[str]:
    """The failing run's report from pytest's FAILURES section (the falsifying example,
    its notes, the assertion), without the dev server's log lines; a long one is cut to its
    head, its error lines and its tail."""
    lines = [line for line in stdout.splitlines() if "level=" not in line]
    start = next((i for i, line in enumerate(lines) if " FAILURES " in line), 0)
    kept = lines[start:]
    if not kept:
        return stderr.strip().splitlines()[-FAILURE_TAIL:]
    if len(kept) <= FAILURE_HEAD + FAILURE_ERRORS + FAILURE_TAIL:
        return kept
    middle = kept[FAILURE_HEAD:-FAILURE_TAIL]
    errors = [line for line in middle if ERROR_LINE.search(line)][:FAILURE_ERRORS]
    left_out = len(middle) - len(errors)
    return [
        *kept[:FAILURE_HEAD],
        f"... {left_out} lines left out; the error lines among them follow ...",
        *errors,
        "... the report's end ...",
        *kept[-FAILURE_TAIL:],
    ]


async def campaign(args: argparse.Namespace, workdir: Path) -> Report:
    config = CampaignConfig(
        seed=args.seed,
        bootstraps=args.bootstraps,
        deletions=args.deletions,
        reclaims=args.reclaims,
        watches=args.watches,
        sigkill=args.long,
        concurrency=args.concurrency,
    )
    progress(f"campaign seed {args.seed}: {config.counts()}, sigkill={config.sigkill}")
    started = time.monotonic()
    async with await start_dev_server() as env:
        with claimed_ip_prefix() as prefix:
            emu = TpuEmulator(EmulatorConfig(ip_prefix=prefix, vm_health_port=free_port()))
            await emu.start()
            try:
                report = await run_campaign(config, env.client, emu, workdir)
                for restart in range(args.server_restarts):
                    progress(f"dev-server restart {restart + 1} of {args.server_restarts}")
                    runs, findings, read, found = await server_restart(
                        emu, workdir / f"restart-{restart}", RESTART_RUNS, secrets_of("")
                    )
                    report.campaign_faults["dev-server-restart"] += 1
                    report.runs += runs
                    report.findings += findings
                    report.histories_scanned += read
                    report.secrets_found += found
                report.seconds = time.monotonic() - started
                return report
            finally:
                await emu.stop()


def main(argv: list[str]) -> int:
    args = parse(argv)
    configure(args.verbose)
    logging.getLogger("campaign").setLevel(logging.INFO if args.verbose else logging.WARNING)
    # An activity's failure is logged with its traceback at WARNING; the campaign makes
    # thousands on purpose.
    logging.getLogger("temporalio").setLevel(logging.ERROR)
    logging.getLogger("keeper").setLevel(logging.ERROR)
    for handler in logging.getLogger().handlers:
        handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s", "%H:%M:%S"))
    record = Run("campaign")
    with tempfile.TemporaryDirectory(prefix="keeper-campaign-") as tmp:
        try:
            report, figures = run_for_figures(lambda: campaign(args, Path(tmp)))
        except Interrupted:
            progress("interrupted")
            return 130
    runner_examples = args.runner_property_examples
    examples = {
        RUNNER_PROPERTIES: (
            args.property_examples if runner_examples is None else runner_examples,
            args.runner_property_batch,
        ),
        RECLAIM_PROPERTIES: (args.property_examples, 1),
    }
    report.properties = run_properties(examples, args.seed)
    report.replay = replay_command(args)
    document = report.to_json()
    path = record.write(document)
    progress(f"raw figures in {path.relative_to(ROOT)}")
    print(json.dumps(document, indent=2) if args.json else report.text(), file=figures)
    figures.flush()
    failed = not report.clean or any(not p["passed"] for p in report.properties.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
