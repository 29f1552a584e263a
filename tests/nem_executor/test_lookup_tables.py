"""The lookup tables of the CSTL's i8 table tasks are exact: for every unary opcode (and
clamp) and several quantisation descriptors, the table the binder puts in the data section
equals, for all 256 input codes, the executor's real-valued formula (dequantise, the
float64 kernel, round half to even, saturate), and the executor's result on all 256 codes
(read back through the task binary) equals the table. For the piecewise-linear opcodes the
formula is also checked against exact rational arithmetic (power-of-two scales).
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from nem.binder import bind, plan_from_binary
from nem.checker import check_text
from nem.executor import execute
from nem.numerics import QuantParams, dequantize_codes, quantize_real
from nem.ops import UNARY, table_opcodes
from nem.taskformat import REGISTER_MAPS, Unit, decode, decode_table, encode

PROGRAMS = Path(__file__).with_name("programs")
TABLE = REGISTER_MAPS[Unit.CSTL].index("TABLE")
DESCRIPTORS = [None, (0.05, 3), (0.0078125, -128), (0.5, 0), (0.2, 127)]
ATTRS = {"leaky_relu": ({"alpha": 0.125}, "alpha=0.125"),
         "clamp": ({"min_val": -0.5, "max_val": 1.0}, "min_val=-0.5 max_val=1.0")}
#: Exact real-valued definitions of the piecewise-linear opcodes (Fractions).
EXACT = {
    "relu": lambda x: max(x, 0),
    "leaky_relu": lambda x: x if x >= 0 else x / 8,
    "abs": abs,
    "neg": lambda x: -x,
    "clamp": lambda x: min(max(x, Fraction(-1, 2)), Fraction(1)),
}


def _q(d):
    return "" if d is None else f", quant=per_tensor(scale={d[0]!r}, zero_point={d[1]})"


def _qp(d):
    return None if d is None else QuantParams(np.array([d[0]]), np.array([d[1]]))


@pytest.mark.parametrize("op", sorted(table_opcodes()))
@pytest.mark.parametrize("dx, dy", [(a, b) for a in DESCRIPTORS[:3] for b in DESCRIPTORS[2:]])
def test_table_equals_the_formula_on_every_code(op, dx, dy):
    attrs, text_attrs = ATTRS.get(op, ({}, ""))
    text = f"""device "exec_device.nem"
buffer X : L1 (size=256)
buffer Y : L1 (size=256)
let x = region(X, 0, 256) elem=i8, shape=[256], layout=N{_q(dx)}
let y = region(Y, 0, 256) elem=i8, shape=[256], layout=N{_q(dy)}
t = {op}.async in x out y {text_attrs}
wait(t)
"""
    result = check_text(text, file="t.nem", base_dir=str(PROGRAMS))
    assert result.ok, [str(d) for d in result.diagnostics]
    program = decode(encode(bind(result)))
    (task,) = program.tasks
    table = np.array(decode_table(program.data, dict(task.writes)[TABLE]))
    codes = np.arange(256).astype(np.uint8).view(np.int8)  # code of byte b at b
    with np.errstate(all="ignore"):
        formula = quantize_real(UNARY[op](dequantize_codes(codes, _qp(dx)), attrs), "i8",
                                _qp(dy))
    np.testing.assert_array_equal(table, formula)
    run = execute(plan_from_binary(program, result.device), result.device,
                  {"X": codes.view(np.uint8)}, in_order=True)
    np.testing.assert_array_equal(run.memory.buffer("Y").view(np.int8), table)
    sx, zx = (1.0, 0) if dx is None else dx
    sy, zy = (1.0, 0) if dy is None else dy
    # float64 is exact for these opcodes when both scales are powers of two (0.05 / 0.2 are
    # not: the float division can land on a tie the exact value misses)
    if op in EXACT and all(float(s).hex().startswith(("0x1.0000000000000p", "0x0"))
                           for s in (sx, sy)):
        exact = [min(max(round(EXACT[op](Fraction(sx) * (int(c) - zx)) / Fraction(sy)) + zy,
                         -128), 127) for c in codes]
        np.testing.assert_array_equal(table, exact)
