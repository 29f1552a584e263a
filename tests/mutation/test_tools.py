"""The mutation-testing scripts' own pieces: targets, mutmut configuration, report parsing."""

import tomllib
from pathlib import Path

import pytest

from tests.mutation.equivalent import EQUIVALENT, REASONS
from tests.mutation.mutate import mutmut_table
from tests.mutation.report import _changed_line, _function_name, _function_span
from tests.mutation.targets import TARGETS

ROOT = Path(__file__).resolve().parents[2]


def test_targets_name_real_files():
    for target in TARGETS.values():
        assert (ROOT / target.source).is_file(), target.source
        assert target.tests and all((ROOT / t).is_file() for t in target.tests), target.module
    assert TARGETS["npu.nac.decoder"].source == "hw/npu/nac/decoder.py"
    assert (TARGETS["nem.numerics"].target_score, TARGETS["npu.nac.mmap"].target_score) == (
        0.9, 0.8)


def test_mutmut_table_mutates_one_file_against_its_tests():
    target = TARGETS["nac.schedule"]
    table = tomllib.loads(mutmut_table(target))["tool"]["mutmut"]
    assert table["only_mutate"] == ["src/nac/schedule.py"]
    assert table["source_paths"] == ["src/nac", "src/nem", "src/npu"]
    assert table["pytest_add_cli_args_test_selection"] == list(target.tests)
    assert "--hypothesis-seed=0" in table["pytest_add_cli_args"]


def test_report_finds_function_and_changed_line():
    source = "class C:\n    def f(self):\n        a = 1\n        return a\n\n\ndef g():\n" \
             "    return 2\n"
    assert _function_name("m.xǁCǁf__mutmut_3") == ("C", "f")
    assert _function_name("m.x_g__mutmut_12") == (None, "g")
    assert _function_span(source, "C", "f") == (2, 4)
    assert _function_span(source, None, "g") == (7, 8)
    diff = "--- a\n+++ a\n@@ -1,3 +1,3 @@\n def f(self):\n-    return a\n+    return None\n"
    assert _changed_line(source, (2, 4), diff) == 4


def test_equivalents_have_known_reasons():
    assert set(EQUIVALENT.values()) <= set(REASONS.values())
    assert all(name.split(".x")[0] in TARGETS for name in EQUIVALENT)


def test_rtl_equivalents_are_read_per_line_with_clear_errors(tmp_path):
    from tests.mutation import equivalent

    assert equivalent.RTL_DIR.is_dir()
    for path in equivalent.RTL_DIR.glob("*.tsv"):
        assert path.stem in TARGETS, path.name
        for line in path.read_text(encoding="utf-8").splitlines():
            assert line.split("\t")[0].startswith(path.stem + ".x"), line
    (tmp_path / "m.tsv").write_text("npu.m.x_f__mutmut_1\tgroup\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"m.tsv:1: expected name<TAB>group<TAB>reason"):
        equivalent._load_rtl(tmp_path)
    name = next(iter(equivalent.EQUIVALENT))
    (tmp_path / "m.tsv").write_text(f"\n{name}\tg\treason\n", encoding="utf-8")
    with pytest.raises(ValueError, match=rf"m.tsv:2: {name} is listed twice"):
        equivalent._load_rtl(tmp_path)
