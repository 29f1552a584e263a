"""Report of the last ``make mutate`` run: score per module, survivors with file:line and diff.

Usage::

    python tests/mutation/report.py [--markdown] [--no-diff] [MODULE ...]

Reads the results mutmut left in ``build/mutate/<module>/mutants/`` (see ``mutate.py``).
The score of a module is ``killed / (checked - equivalent)``: killed counts mutants a
test failed on or that ran past mutmut's timeout; checked leaves out the mutants a run
stopped by ``--budget`` did not reach yet; ``equivalent.py`` lists the mutants that cannot
change behaviour, with the reason. Every other checked mutant that is not killed is listed:
a survivor (the tests passed) or one no selected test reaches. Exit status 1 if a module
is below its target (90 % software, 80 % RTL), was never run or not run to the end.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.mutation.equivalent import EQUIVALENT
from tests.mutation.targets import TARGETS, Target

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "build" / "mutate"

#: mutmut's exit codes (``mutmut.stats.status_by_exit_code``) grouped as this report counts them.
KILLED = {1: "killed", 3: "killed", 36: "timeout", 24: "timeout", -24: "timeout",
          152: "timeout", 255: "timeout", 37: "type check"}
NOT_KILLED = {0: "survived", 5: "no tests", 33: "no tests", None: "not checked",
              34: "skipped"}


@dataclass
class Mutant:
    """One mutant that was not killed."""

    name: str
    status: str
    line: int | None = None
    diff: str = ""


@dataclass
class ModuleResult:
    """The counts of one module's last run."""

    target: Target
    total: int = 0
    unchecked: int = 0
    killed: int = 0
    equivalent: int = 0
    seconds: float | None = None
    open: list[Mutant] = field(default_factory=list)
    stale_equivalents: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        counted = self.total - self.unchecked - self.equivalent
        return self.killed / counted if counted else 1.0


def _function_name(mutant_name: str) -> tuple[str | None, str]:
    """``(class, function)`` of a mutmut mutant name (``mod.xǁCǁf__mutmut_3``)."""
    mangled = mutant_name.partition("__mutmut_")[0].rpartition(".")[2]
    if mangled.startswith("xǁ"):
        _, cls, func = mangled.split("ǁ")
        return cls, func
    return None, mangled.removeprefix("x_")


def _function_span(source: str, cls: str | None, func: str) -> tuple[int, int] | None:
    tree = ast.parse(source)
    scopes = [tree]
    if cls is not None:
        scopes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == cls]
    for scope in scopes:
        for node in ast.iter_child_nodes(scope):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == func:
                return node.lineno, node.end_lineno
    return None


def _changed_line(source: str, span, diff: str) -> int | None:
    """Line of the checkout's source that the mutant changes (first ``-`` line of the diff)."""
    removed = [ln[1:].strip() for ln in diff.splitlines()
               if ln.startswith("-") and not ln.startswith("---")]
    if not span or not removed:
        return span[0] if span else None
    lines = source.splitlines()
    for number in range(span[0], span[1] + 1):
        if lines[number - 1].strip() == removed[0]:
            return number
    return span[0]


def collect(target: Target, *, with_diff: bool = True) -> ModuleResult | None:
    """Read the results of *target*'s last run, or None if it never ran."""
    work = WORK / target.module
    relative = "src/" + target.source.split("/", 1)[1]
    meta = work / "mutants" / (relative + ".meta")
    if not meta.exists():
        return None
    result = ModuleResult(target)
    seconds = work / "last_run_seconds"
    if seconds.exists():
        result.seconds = float(seconds.read_text())
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    source = (ROOT / target.source).read_text()
    equivalent = {name: reason for name, reason in EQUIVALENT.items()
                  if name.startswith(target.module + ".")}
    result.stale_equivalents = sorted(n for n in equivalent
                                      if n not in codes or codes[n] in KILLED)
    if with_diff:
        from mutmut.mutation.diff_apply import get_diff_for_mutant
    cwd = os.getcwd()
    os.chdir(work)  # mutmut reads its configuration and mutants relative to here
    try:
        for name, code in sorted(codes.items(), key=lambda kv: _sort_key(kv[0])):
            result.total += 1
            if code in KILLED:
                result.killed += 1
                continue
            if code is None:
                result.unchecked += 1
                continue
            if name in equivalent:
                result.equivalent += 1
                continue
            mutant = Mutant(name, NOT_KILLED.get(code, f"exit {code}"))
            if with_diff:
                mutant.diff = get_diff_for_mutant(name, path=relative)
            cls, func = _function_name(name)
            mutant.line = _changed_line(source, _function_span(source, cls, func), mutant.diff)
            result.open.append(mutant)
    finally:
        os.chdir(cwd)
    return result


def _sort_key(name: str):
    stem, _, number = name.partition("__mutmut_")
    return stem, int(number) if number.isdigit() else 0


def _fmt_seconds(seconds):
    return "-" if seconds is None else f"{seconds / 60:.1f} min"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", metavar="MODULE")
    parser.add_argument("--markdown", action="store_true",
                        help="print only the score table, as Markdown (for docs/testing.md)")
    parser.add_argument("--no-diff", action="store_true", help="survivors without their diff")
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in TARGETS]
    if unknown:
        parser.error(f"not a mutation target: {', '.join(unknown)}")
    modules = args.modules or list(TARGETS)
    results = {m: collect(TARGETS[m], with_diff=not (args.no_diff or args.markdown))
               for m in modules}
    failed = False
    if not args.markdown:
        for result in results.values():
            if result is None:
                continue
            for mutant in result.open:
                print(f"{result.target.source}:{mutant.line}: {mutant.status}: {mutant.name}")
                if mutant.diff:
                    print("    " + mutant.diff.replace("\n", "\n    "))
            for name in result.stale_equivalents:
                print(f"{result.target.source}: equivalent.py lists {name}, which is no "
                      f"longer a surviving mutant: remove or update the entry")
        print()
    print("| module | mutants | checked | killed | equivalent | not killed | score | target "
          "| last run |")
    print("|---|---|---|---|---|---|---|---|---|")
    for module, result in results.items():
        target = TARGETS[module]
        if result is None:
            print(f"| `{module}` | not run | | | | | | {target.target_score:.0%} | |")
            failed = True
            continue
        below = result.score < target.target_score
        failed |= below or result.unchecked > 0
        print(f"| `{module}` | {result.total} | {result.total - result.unchecked} | "
              f"{result.killed} | {result.equivalent} | "
              f"{len(result.open)} | {result.score:.1%}{' (below)' if below else ''} | "
              f"{target.target_score:.0%} | {_fmt_seconds(result.seconds)} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
