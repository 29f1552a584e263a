"""Carry the listed equivalent mutants of a module across an edit of its source.

mutmut numbers a function's mutants in the order it finds them (``..._mutmut_17`` is the
17th), so a change that adds or removes mutants early in a function shifts the numbers of
every later one, and ``equivalent_rtl/<module>.tsv`` names the wrong mutants. This tool
enumerates the mutants of the old source (a git revision) and of the file as it is now
with mutmut's own generator, identifies each by what it changes (the unified diff of the
mutated function against the original, two lines of context, no line numbers; failing
that, the changed lines alone) and rewrites the module's ``.tsv`` with the new numbers.

A listed mutant whose change no longer exists, or now exists more than once, is not
carried: it is printed and left out of the rewritten file (a mutant the edit touched is a
new mutant and goes through ``make mutate`` again). Nothing is written with ``--check``.

Needs the ``mutate`` extra (mutmut). Run:
``python tests/mutation/renumber.py npu.nmu.agu_step --since HEAD [--check]``.
"""

from __future__ import annotations

import argparse
import difflib
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RTL_DIR = Path(__file__).resolve().parent / "equivalent_rtl"


def _source_path(module: str) -> Path:
    """The file of a module of the hardware tree (``npu.x.y`` -> ``hw/npu/x/y.py``)."""
    path = REPO / "hw" / Path(*module.split(".")).with_suffix(".py")
    if not path.is_file():
        raise SystemExit(f"renumber: no source file {path.relative_to(REPO)} for {module}")
    return path


def mutant_keys(module: str, code: str) -> dict[str, tuple]:
    """Map each mutant's name (as mutmut names it) to what it changes.

    Parameters
    ----------
    module : str
        Dotted module name (the mutant names' prefix).
    code : str
        The module's source.

    Returns
    -------
    dict
        ``name -> (function, diff)``; ``diff`` is the mutated function's unified diff
        against the original without its line numbers.
    """
    import libcst as cst
    from mutmut.mutation.file_mutation import create_mutations, deep_replace

    # mutmut reads its configuration from the working directory once: an empty one
    # (no patterns left unmutated, as in ``mutate.py``'s table)
    here = os.getcwd()
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "pyproject.toml").write_text('[tool.mutmut]\nsource_paths = ["."]\n')
        os.chdir(tmp)
        try:
            module_node, mutations, _, _ = create_mutations(module, code)
        finally:
            os.chdir(here)
    classes = {}
    for stmt in module_node.body:
        if isinstance(stmt, cst.ClassDef) and isinstance(stmt.body, cst.IndentedBlock):
            for item in stmt.body.body:
                classes[id(item)] = stmt.name.value
    order: dict[int, list] = {}
    for mutation in mutations:
        fn = mutation.contained_by_top_level_function
        if isinstance(fn, cst.FunctionDef):     # mutmut leaves class attributes alone
            order.setdefault(id(fn), [fn, []])[1].append(mutation)
    keys = {}
    for fn, group in order.values():
        cls = classes.get(id(fn))
        mangled = (f"xǁ{cls}ǁ{fn.name.value}" if cls else f"x_{fn.name.value}") + "__mutmut"
        original = module_node.code_for_node(fn).splitlines()
        for i, mutation in enumerate(group, 1):
            mutated = deep_replace(fn, mutation.original_node, mutation.mutated_node)
            diff = [line for line in difflib.unified_diff(
                original, module_node.code_for_node(mutated).splitlines(), n=2, lineterm="")
                if not line.startswith(("@@", "---", "+++"))]
            keys[f"{module}.{mangled}_{i}"] = (fn.name.value, tuple(diff))
    return keys


def renumber(module: str, since: str, *, check: bool = False) -> int:
    """Rewrite ``equivalent_rtl/<module>.tsv`` for the source as it is now.

    Returns the number of listed mutants that could not be carried over.
    """
    path = _source_path(module)
    rel = path.relative_to(REPO).as_posix()
    try:
        old_code = subprocess.run(["git", "show", f"{since}:{rel}"], cwd=REPO, check=True,
                                  capture_output=True, text=True).stdout
    except subprocess.CalledProcessError as exc:
        raise SystemExit(f"renumber: git show {since}:{rel}: {exc.stderr.strip()}") from None
    tsv = RTL_DIR / f"{module}.tsv"
    if not tsv.is_file():
        raise SystemExit(f"renumber: no {tsv.relative_to(REPO)}")
    old, new = mutant_keys(module, old_code), mutant_keys(module, path.read_text())
    # first by the change with its context; a mutant next to the edit has other context
    # lines now, so then by the changed lines alone (when no other mutant makes them)
    views = [lambda key: key,
             lambda key: (key[0], tuple(x for x in key[1] if x[:1] in "+-"))]
    indexes = []
    for view in views:
        by_key: dict[tuple, list[str]] = {}
        for name, key in new.items():
            by_key.setdefault(view(key), []).append(name)
        indexes.append((view, by_key, Counter(view(k) for k in old.values())))
    lines, lost, moved = [], 0, 0
    for number, line in enumerate(tsv.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        name, rest = line.split("\t", 1)
        key, target, why = old.get(name), None, "not a mutant of the old source"
        for view, by_key, counts in indexes if key is not None else ():
            targets = by_key.get(view(key), [])
            if counts[view(key)] == 1 and len(targets) == 1:
                target = targets[0]
                break
            why = (f"its change is made by {counts[view(key)]} old and {len(targets)} new "
                   f"mutants")
        if target is None:
            print(f"{tsv.name}:{number}: {name}: not carried ({why})")
            lost += 1
            continue
        moved += target != name
        lines.append(f"{target}\t{rest}")
    print(f"{module}: {len(old)} -> {len(new)} mutants; {len(lines)} listed equivalents "
          f"carried ({moved} renumbered), {lost} not")
    if not check:
        tsv.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return lost


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="renumber.py", description=__doc__.split("\n")[0])
    parser.add_argument("module", help="dotted module name, e.g. npu.nmu.agu_step")
    parser.add_argument("--since", default="HEAD",
                        help="git revision the .tsv was written for (default HEAD)")
    parser.add_argument("--check", action="store_true", help="report only, write nothing")
    args = parser.parse_args(argv)
    return 1 if renumber(args.module, args.since, check=args.check) else 0


if __name__ == "__main__":
    sys.exit(main())
