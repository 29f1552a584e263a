"""The cycle model of CSTL int8 tasks: ``latency_cycles + ceil(bytes / elems_per_cycle)``
with both read from the device's ``unit_characteristics`` (nem.cycles), the bytes those of
the largest operand (a pool: every window tap of every output)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from nem.checker import check_text
from nem.executor import execute

PROGRAMS = Path(__file__).with_name("programs")


def _device(tmp_path, per_cycle):
    base = (PROGRAMS / "exec_device.nem").read_text()
    head = "    unit_characteristics {\n"
    assert head in base
    text = base.replace(head, head + (f"        CSTL {{\n            elems_per_cycle = {per_cycle}"
                                      "\n            latency_cycles = 3\n        }\n"))
    path = tmp_path / "dev.nem"
    path.write_text(text)
    return path


@pytest.mark.parametrize("per_cycle", [8, 16])
@pytest.mark.parametrize("task, nbytes", [
    ("relu.async in x out y", 600),
    ("add.async in x, x out y", 600),
    ("cast.async in x out w", 2400),  # i8 -> i32: four output bytes per element
    ("maxpool.async in x out p kernel_shape=[2, 2] strides=[2, 2] pads=[0, 0, 0, 0]",
     1 * 5 * 5 * 6 * 4),
])  # fmt: skip
def test_cstl_int8_cycles_come_from_the_device(tmp_path, per_cycle, task, nbytes):
    dev = _device(tmp_path, per_cycle)
    text = f"""device "{dev.name}"
buffer X : L1 (size=600)
buffer Y : L1 (size=600)
buffer W : L1 (size=2400)
buffer P : L1 (size=150)
let x = region(X, 0, 600) elem=i8, shape=[1, 10, 10, 6], layout=NHWC,
    quant=per_tensor(scale=0.1, zero_point=2)
let y = region(Y, 0, 600) elem=i8, shape=[1, 10, 10, 6], layout=NHWC,
    quant=per_tensor(scale=0.2, zero_point=-1)
let w = region(W, 0, 2400) elem=i32, shape=[1, 10, 10, 6], layout=NHWC
let p = region(P, 0, 150) elem=i8, shape=[1, 5, 5, 6], layout=NHWC,
    quant=per_tensor(scale=0.1, zero_point=2)
t = {task}
wait(t)
"""
    result = check_text(text, file="c.nem", base_dir=str(tmp_path))
    assert result.ok, [str(d) for d in result.diagnostics]
    (record,) = execute(result.plan, result.device, {}).records
    assert ".CSTL[" in record.unit
    assert record.end - record.start == 3 + math.ceil(nbytes / per_cycle)
