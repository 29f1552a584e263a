"""Mutants that cannot change behaviour, each with the reason (``docs/testing.md`` lists them).

Keys are mutmut's mutant names (``module.x_function__mutmut_N``; methods
``module.xǁClassǁmethod__mutmut_N``). mutmut numbers the mutants of a function afresh when
the function changes; ``report.py`` flags an entry that no longer names a surviving mutant,
so a stale entry is noticed at the next run.
"""

from __future__ import annotations

__all__ = ["EQUIVALENT", "REASONS"]

#: Why a group of mutants is equivalent; docs/testing.md explains each with an example.
REASONS = {
    "int64-promotion": (
        "an explicit int64 cast dropped where numpy promotes to int64 anyway: the other "
        "operand (or the array the value is stored into) is int64, Python ints become int64, "
        "and a sum of int8 values accumulates in int64"),
    "float-promotion": (
        "an explicit float64 cast (or astype(None), which is float64) dropped where the "
        "value is divided by or compared with float64 values, so the result is the same"),
    "float-accumulator": (
        "the conv2d accumulator starts as float64 instead of int64: every partial sum of "
        "int8 products stays far below 2**53, so it is exact, and the result is checked and "
        "cast to int32 as before"),
    "default-int": (
        "np.array of Python ints is int64 without dtype= (numpy >= 2 on every platform)"),
    "inner-clip": (
        "quantize_real's inner clip to +-2**40 only keeps rint and the zero-point add in "
        "range; the outer clip to the element type saturates the same way when it is "
        "widened or removed (+-inf saturates too)"),
    "unsigned-qmin": (
        "every activation type has qmin <= 0, so '0 if qmin < 0 else qmin' is 0 whatever "
        "the comparison"),
    "no-invalid": (
        "nothing in round_float's bf16 block raises 'invalid' (casting or comparing NaN "
        "does not), so ignoring it or not makes no difference"),
    "race-window": (
        "widens the set of candidate ranges the race search visits; the 'hi <= acc.lo' test "
        "and the bitset intersections drop the extra ones"),
    "race-redundant-bitset": (
        "the writers/readers bitsets only pre-filter: the per-statement node sets and the "
        "'o.write or acc.write' test decide, so a phantom node 0 or an unfiltered clash "
        "finds nothing more"),
    "race-first-instance": (
        "the first unordered instance of a statement always yields a race partner (one "
        "task is one statement, and a clashing node wrote, or the access writes), so the "
        "loop never reaches a second bit and how it would advance does not matter"),
    "last-use-default": (
        "the default of last.get only has to differ from every statement index k >= 0"),
    "unreachable-freed": (
        "'was freed' is unreachable: a FREE before the last read is refused first (the "
        "replayer's users are the same reads), so no read ever meets a freed result"),
    "signal-name": "an Amaranth signal's name: it changes the Verilog/VCD names only",
    "wider-signal": (
        "a wider intermediate (or a shift operand sliced one bit wider) holds the same "
        "values: the product fits 63 bits, shifts are 1..62"),
    "const-width": (
        "Const(1) << s grows to the width the shift needs, so the constant's declared "
        "width does not change the value"),
    "clamp-tie": "clamping at equality gives the bound, which is the value itself",
    "nonzero-offset": (
        "the branch only sees D offsets d != 0 (zeros are counted before it), where "
        "index + d < index and index + d <= index agree"),
}

_GROUPS = {
    "int64-promotion": [
        "nem.numerics.x_gemm_int8_acc__mutmut_3", "nem.numerics.x_gemm_int8_acc__mutmut_5",
        "nem.numerics.x_gemm_int8_acc__mutmut_7", "nem.numerics.x_gemm_int8_acc__mutmut_9",
        "nem.numerics.x_gemm_int8_acc__mutmut_14", "nem.numerics.x_gemm_int8_acc__mutmut_16",
        "nem.numerics.x_conv2d_int8_acc__mutmut_4", "nem.numerics.x_conv2d_int8_acc__mutmut_6",
        "nem.numerics.x_conv2d_int8_acc__mutmut_9",
        "nem.numerics.x_conv2d_int8_acc__mutmut_11",
        "nem.numerics.x_conv2d_int8_acc__mutmut_20",
        "nem.numerics.x_conv2d_int8_acc__mutmut_23",
        "nem.numerics.x_conv2d_int8_acc__mutmut_93",
        "nem.numerics.x_conv2d_int8_acc__mutmut_95",
        "nem.numerics.x_fold_input_zero_point__mutmut_8",
        "nem.numerics.x_fold_input_zero_point__mutmut_10",
        "nem.numerics.x_fold_input_zero_point__mutmut_14",
        "nem.numerics.x_fold_input_zero_point__mutmut_16",
        "nem.numerics.x_requantize__mutmut_3", "nem.numerics.x_requantize__mutmut_5",
    ],
    "float-promotion": [
        "nem.numerics.x_bias_codes__mutmut_5", "nem.numerics.x_bias_codes__mutmut_7",
        "nem.numerics.x_quantize_real__mutmut_3", "nem.numerics.x_quantize_real__mutmut_5",
        "nem.numerics.x_requant_params__mutmut_29",
        "nem.numerics.x_requant_params__mutmut_31",
        "nem.numerics.x_round_float__mutmut_3", "nem.numerics.x_round_float__mutmut_5",
        "nem.numerics.x_round_float__mutmut_30", "nem.numerics.x_round_float__mutmut_53",
    ],
    "float-accumulator": [
        "nem.numerics.x_conv2d_int8_acc__mutmut_65",
        "nem.numerics.x_conv2d_int8_acc__mutmut_67",
    ],
    "default-int": [
        "nem.numerics.x_requant_params__mutmut_78",
        "nem.numerics.x_requant_params__mutmut_80",
        "nem.numerics.x_requant_params__mutmut_83",
        "nem.numerics.x_requant_params__mutmut_85",
    ],
    "inner-clip": [f"nem.numerics.x_quantize_real__mutmut_{n}"
                   for n in (45, 46, 52, 53, 55, 56)],
    "unsigned-qmin": [f"nem.numerics.x_activation_qparams__mutmut_{n}" for n in (31, 33, 34)],
    "no-invalid": ["nem.numerics.x_round_float__mutmut_20",
                   "nem.numerics.x_round_float__mutmut_22"],
    "race-window": [f"nem.hazards.x_find_races__mutmut_{n}" for n in (18, 47)],
    "race-redundant-bitset": [f"nem.hazards.x_find_races__mutmut_{n}"
                              for n in (23, 26, 54, 56, 115)],
    "race-first-instance": [f"nem.hazards.x_find_races__mutmut_{n}"
                            for n in (67, 69, 70, 74, 81)],
    "last-use-default": [f"nem.hazards.x_peak_live_tokens__mutmut_{n}" for n in (37, 39, 41)],
    "unreachable-freed": [f"nac.schedule.x_replay__mutmut_{n}" for n in (40, 74, 76, 77)],
    "signal-name": [f"npu.cstl.requant.xǁRequantStageǁelaborate__mutmut_{n}"
                    for n in (46, 48, 54, 56, 84, 86, 91, 93, 98, 100)],
    "wider-signal": [f"npu.cstl.requant.xǁRequantStageǁelaborate__mutmut_{n}"
                     for n in (50, 57, 88, 95, 102, 113, 116)],
    "const-width": [f"npu.cstl.requant.xǁRequantStageǁelaborate__mutmut_{n}"
                    for n in (109, 111)],
    "clamp-tie": [f"npu.cstl.requant.xǁRequantStageǁelaborate__mutmut_{n}" for n in (122, 127)],
    "nonzero-offset": ["nac.container.arguments.x__argument_error__mutmut_15"],
}

EQUIVALENT: dict[str, str] = {name: REASONS[group] for group, names in _GROUPS.items()
                              for name in names}
