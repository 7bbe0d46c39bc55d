"""How fast `keeper` answers, next to the `temporal` CLI beside it: whole-process wall time and
peak memory of the commands an operator and a shell's TAB run most.

Run from the repository root:

    python bench/cli_startup.py                        # starts a dev stack for `tpu status`
    python bench/cli_startup.py --address 127.0.0.1:7233   # a running Temporal server instead
    python bench/cli_startup.py --no-stack             # only the commands that need no server
    python bench/cli_startup.py --runs 15 --json

Each command runs `--runs` times (default 7) after one warm-up run that is not counted, the
commands interleaved round by round so that the machine's load falls on all of them alike.
A run's wall time is from spawn to reap; its peak RSS is the child's own (wait4's rusage).
Medians are reported, with each command's ratio to `temporal --version`:

| command | what it stands for |
|---|---|
| `temporal --version` | the yardstick: the Temporal CLI (a Go binary) from the venv |
| `keeper --version` | the package version and the worker build id (reads the settings) |
| `keeper --help` | the root help: every command's one-line summary |
| completion `keeper t` | a TAB after `keeper t` (`_KEEPER_COMPLETE=bash_complete`) |
| completion `keeper tpu st` | a TAB one level down: the `tpu` group is loaded, nothing else |
| `keeper tpu status NAME` | a real round trip: settings, a client, a visibility query |

`keeper tpu status` asks about a slice that does not exist (`bench-no-such-slice`): the
command connects, lists the slice's workflows, finds none and answers "no slice ..." with
exit 1, which the bench expects. Without `--address` the bench starts a dev stack of its
own (`keeper-dev up --no-worker` under `--port-base`, default 24000, with its state in a
temporary directory; no worker is needed to answer about an unknown slice) and stops it with
`keeper-dev down` at the end.

The import time of `import keeper.cli.main`, of a `keeper --version` process and of the
`keeper tpu status` one (`python -X importtime`, the sum of the top-level cumulative figures)
is reported as well:
it counts the work rather than the wall, so it is less disturbed by a loaded machine.

Figures are printed, never asserted. Raw figures go to bench/results/cli_startup-<UTC>.json
(bench/run_record.py).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "bench") not in sys.path:
    sys.path.insert(0, str(ROOT / "bench"))

from run_record import Run  # noqa: E402

BIN = Path(sys.executable).parent
UNKNOWN_SLICE = "bench-no-such-slice"


@dataclass
class Case:
    label: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    # The exit code the command answers with when it works as meant.
    expect: int = 0
    # Text its stdout or stderr must hold, so a fast failure is never taken for an answer.
    says: str | None = None


@dataclass
class Sample:
    wall_s: float
    max_rss_mib: float


def complete(words: str) -> dict[str, str]:
    """What bash's completion script sets to ask `keeper` for candidates."""
    return {
        "_KEEPER_COMPLETE": "bash_complete",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - 1),
    }


def cases(status_args: list[str] | None, status_env: dict[str, str]) -> list[Case]:
    keeper = str(BIN / "keeper")
    found = [
        Case("temporal --version", [str(BIN / "temporal"), "--version"], says="temporal"),
        Case("keeper --version", [keeper, "--version"], says="keeper"),
        Case("keeper --help", [keeper, "--help"], says="Usage: keeper"),
        Case("complete `keeper t`", [keeper], complete("keeper t"), says="tpu"),
        Case("complete `keeper tpu st`", [keeper], complete("keeper tpu st"), says="status"),
    ]
    if status_args is not None:
        found.append(
            Case(
                f"keeper tpu status {UNKNOWN_SLICE}",
                [keeper, *status_args, "tpu", "status", UNKNOWN_SLICE],
                status_env,
                expect=1,
                says="no slice",
            )
        )
    return found


def run_once(case: Case) -> Sample:
    """One process, timed from spawn to reap; its own peak RSS from wait4."""
    with tempfile.TemporaryFile() as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            case.argv,
            cwd=ROOT,
            env={**os.environ, **case.env},
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode(errors="replace")
    if proc.returncode != case.expect or (case.says and case.says not in text):
        raise SystemExit(
            f"{case.label}: exit {proc.returncode} (expected {case.expect}), output:\n{text}"
        )
    # Linux reports ru_maxrss in KiB.
    return Sample(wall_s=wall, max_rss_mib=usage.ru_maxrss / 1024)


def import_time_us(argv: list[str], env: dict[str, str] | None = None) -> int:
    """The sum of the top-level cumulative figures of `python -X importtime ARGV`, in µs."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *argv],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        check=False,
    )
    total = 0
    for line in done.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|", 2)
        # Top-level modules are indented by one space; nested ones by more.
        if cumulative.strip().isdigit() and name.startswith(" ") and not name.startswith("  "):
            total += int(cumulative)
    return total


@contextlib.contextmanager
def dev_stack(port_base: int) -> Iterator[tuple[list[str], dict[str, str]]]:
    """A stack of its own: the checkout's settings file copied into a temporary directory
    (its state, pid files and logs go there), emulators/ linked beside it for the scenario
    file, the ports moved by `port_base`."""
    home = Path(tempfile.mkdtemp(prefix="keeper-cli-bench-"))
    config = home / "temporal-dev.yaml"
    shutil.copy(ROOT / "temporal-dev.yaml", config)
    (home / "emulators").symlink_to(ROOT / "emulators")
    env = {"KEEPER_DEV_PORT_BASE": str(port_base)}
    dev = [str(BIN / "keeper-dev"), "--config", str(config)]
    print(f"starting a dev stack under port base {port_base} in {home}", file=sys.stderr)
    subprocess.run(
        [*dev, "up", "--no-worker"],
        cwd=ROOT,
        env={**os.environ, **env},
        check=True,
        stdout=sys.stderr,
    )
    try:
        yield ["--config", str(config)], env
    finally:
        subprocess.run(
            [*dev, "down"], cwd=ROOT, env={**os.environ, **env}, check=False, stdout=sys.stderr
        )
        shutil.rmtree(home, ignore_errors=True)


def measure(todo: list[Case], runs: int) -> dict[str, list[Sample]]:
    samples: dict[str, list[Sample]] = {case.label: [] for case in todo}
    for case in todo:
        run_once(case)  # warm-up: page cache, .pyc files; not counted
    for i in range(runs):
        print(f"round {i + 1}/{runs}", file=sys.stderr)
        for case in todo:
            samples[case.label].append(run_once(case))
    return samples


def summary(samples: dict[str, list[Sample]], yardstick: str) -> list[dict[str, Any]]:
    base = statistics.median(s.wall_s for s in samples[yardstick])
    rows = []
    for label, got in samples.items():
        wall = statistics.median(s.wall_s for s in got)
        rows.append(
            {
                "command": label,
                "runs": len(got),
                "wall_median_s": round(wall, 4),
                "wall_min_s": round(min(s.wall_s for s in got), 4),
                "wall_max_s": round(max(s.wall_s for s in got), 4),
                "max_rss_median_mib": round(statistics.median(s.max_rss_mib for s in got), 1),
                "ratio_to_temporal": round(wall / base, 1),
            }
        )
    return rows


def render(figures: dict[str, Any]) -> str:
    header = ("command", "median wall", "min", "max", "median max RSS", "x temporal")
    lines = [
        [
            row["command"],
            f"{row['wall_median_s']:.3f} s",
            f"{row['wall_min_s']:.3f} s",
            f"{row['wall_max_s']:.3f} s",
            f"{row['max_rss_median_mib']:.0f} MiB",
            f"{row['ratio_to_temporal']:.1f}",
        ]
        for row in figures["commands"]
    ]
    widths = [max(len(r[i]) for r in [header, *lines]) for i in range(len(header))]
    out = [
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
        for r in [header, *lines]
    ]
    out.append("")
    out.append(f"runs per command: {figures['runs']} (medians; one warm-up run not counted)")
    out.append(f"tpu status: {figures['status_against']}")
    for name, value in figures["import_time_us"].items():
        out.append(f"-X importtime, {name}: {value / 1000:.0f} ms (median of {figures['runs']})")
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7, help="timed runs per command")
    parser.add_argument(
        "--address", default=None, help="a running Temporal server (HOST:PORT) for tpu status"
    )
    parser.add_argument(
        "--port-base", type=int, default=24000, help="of the dev stack the bench starts"
    )
    parser.add_argument("--no-stack", action="store_true", help="skip `keeper tpu status`")
    parser.add_argument("--json", action="store_true", help="the figures as JSON on stdout")
    args = parser.parse_args()
    run = Run("cli_startup")
    with contextlib.ExitStack() as stack:
        if args.no_stack:
            status_args, status_env, against = None, {}, "not measured (--no-stack)"
        elif args.address:
            status_args, status_env = ["--address", args.address], {}
            against = f"the Temporal server at {args.address} (--address)"
        else:
            status_args, status_env = stack.enter_context(dev_stack(args.port_base))
            against = f"a dev stack the bench started (port base {args.port_base}, no worker)"
        todo = cases(status_args, status_env)
        samples = measure(todo, args.runs)
        imported: dict[str, tuple[list[str], dict[str, str]]] = {
            "import keeper.cli.main": (["-c", "import keeper.cli.main"], {}),
            "keeper --version": ([str(BIN / "keeper"), "--version"], {}),
        }
        if status_args is not None:
            status = todo[-1]
            imported[status.label] = (status.argv, status.env)
        imports = {
            label: [import_time_us(argv, env) for _ in range(args.runs)]
            for label, (argv, env) in imported.items()
        }
    figures = {
        "runs": args.runs,
        "status_against": against,
        "status_slice": UNKNOWN_SLICE,
        "commands": summary(samples, "temporal --version"),
        "import_time_us": {k: int(statistics.median(v)) for k, v in imports.items()},
        "raw": {
            label: [{"wall_s": s.wall_s, "max_rss_mib": s.max_rss_mib} for s in got]
            for label, got in samples.items()
        },
        "raw_import_time_us": imports,
    }
    path = run.write(figures)
    print(json.dumps(figures, indent=2) if args.json else render(figures))
    print(f"raw results: {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
