"""Resolved devices: the values inheritance gives (Inheritance Rules 1-8), read back.

The corpus checks which diagnostics device files give; this module checks what the resolved
:class:`nem.device.Device` holds, with expectations written from the spec's text: the MUST
table of "MUST Variant Reference", the worked device examples and their "Effective set"
sentences.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from nem.device import BASELINE_NAMES
from nem.diagnostics import Span
from nem.loader import load, load_text

EXAMPLES = Path(__file__).parent / "examples"
HERE = Span("test", 1, 1)

# nem.md, "MUST Variant Reference (Informative)": the 17 MUST-class variants.
MUST_TABLE = {
    "gemm.int8<i8>.no_bias",
    "gemm.int8<i8>.with_bias",
    "gemm.float<f16>.no_bias",
    "gemm.float<f16>.with_bias",
    "conv2d.int8<i8>.no_bias",
    "conv2d.int8<i8>.with_bias",
    "conv2d.float<f16>.no_bias",
    "conv2d.float<f16>.with_bias",
    "eltwise<i8>.default",
    "eltwise<f16>.default",
    "view<i8>.default",
    "view<f16>.default",
    "norm<f16>.default",
    "softmax<f16>.default",
    "cast.default",
    "quantize<f16, i8>.default",
    "dequantize<i8, f16>.default",
}


def _resolve(text: str, name: str):
    ws = load_text(text, "dev.nem", str(EXAMPLES))
    dev = ws.resolve(name, HERE, need_topology=False)
    return dev, ws.sink.items


@pytest.mark.parametrize("spelling", BASELINE_NAMES)
def test_baseline_is_the_must_table(spelling):
    dev, diags = _resolve('include "npm_baseline_1.0.nem"\n', spelling)
    assert diags == []
    assert dev.mandatory == MUST_TABLE
    assert dev.extended == frozenset()
    assert not dev.concrete  # abstract: no topology
    assert dev.spec_version == "NEM-1.0"


def test_npm_mid_example_effective_set():
    ws = load(EXAMPLES / "spec_device_npm_mid.nem")
    dev = ws.resolve("npm_mid", HERE)
    assert ws.sink.items == []
    # "Effective set: inherited MUST + device-specific BF16 variants in opcode.mandatory."
    bf16 = {
        "gemm.float<bf16>.no_bias",
        "conv2d.float<bf16>.no_bias",
        "conv2d.float<bf16>.with_bias",
        "eltwise<bf16>.default",
        "view<bf16>.default",
    }
    assert dev.mandatory == MUST_TABLE | bf16
    assert dev.effective == MUST_TABLE | bf16
    assert (dev.num_engines, dev.l2_size_bytes, dev.l1_size_bytes) == (2, 4194304, 1048576)
    assert dev.per_engine == {"NMU": 1, "CSTL": 2, "DMA": 2, "VPU": 1, "SEQ": 1}
    assert dev.device_units == {"sDMA": 2, "WDM": 2}
    assert dev.characteristic("SEQ", "max_active_tokens") == 16
    assert dev.characteristic("NMU", "int4_macs") == 16384


def test_sku_extending_npm_pro():
    # nem.md's "SKU extending base device": npm_pro_x1 inherits every field of npm_pro and
    # its opcode.extended is the union {gemm f32, conv2d f32, eltwise f32}.
    text = """include "spec_device_npm_pro.nem"
device npm_pro_x1 extends npm_pro {
    opcode.extended {
        conv2d.float<f32>.no_bias
        eltwise<f32>.default
    }
}
"""
    ws = load_text(text, "x1.nem", str(EXAMPLES))
    pro = ws.resolve("npm_pro", HERE)
    x1 = ws.resolve("npm_pro_x1", HERE)
    assert ws.sink.items == []
    assert x1.extended == {
        "gemm.float<f32>.no_bias",
        "conv2d.float<f32>.no_bias",
        "eltwise<f32>.default",
    }
    assert x1.mandatory == pro.mandatory
    assert x1.spec_version == pro.spec_version
    assert x1.num_engines == 4
    assert x1.per_engine == pro.per_engine
    assert x1.device_units == {"sDMA": 4, "WDM": 4}
    assert x1.unit_characteristics == pro.unit_characteristics
    # The example says nem_baseline_1_0; the shipped file declares npm_baseline_1_0.
    assert x1.chain[:2] == ("npm_pro_x1", "npm_pro")
    assert x1.chain[2] in BASELINE_NAMES


def test_unit_characteristics_merge_and_unknown_keys_are_kept():
    # Inheritance Rule 4: child keys override, parent keys stay, unit groups are united;
    # unknown keys "MUST be preserved by tools".
    text = """include "npm_baseline_1.0.nem"
device p extends npm_baseline_1_0 {
    unit_characteristics {
        NMU {
            int8_macs = 100
            fp16_macs = 50
        }
        SEQ {
            max_active_tokens = 4
        }
    }
}
device c extends p {
    unit_characteristics {
        NMU {
            int8_macs = 200
            sparsity_ratio = 2
        }
        CSTL {
            vendor_lanes = 64
        }
    }
}
"""
    dev, diags = _resolve(text, "c")
    assert diags == []
    assert dev.unit_characteristics == {
        "NMU": {"int8_macs": 200, "fp16_macs": 50, "sparsity_ratio": 2},
        "SEQ": {"max_active_tokens": 4},
        "CSTL": {"vendor_lanes": 64},
    }


def test_topology_is_replaced_not_merged():
    # Inheritance Rule 3: the child's topology replaces the parent's entirely.
    text = """include "spec_device_npm_pro.nem"
device small extends npm_pro {
    topology {
        num_engines = 1
        l2_size_bytes = 4096
        per_engine {
            CSTL = 1
            l1_size_bytes = 1024
        }
    }
}
"""
    dev, diags = _resolve(text, "small")
    assert diags == []
    assert dev.per_engine == {"CSTL": 1}
    assert dev.device_units == {}  # "If device_units is absent, the device has none."
    assert dev.units("NMU") == 0 and dev.units("sDMA") == 0
    assert (dev.num_engines, dev.l2_size_bytes, dev.l1_size_bytes) == (1, 4096, 1024)


def test_duplicate_in_extended_is_ignored():
    # Schema Rule 4: a binder "MUST ignore the redundant entry" (with a warning).
    text = """include "npm_baseline_1.0.nem"
device d extends npm_baseline_1_0 {
    opcode.extended {
        eltwise<i8>.default
        eltwise<f32>.default
    }
}
"""
    dev, diags = _resolve(text, "d")
    assert [d.code for d in diags] == ["W401"]
    assert dev.extended == {"eltwise<f32>.default"}
    assert "eltwise<i8>.default" in dev.mandatory
