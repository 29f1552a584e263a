"""The three name tables: element types (``nem.elemtypes``), unit types (``nem.units``) and
coded opcodes with their groups (``nem.opcodes``).

The codes below are written out by hand on purpose: they are the numbers the task binary
stores (the ``OPk_ELEM`` and ``elem_type`` words, the task header's ``unit`` byte, the
``OPCODE`` register), so every binary already written -- the golden files in
``tests/golden/`` among them -- depends on them. A table edit that renumbers one must fail
here. Bit widths, type sets and unit names are copied from ``nem.md``; the registry's
categories and units are read from ``opcodes.yaml`` with plain YAML, not through
``nem.registry``.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import resources

import numpy as np
import pytest
import yaml

from nem import elemtypes, opcodes, units
from nem.ops import BINARY, UNARY, UNSUPPORTED
from nem.taskformat import ELEM_TYPES, OPCODES, REGISTER_MAPS, Unit

# --- element types ------------------------------------------------------------------------

#: The task binary's element type codes.
ELEM_CODES = {"i4": 0, "i8": 1, "u8": 2, "i16": 3, "u16": 4, "i32": 5, "u32": 6, "f16": 7,
              "bf16": 8, "f32": 9}  # fmt: skip
#: nem.md, "Element Bitwidth".
SPEC_BITS = {"i4": 4, "i8": 8, "u8": 8, "i16": 16, "u16": 16, "f16": 16, "bf16": 16,
             "i32": 32, "u32": 32, "f32": 32}  # fmt: skip


def test_element_type_codes_are_the_binarys():
    assert {t.name: t.code for t in elemtypes.TABLE} == ELEM_CODES
    assert ELEM_TYPES == tuple(sorted(ELEM_CODES, key=ELEM_CODES.get))
    for name, code in ELEM_CODES.items():
        assert elemtypes.by_code(code).name == name
        assert elemtypes.elem_type(name).code == code


def test_element_types_follow_the_spec():
    assert elemtypes.BITS == SPEC_BITS
    # nem.md, "Element Types": signed integers, unsigned integers, floating point
    assert {t.name for t in elemtypes.TABLE if t.is_int and t.signed} == {"i4", "i8", "i16", "i32"}
    assert {t.name for t in elemtypes.TABLE if t.is_int and not t.signed} == {"u8", "u16", "u32"}
    assert set(elemtypes.FLOAT_TYPES) == {"f16", "bf16", "f32"}
    assert set(elemtypes.INT_TYPES) | set(elemtypes.FLOAT_TYPES) == set(ELEM_TYPES)
    assert not set(elemtypes.INT_TYPES) & set(elemtypes.FLOAT_TYPES)


def test_numpy_dtypes_hold_the_bits():
    for t in elemtypes.TABLE:
        dt = elemtypes.dtypes()[t.name]
        assert dt == t.dtype
        assert dt.byteorder in ("<", "|", "=")
        if t.bits >= 8:
            assert dt.itemsize * 8 == t.bits, t.name
        else:  # i4 is held unpacked, one element per int8
            assert dt == np.dtype(np.int8)
        if t.is_int:
            assert dt.kind == ("i" if t.signed else "u"), t.name
    assert elemtypes.dtypes()["bf16"].name == "bfloat16"
    assert elemtypes.dtypes()["f16"] == np.float16 and elemtypes.dtypes()["f32"] == np.float32


def test_integer_ranges_match_numpy():
    for name in elemtypes.INT_TYPES:
        lo, hi = elemtypes.ELEM_RANGES[name]
        if name == "i4":
            assert (lo, hi) == (-8, 7)  # a two's complement nibble
        else:
            info = np.iinfo(elemtypes.dtypes()[name])
            assert (lo, hi) == (info.min, info.max), name
    with pytest.raises(ValueError, match="f32 is a float type"):
        _ = elemtypes.elem_type("f32").range


def test_element_type_lookups_name_the_bad_value():
    with pytest.raises(KeyError, match=r"unknown element type 'i64' \(known: i4, i8, u8"):
        elemtypes.elem_type("i64")
    with pytest.raises(ValueError, match=r"element type code 10 unknown \(0\.\.9\)"):
        elemtypes.by_code(10)


# --- units --------------------------------------------------------------------------------

#: The task header's unit codes.
UNIT_CODES = {"DMA": 0, "sDMA": 1, "NMU": 2, "CSTL": 3, "VPU": 4}


def test_unit_codes_are_the_binarys():
    assert {u.name: u.code for u in units.TABLE if u.code is not None} == UNIT_CODES
    assert [(u.name, int(u)) for u in Unit] == [
        ("DMA", 0), ("SDMA", 1), ("NMU", 2), ("CSTL", 3), ("VPU", 4)
    ]
    assert units.UNIT_CODES == {name: Unit(code) for name, code in UNIT_CODES.items()}
    assert {units.UNIT_NAMES[Unit(code)] for code in UNIT_CODES.values()} == set(UNIT_CODES)


def test_units_follow_the_spec():
    # nem.md, "Execution Units" and "@resource"
    assert units.PER_ENGINE_UNITS == ("NMU", "CSTL", "DMA", "VPU", "SEQ")
    assert units.DEVICE_UNITS == ("sDMA", "WDM")
    assert units.RESOURCE_TARGETS == ("NMU", "CSTL", "DMA", "VPU")
    assert units.RESOURCE_INVALID == ("SEQ", "sDMA", "WDM")
    assert units.COPY_UNITS == (Unit.DMA, Unit.SDMA)
    assert units.COMPUTE_UNITS == (Unit.NMU, Unit.CSTL, Unit.VPU)
    with pytest.raises(KeyError, match="unknown unit type 'TPU'"):
        units.unit_type("TPU")


def test_each_unit_reads_the_register_map_of_its_role():
    assert set(REGISTER_MAPS) == set(Unit)
    for unit in units.COPY_UNITS:
        assert REGISTER_MAPS[unit].index("SRC_LO") == 0
    for unit in units.COMPUTE_UNITS:
        assert REGISTER_MAPS[unit].index("OPCODE") == 0


def test_cycle_model_has_defaults_for_every_unit_that_runs_tasks():
    from nem.cycles import DEFAULTS

    assert set(DEFAULTS) == set(units.UNIT_CODES)


def test_every_registry_unit_is_in_the_table():
    for name, spec in _raw_registry().items():
        unit = spec.get("execution_unit")
        if unit is not None:
            assert units.unit_type(unit).runs_tasks, name


# --- opcodes ------------------------------------------------------------------------------

#: A few of the task binary's OPCODE values (the whole list is append-only).
SOME_OPCODE_CODES = {"gemm": 0, "matmul": 1, "conv2d": 2, "relu": 3, "leaky_relu": 4,
                     "clamp": 14, "add": 15, "pow": 21, "maxpool": 22, "log_softmax": 27,
                     "transpose": 28, "gather": 34, "cast": 35, "dequantize": 37,
                     "reduce_sum": 38, "argmin": 42}  # fmt: skip


def _raw_registry() -> dict:
    text = resources.files("nem").joinpath("data", "opcodes.yaml").read_text("utf-8")
    return yaml.safe_load(text)["opcodes"]


def test_opcode_codes_are_the_binarys():
    assert len(OPCODES) == 43 and len(set(OPCODES)) == 43
    for name, code in SOME_OPCODE_CODES.items():
        assert OPCODES[code] == name
        assert opcodes.opcode_code(name) == code
    assert [r.code for r in opcodes.table()] == list(range(len(OPCODES)))
    with pytest.raises(KeyError, match="'conv1d' has no task-binary code"):
        opcodes.opcode_code("conv1d")


def test_opcode_table_agrees_with_the_registry_file():
    raw = _raw_registry()
    for row in opcodes.table():
        assert row.category == raw[row.name]["category"], row.name
        assert row.unit == raw[row.name]["execution_unit"], row.name
    # every compute opcode of the registry has a code or an executor refusal
    compute = {n for n, spec in raw.items() if spec["category"] != "data_movement"}
    assert compute == set(OPCODES) | set(UNSUPPORTED)


def test_groups_follow_the_registry():
    g = opcodes.groups()
    raw = _raw_registry()

    def cat(*names):
        return {n for n in OPCODES if raw[n]["category"] in names}

    # nem.md, "Resource Classes and Task Mapping": linear algebra and convolutions -> NMU
    assert g.nmu == {"gemm", "matmul", "conv2d"}
    assert g.unary == cat("elementwise_unary") and "relu" in g.unary
    assert g.binary == cat("elementwise_binary") and "add" in g.binary
    assert g.other_eltwise == {"clamp"}
    assert g.eltwise == g.unary | g.binary | g.other_eltwise
    assert g.pooling == {"maxpool", "avgpool"}
    assert g.normalization == {"layernorm", "rmsnorm"}
    assert g.softmax == {"softmax", "log_softmax"}
    assert g.layout == {"transpose", "reshape", "slice", "concat", "split", "pad", "gather"}
    assert g.conversion == {"cast", "quantize", "dequantize"}
    assert g.reduction == {"reduce_sum", "reduce_max", "reduce_min", "argmax", "argmin"}
    # the category groups and the NMU's opcodes cover every coded opcode exactly once
    parts = [g.nmu, g.eltwise, g.pooling, g.normalization, g.softmax, g.layout,
             g.conversion, g.reduction]  # fmt: skip
    assert sum(len(p) for p in parts) == len(OPCODES)
    assert set().union(*parts) == set(OPCODES)
    assert opcodes.groups() is g  # cached


def test_executor_kernels_cover_the_elementwise_groups():
    g = opcodes.groups()
    assert set(UNARY) == g.unary | g.other_eltwise
    assert set(BINARY) == g.binary


def test_importing_the_tables_loads_no_registry_and_no_numpy():
    code = (
        "import sys, nem.taskformat, nem.opcodes, nem.units, nem.elemtypes, nem.checker\n"
        "bad = [m for m in ('numpy', 'ml_dtypes') if m in sys.modules]\n"
        "from nem.registry import _default_registry\n"
        "assert _default_registry.cache_info().currsize == 0\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
