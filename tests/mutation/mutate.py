"""``make mutate``: mutation testing with mutmut over the modules of ``targets.py``.

Usage::

    python tests/mutation/mutate.py [--jobs N] [MODULE ...]

Each module gets its own mutmut work directory, ``build/mutate/<module>/``: a ``src/``
holding symlinks to the three packages (mutmut names mutants after the path below
``src/``, so ``src/nem/numerics.py`` gives ``nem.numerics.*``, the name the tests import),
symlinks to ``tests/``, ``sim/`` and ``docs/`` (tests read the docs, e.g. the register map of
``docs/engine.md``), and a ``pyproject.toml`` that is the checkout's plus a
``[tool.mutmut]`` table naming the one file to mutate and the module's fast tests. mutmut
copies all of it into ``mutants/`` there, records which test reaches which function, and
runs each mutant against those tests only (``--max-children`` processes in parallel).
Results stay in the work directory: a re-run only tries mutants of functions whose source
changed, and, when the module's test files changed, the mutants that were not killed.
Nothing in the checkout is modified. The report (``tests/mutation/report.py``) follows each run.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the checkout importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tests.mutation.targets import PACKAGE_DIRS, TARGETS, Target

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "build" / "mutate"

#: pytest options for every mutant run: no xdist workers or cache, a fixed Hypothesis seed
#: so that a verdict does not depend on the run.
PYTEST_ARGS = ("-p", "no:xdist", "-p", "no:cacheprovider", "--hypothesis-seed=0")


def _toml_list(values):
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def mutmut_table(target: Target) -> str:
    """The ``[tool.mutmut]`` table of one module's work directory."""
    packages = sorted(PACKAGE_DIRS)
    return "\n".join([
        "",
        "[tool.mutmut]",
        f"source_paths = {_toml_list(f'src/{p}' for p in packages)}",
        f"only_mutate = {_toml_list(['src/' + target.source.split('/', 1)[1]])}",
        f"also_copy = {_toml_list(['sim', 'docs'])}",
        f"pytest_add_cli_args = {_toml_list(PYTEST_ARGS)}",
        f"pytest_add_cli_args_test_selection = {_toml_list(target.tests)}",
        "use_git_change_detection = false",
        'on_dependency_change = "ignore"',
        "",
    ])


def _symlink(link: Path, to: Path) -> None:
    if link.is_symlink() and Path(os.readlink(link)) == to:
        return
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(to, target_is_directory=True)


def stage(target: Target) -> Path:
    """Create or refresh the work directory of *target*; return it."""
    work = WORK / target.module
    (work / "src").mkdir(parents=True, exist_ok=True)
    for package, where in PACKAGE_DIRS.items():
        _symlink(work / "src" / package, ROOT / where / package)
    for name in ("tests", "sim", "docs"):
        _symlink(work / name, ROOT / name)
    config = (ROOT / "pyproject.toml").read_text() + mutmut_table(target)
    path = work / "pyproject.toml"
    if not path.exists() or path.read_text() != config:
        path.write_text(config)
    return work


def _tests_digest(target: Target) -> str:
    digest = hashlib.sha256()
    for test in target.tests:
        digest.update(test.encode() + b"\0" + (ROOT / test).read_bytes())
    return digest.hexdigest()


def _not_killed(work: Path, target: Target) -> list[str]:
    """Mutants of the last run that survived or that no test reached."""
    meta = work / "mutants" / ("src/" + target.source.split("/", 1)[1] + ".meta")
    if not meta.exists():
        return []
    codes = json.loads(meta.read_text())["exit_code_by_key"]
    return sorted(name for name, code in codes.items() if code in (0, 5, 33))


def _mutmut(work: Path, args: list[str], deadline: float | None) -> bool:
    """Run ``mutmut run ARGS`` in *work*; False if the deadline stopped it."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    # mutmut forks a child per mutant from a process that has run the tests: a torch (or
    # BLAS) thread pool started there does not survive the fork, and a child that reaches
    # it hangs until mutmut's timeout, which the report would count as a kill
    env |= {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "mutmut", "run", *args], cwd=work, env=env,
                            start_new_session=True)
    try:
        returncode = proc.wait(timeout=None if deadline is None
                               else max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)  # mutmut and the mutants it forked
        proc.wait()
        return False
    except BaseException:
        os.killpg(proc.pid, signal.SIGTERM)
        raise
    if returncode:
        raise SystemExit(f"mutate: mutmut failed in {work} (exit {returncode}); "
                         "see the output above")
    return True


def run(target: Target, jobs: int, budget: float | None = None) -> float:
    """Run mutmut for *target*; return the wall-clock seconds it took.

    mutmut itself only tries mutants without a verdict (new, or of changed functions); when
    the module's test files or its source changed since the last complete run, the mutants
    that were not killed are tried again as well (after a change of the source, with
    mutmut's record of which tests reach which function taken anew). With *budget*
    (minutes) the run is stopped after that long; the verdicts reached are kept (mutmut
    saves each as it comes) and the next run goes on with the rest.
    """
    work = stage(target)
    print(f"== {target.module}: mutmut in {work.relative_to(ROOT)} ({jobs} processes"
          f"{f', at most {budget:g} min' if budget else ''})", flush=True)
    start = time.monotonic()
    deadline = start + budget * 60 if budget else None
    jobs_args = ["--max-children", str(jobs)]
    # mutmut records which tests reach which function once (mutmut-stats.json) and, with
    # on_dependency_change = "ignore", never again: a function added to the source since
    # would have "no tests". A changed source drops the record, so mutmut takes it anew.
    source_digest = hashlib.sha256((ROOT / target.source).read_bytes()).hexdigest()
    source_stamp = work / "source.sha256"
    source_changed = not source_stamp.exists() or source_stamp.read_text() != source_digest
    if source_changed:
        (work / "mutants" / "mutmut-stats.json").unlink(missing_ok=True)
    digest, stamp = _tests_digest(target), work / "tests.sha256"
    complete = _mutmut(work, jobs_args, deadline)
    if complete and (source_changed or not stamp.exists() or stamp.read_text() != digest):
        again = _not_killed(work, target)
        if again:
            print(f"\n== {target.module}: tests or source changed, trying {len(again)} "
                  "mutants that were not killed again", flush=True)
            complete = _mutmut(work, [*jobs_args, *again], deadline)
        if complete:
            stamp.write_text(digest)
    if complete:
        source_stamp.write_text(source_digest)
    else:
        print(f"\n== {target.module}: stopped after {budget:g} min (budget)", flush=True)
    seconds = time.monotonic() - start
    (work / "last_run_seconds").write_text(f"{seconds:.1f}\n")
    return seconds


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", metavar="MODULE",
                        help=f"modules to mutate (default: all of {', '.join(TARGETS)})")
    parser.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1,
                        help="mutants run in parallel (default: the number of cores)")
    parser.add_argument("--budget", type=float, metavar="MINUTES",
                        help="stop each module's run after this long (go on next time)")
    args = parser.parse_args(argv)
    unknown = [m for m in args.modules if m not in TARGETS]
    if unknown:
        parser.error(f"not a mutation target: {', '.join(unknown)} "
                     f"(targets: {', '.join(TARGETS)})")
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, not {args.jobs}")
    modules = args.modules or list(TARGETS)
    for module in modules:
        run(TARGETS[module], args.jobs, args.budget)
    from tests.mutation.report import main as report

    return report(modules)


if __name__ == "__main__":
    sys.exit(main())
