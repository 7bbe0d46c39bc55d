"""How large keeper's non-test code is, by layer, and how much of each workflow module is
orchestration, at one or more git revisions.

    python bench/code_size.py 670433d HEAD

Lines per layer are `git ls-files` lines of the .py and .proto files outside tests/, by their
top-level folder. For each workflow module: its lines, its code lines (no docstrings, comments,
imports or blank lines) and its orchestration lines (the code lines of functions that await
or continue as new). Figures are printed and written to bench/results/code_size-<UTC>.json.
"""

from __future__ import annotations

import argparse
import ast
import io
import subprocess
import tokenize
from collections import Counter

from run_record import Run

WORKFLOW_MODULES = (
    "workflows/tpu/bootstrap.py",
    "workflows/tpu/bootstrap_run.py",
    "workflows/tpu/calls.py",
    "workflows/runners/deletion.py",
    "workflows/runners/deletion_v1.py",  # before 1.0: the frozen first version
    "workflows/reclaim/job_reclaim.py",
    "workflows/watch/job_watch.py",
)
_NOT_CODE = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}


def git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout


def layers(rev: str) -> Counter[str]:
    sizes: Counter[str] = Counter()
    for path in git("ls-tree", "-r", "--name-only", rev).splitlines():
        if path.endswith((".py", ".proto")) and not path.startswith("tests/"):
            sizes[path.split("/")[0]] += len(git("show", f"{rev}:{path}").splitlines())
    return sizes


def _code_lines(source: str, skip: set[int]) -> set[int]:
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type not in _NOT_CODE and tok.type != tokenize.ENDMARKER:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return lines - skip


def module_size(source: str) -> dict[str, int]:
    tree = ast.parse(source)
    skip: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = body[0] if body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
        if isinstance(node, ast.Import | ast.ImportFrom):
            skip.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    code = _code_lines(source, skip)
    orchestration: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            awaits = any(isinstance(inner, ast.Await) for inner in ast.walk(node))
            if awaits or "continue_as_new" in ast.unparse(node):
                span = set(range(node.lineno, (node.end_lineno or node.lineno) + 1))
                orchestration |= code & span
    lines = len(source.splitlines())
    return {"lines": lines, "code": len(code), "orchestration": len(orchestration)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("revs", nargs="+", help="git revisions, e.g. 670433d HEAD")
    args = parser.parse_args()
    run = Run("code_size")
    figures: dict[str, object] = {}
    for rev in args.revs:
        sized = layers(rev)
        modules = {}
        for path in WORKFLOW_MODULES:
            try:
                modules[path] = module_size(git("show", f"{rev}:{path}"))
            except subprocess.CalledProcessError:
                continue  # not there at this revision
        figures[rev] = {"layers": dict(sized), "total": sum(sized.values()), "modules": modules}
        print(f"{rev}: {sum(sized.values())} lines")
        for layer, count in sorted(sized.items()):
            print(f"  {layer:<12} {count:>7}")
        for path, size in modules.items():
            print(f"  {path:<36} {size['lines']:>5} lines {size['code']:>5} code "
                  f"{size['orchestration']:>5} orchestration")  # fmt: skip
    print(f"raw results: {run.write(figures)}")


if __name__ == "__main__":
    main()
