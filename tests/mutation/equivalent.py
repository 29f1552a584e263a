"""Mutants that cannot change behaviour, each with the reason (``docs/testing.md`` lists them).

Keys are mutmut's mutant names (``module.x_function__mutmut_N``; methods
``module.xǁClassǁmethod__mutmut_N``). mutmut numbers the mutants of a function afresh when
the function changes; ``report.py`` flags an entry that no longer names a surviving mutant,
so a stale entry is noticed at the next run.
"""

from __future__ import annotations

from pathlib import Path

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
        "values: the product fits 63 bits, shifts are 1..62, the clamp's thresholds 19 "
        "bits; a wider low sum only adds bits the output's assignment drops"),
    "clamp-tie": ("clamping at equality gives the bound, which is the value itself (the "
                  "requantiser's q = 2*(hi - z) sums to hi)"),
    "nonzero-offset": (
        "the branch only sees D offsets d != 0 (zeros are counted before it), where "
        "index + d < index and index + d <= index agree"),
    # nac.runtime
    "unused-argument": (
        "nac.runtime._f(x, value) ignores x (it is np.float32(value)), so passing None for it "
        "changes nothing"),
    "negative-reshape": (
        "numpy's reshape takes any negative size as the one unknown dimension, so -2 in "
        "place of -1 gives the same shape"),
    "zero-branch": (
        "the two branches of elu/rrelu meet at x = 0 (both give a zero there), so '>' and "
        "'>=' choose between equal values"),
    "elu-inner-clamp": (
        "elu's np.minimum(x, 0) only keeps expm1 away from large positive x, where np.where "
        "takes x itself; clamping at 1 instead gives the same choice and the same values"),
    "single-weight": (
        "prelu: a one-element weight reshaped to [1, -1, 1, ...] broadcasts exactly as the "
        "scalar it is reshaped to otherwise"),
    "eval-batch-norm": (
        "instance_norm without input statistics calls _batch_norm in eval mode: None is as "
        "false as False, and _batch_norm ignores its momentum"),
    "dtype-kind-letters": (
        "'XXiuXX' holds the same dtype kind letters as 'iu' ('X' is no numpy kind)"),
    "whole-division": (
        "slice: the length is a multiple of 3 when the comparison runs ('or' short-cuts "
        "otherwise), so len / 3 and len // 3 are the same number"),
    "softplus-threshold": (
        "softplus's default threshold 21 instead of 20: for 20 < beta*x <= 21, "
        "log1p(exp(beta*x)) / beta differs from x by exp(-beta*x) / beta, far below half a "
        "float32 ulp of x, so the float32 results are equal (checked over 10**6 points)"),
    "gelu-default": (
        "gelu only tests approximate == 'tanh'; any other default string selects the exact "
        "erf form as 'none' does"),
    "unused-channel-pad": (
        "conv2d: a padding channel appended after the last one is never sliced by any group "
        "(groups take channels g*cg to (g+1)*cg of the unpadded count)"),
    "einsum-case": (
        "np.einsum subscripts are letters of either case: 'NCHW,FC->NFHW' is the same "
        "contraction as 'nchw,fc->nfhw'"),
    "bias-broadcast": (
        "a bias of shape [f, 1, 1] broadcasts against [n, f, oh, ow] exactly as [1, f, 1, 1]"),
    "matmul-2d-k": (
        "for a 2-D right operand shape[0] is shape[-2], so the rank test deciding between "
        "them can be > 1 or > 2"),
    "rank-checked": (
        "pool2d input is checked to have rank 4 first, where shape[2:] is shape[-2:]"),
    "unit-axis": (
        "1-D pooling runs the 2-D kernel over a height-1 axis with kernel 1: any stride or "
        "dilation on that axis gives the one output row"),
    "operand-order": (
        "each tensor operand comes from one non-zero D offset, in order, and constants are "
        "never arrays, so the offsets never run out before the operands"),
    "equal-lengths": (
        "the input count is checked before: slots, labels and inputs (and the checked "
        "inputs) have equal lengths, so zip's strict= cannot fire"),
    "own-slot": (
        "an <OUTPUT> offset of 0 names the output's own slot, still None, so letting 0 "
        "through the range test reaches the same 'names no computed value'"),
    "integral-repeat": (
        "sdpa's head repeat count: the heads were checked to divide, so '/' gives a whole "
        "float, which np.repeat takes as the same count"),
    "truthy-mask": (
        "the causal mask as float ones and zeros instead of booleans: np.where takes any "
        "non-zero value as true"),
    "tuple-constant": (
        "every kernel that takes a list constant (sizes, strides, pads, dims, ranges) "
        "accepts a tuple alike and prints it through list()"),
    "checked-lengths": (
        "zip's strict= dropped where the two lists' lengths were compared just before (the "
        "entry's channel or group count against both lists), so zip never sees unequal ones"),
    "codec-case": "Python's codec names are case-insensitive: 'UTF-8' is 'utf-8'",
    "unit-has-map": (
        "REGISTER_MAPS has a map for every Unit and the unit code was checked before, so "
        "regs is never None and the other branch's value is never used"),
    "entry-in-bounds": (
        "decode checked that the whole buffer table lies inside the binary before it reads "
        "the entries, so _unpack never reports a short buffer entry and its 'what' is unused"),
    "differing-sides": (
        "in the branch for a binary whose length disagrees with its header, data_at + ndata "
        "!= len(data), so '>=' and '>' choose the same text"),
    "falsy-name": "None and '' both fail 'not text', the only use of the value",
    "zero-padding": (
        "read_attr_words pads the ATTR words with zeros; more zero words than ATTR_WORDS "
        "change nothing: slots index below ATTR_WORDS and a zero word is never a stray one"),
    "binder-zip-lengths": (
        "zip's strict= cannot fire: compute_registers zips region.shape with the checker's "
        "strides (E605 refuses strides that do not match the rank) or dense_strides(shape); "
        "_compute_task reads DIMd and STRIDEd both for d in range(rank); _copy_task reads "
        "COUNTd and *_STRIDEd both for d in (3, 2, 1)"),
    "binder-literal-descriptors": (
        "the front-end's operands get their descriptors from _quant_tree, which builds Num "
        "literals only; quant_params evaluates literals without reading consts, so {} and "
        "None give the same entries"),
    "binder-spec-direction": (
        "the (spec, region) pairs only feed nem.shapes.check_shapes, which reads a spec's "
        "direction only; every spec of op.inputs is 'in' and of op.outputs 'out', and "
        "min(j, len(specs) - 2) indexes the same list, so the same regions land in ins/outs "
        "in the same order"),
    "binder-single-ancestor": (
        "_task_deps: a union of one task node is never pruned (an Order node is not its own "
        "ancestor), and bit 0 of covered is never tested: node 0 of a plan is the program's "
        "start node, never a task node"),
    "binder-unit-known": (
        "UNIT_CODES.get(name) is never None in bind: name is copy_unit's 'sDMA'/'DMA' or a "
        "RESOURCE_TARGETS name, all keys of UNIT_CODES, so the 'else 0' branch is dead"),
    "binder-fold-exact": (
        "fold_run: c = 1 is reached only when no c in 2..65535 divides run, and then run // 1 "
        "> 65535 returns what the loop's end returns; run / c after run % c == 0 is the exact "
        "quotient (run is far below 2**53), so '>' compares the same number"),
    "binder-lowest-bit": (
        "for beyond > 0, beyond | -beyond == -(beyond & -beyond) and int.bit_length ignores "
        "the sign, so the token named is the same"),
    "ops-absent-bias": (
        "gemm/conv2d: vals holds the inputs then one None per output, so with two inputs "
        "and one output vals[2] is the output's None: taking vals[2] when len(vals) >= 3 (or "
        "always) gives the same bias None; both front-ends refuse other operand counts"),
    "ops-get-default-or": (
        "attrs.get(key, D) or D: an absent key gives None (or the mutated default) and "
        "'or D' replaces it by D, so the default of get() is never the result"),
    "ops-guarded-default": (
        "attrs.get(key, D) is read only when attrs.get(key) is not None, i.e. when the key is "
        "present, so get()'s default D (epsilon 1e-5, keepdims True) is never returned"),
    "ops-int64-promotion": (
        "an explicit int64 cast dropped (or float zeros for an absent bias) where the value "
        "is cast or promoted to int64 anyway: fold_input_zero_point casts the bias to int64, "
        "int8 inputs are stored into an int64 padded array, int8 @ int64 and int64 + int32 "
        "give int64, and int4 weights minus their zero point stay in [-15, 15] in int8 "
        "before meeting the int64 activations"),
    "ops-default-int": (
        "np.array / np.full of Python ints is int64 without a dtype (the zero points, the "
        "conv2d padding value zx)"),
    "ops-default-float": (
        "np.array of Python floats is float64 without a dtype, and astype(None) is "
        "astype(float64)"),
    "ops-float-accumulator": (
        "_conv_real's output array float64 instead of the input's dtype: on the float path "
        "the input is float64 already; on the integer path every partial sum of int8/int4 "
        "products is far below 2**53, hence exact, and the result is checked against int32 "
        "and cast by requantize / requantize_groups or Memory.write: same values and bytes"),
    "ops-int8-already": (
        "maxpool_int8 / avgpool_int8 return int8 arrays and reduce_max_int8 the max of an "
        "int8 array; lookup_table returns quantize_real(..., 'i8'), int8: the dropped int8 "
        "conversion was a no-op"),
    "ops-pool-kernel-required": (
        "_cstl_work's kernel default (1, 1) is never used: kernel_shape is a required "
        "pool attribute, and _cstl_run (called first) needs it for the pool itself"),
    "ops-one-in-one-out": (
        "regions[+1] / qps[+1] in place of [-1] where the task has exactly one input and "
        "one output (a CSTL int8 pool; argmax: X and Y, enforced by both front-ends), so "
        "index 1 is the last"),
    "ops-unused-argument": (
        "the argument is never read there: _gemm ignores attrs; _cstl_work reads opcode and "
        "attrs only for maxpool/avgpool; lookup_table reads attrs only when opcode is not "
        "None"),
    "ops-equal-lengths": (
        "zip's strict= only matters for lists of different lengths, which cannot occur: "
        "regions and qps are built from the same list; the real path slices vals, regions "
        "and qps to ins_n entries; run_compute checks len(reals) == len(outs) first; "
        "slice's starts/ends/axes/steps have one length (nem.shapes)"),
    "ops-output-channels": (
        "_int_path reads channels only for the zero bias when there is none; then "
        "regions[2] is the output, whose last axis is the weight's last (N or F) by the "
        "shape rules, so regions[1].shape[-1] == regions[2].shape[-1]"),
    "ops-same-default": (
        "the dropped keyword equals the callee's default: requantize's channel_axis=-1, "
        "group_requant_params' w_range=(-8, 7) (= ELEM_RANGES['i4']), np.pad's "
        "mode='constant'"),
    "ops-pads-wrap": (
        "pad: pads has exactly 2 * rank entries (nem.shapes), so pads[k - rank] for k in "
        "range(rank) is pads[k + rank]"),
    "ops-regions-nonempty": (
        "elems is computed after _real_op read reals[0], so there is an input region and "
        "the 'or [0]' fallback is never taken"),
    "reply-header-guard": (
        "a frame decoder's first length test only guards the read of the LEN byte: with "
        "that many bytes held, the test against the full frame's length is true for every "
        "LEN, so '<=' or one more waits the same (ReplyDecoder.feed, BridgeModel.feed)"),
    "line-error-at-sync": (
        "BridgeModel's _line_error is read only inside a frame, and the sync byte that "
        "starts a frame sets it to False: its value from __init__ is never read"),
    "whole-words": (
        "MEM_WRITE's payload length is a multiple of 4 (checked in the same test or "
        "before): len(data) / 4 is the same whole number as len(data) // 4, and no "
        "multiple of 4 lies between 4 + 4 * MAX_WORDS and one more"),
    "csr-write-mask": (
        "a value unpacked as signed ('<i') is written through CsrModel.write, which masks "
        "it to 32 bits: -2 and 0xFFFFFFFE store the same register value"),
    "named-registers": (
        "START and STATUS write and read registers by name from the map (PROG_LO, "
        "PROG_HI, START, STATUS_REGS): CsrModel answers an error only for an offset with "
        "no register, so the BUS reply after them cannot be reached with the map's own "
        "offsets, and its status value is never built"),
    "struct-cache": (
        "_Cursor.unpack without its struct cache compiles struct.Struct('<' + fmt) afresh on "
        "every call and unpacks the same values; only slower"),
    "record-zip-strict": (
        "_Cursor.record zips record.names with the values record.struct unpacks, both built "
        "from the same Record fields, so the lengths are equal and strict= never raises"),
    "int16-fallback": (
        "read_ops: struct.unpack_from(f'<{n}h') instead of the precompiled _INT16S[n] is "
        "the same format and gives the same values; only slower"),
    "first-tick": (
        "_validate_mmap starting with previous = -2 instead of -1: a tick was checked to be "
        ">= 0 before, so 'rec.tick <= previous' is false for the first record either way"),
    "standard-low-ids": (
        "read_cmap 'ident <= 10' instead of '< 10': id 10 is a standard op and is refused "
        "by the test before with the same message"),
    "header-slice": "head is bytes(buf[:88]), 88 bytes long, so head[84:89] is head[84:88]",
    "buffer-copy": (
        "loads converting bytes and memoryview inputs too: memoryview(bytes(buf)) holds the "
        "same bytes, only a copy is added"),
    "small-signed-fields": (
        "signed instead of unsigned struct codes for fields whose values always fit the "
        "signed range (ConstType codes 0-6, the fixed constant lengths 0, 1 and 8, the "
        "QuantMethod code 0-4): struct packs the same bytes"),
}


def _ops(short):
    """nem.ops mutant names from ``function__N``."""
    return [f"nem.ops.x_{n.rsplit('__', 1)[0]}__mutmut_{n.rsplit('__', 1)[1]}" for n in short]


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
                    for n in (57, 58, 59, 71, 73, 74, 75, 86, 88, 90, 91, 93, 95, 97, 98,
                              138, 140, 142, 143, 151, 153, 160, 162, 163, 166, 168)],
    "wider-signal": [f"npu.cstl.requant.xǁRequantStageǁelaborate__mutmut_{n}"
                     for n in (83, 118, 141, 155, 170, 206, 214)],
    "clamp-tie": [f"npu.cstl.requant.xǁRequantStageǁelaborate__mutmut_{n}" for n in (199,)],
    "nonzero-offset": ["nac.container.arguments.x__argument_error__mutmut_15",
                       "nac.container.validate.x__validate_ops__mutmut_94"],
    "unused-argument": [
        "nac.runtime.x__clamp__mutmut_7", "nac.runtime.x__clamp__mutmut_17",
        "nac.runtime.x__elu__mutmut_6", "nac.runtime.x__elu__mutmut_17",
        "nac.runtime.x__elu__mutmut_22", "nac.runtime.x__group_norm__mutmut_49",
        "nac.runtime.x__rms_norm__mutmut_23", "nac.runtime.x__rrelu__mutmut_14",
        "nac.runtime.x__softplus__mutmut_5", "nac.runtime.x__softplus__mutmut_23",
    ],
    "negative-reshape": ["nac.runtime.x__group_norm__mutmut_29",
                         "nac.runtime.x__batch_norm__mutmut_8", "nac.runtime.x__prelu__mutmut_9",
                         "nac.runtime.x__conv2d__mutmut_196"],
    "zero-branch": ["nac.runtime.x__elu__mutmut_32", "nac.runtime.x__rrelu__mutmut_11"],
    "elu-inner-clamp": ["nac.runtime.x__elu__mutmut_16"],
    "single-weight": ["nac.runtime.x__prelu__mutmut_24", "nac.runtime.x__prelu__mutmut_25"],
    "eval-batch-norm": ["nac.runtime.x__instance_norm__mutmut_7",
                        "nac.runtime.x__instance_norm__mutmut_8"],
    "dtype-kind-letters": ["nac.runtime.x__gather__mutmut_4"],
    "whole-division": ["nac.runtime.x__slice__mutmut_4"],
    "softplus-threshold": ["nac.runtime.x__softplus__mutmut_2"],
    "gelu-default": ["nac.runtime.x__gelu__mutmut_1", "nac.runtime.x__gelu__mutmut_2"],
    "unused-channel-pad": ["nac.runtime.x__conv2d__mutmut_123"],
    "einsum-case": ["nac.runtime.x__conv2d__mutmut_182"],
    "bias-broadcast": ["nac.runtime.x__conv2d__mutmut_190"],
    "matmul-2d-k": ["nac.runtime.x__matmul__mutmut_21"],
    "rank-checked": ["nac.runtime.x__pool2d__mutmut_49"],
    "unit-axis": [f"nac.runtime.x__pool1d__mutmut_{n}" for n in (53, 57, 86)],
    "operand-order": ["nac.runtime.x__operands__mutmut_8"],
    "equal-lengths": [f"nac.runtime.x__user_inputs__mutmut_{n}"
                      for n in (29, 32, 33, 49, 52, 55, 58, 59, 60)],
    "own-slot": ["nac.runtime.x_run__mutmut_73", "nac.runtime.x_run__mutmut_74"],
    "tuple-constant": ["nac.runtime.x_run__mutmut_104"],
    "integral-repeat": ["nac.runtime.x__sdpa__mutmut_62", "nac.runtime.x__sdpa__mutmut_76"],
    "truthy-mask": ["nac.runtime.x__sdpa__mutmut_121", "nac.runtime.x__sdpa__mutmut_123"],
    "checked-lengths": [*(f"nem.taskformat.x_encode_group_requant__mutmut_{n}"
                          for n in (56, 59, 60)),
                        *(f"nem.taskformat.x_encode_requant__mutmut_{n}" for n in (42, 45, 46))],
    "codec-case": ["nem.taskformat.x_decode__mutmut_145", "nem.taskformat.x_encode__mutmut_8",
                   "nem.binder.x_device_hash__mutmut_19",
                   "nac.container.cursor.xǁ_Cursorǁtext__mutmut_10",
                   "nac.container.writer.x__text__mutmut_4",
                   "nac.container.writer.x__constant_bytes__mutmut_58"],
    "unit-has-map": ["nem.taskformat.x_decode__mutmut_228",
                     "nem.taskformat.x_decode__mutmut_232"],
    "entry-in-bounds": ["nem.taskformat.x_decode__mutmut_119"],
    "differing-sides": ["nem.taskformat.x_decode__mutmut_107"],
    "falsy-name": ["nem.taskformat.x_decode__mutmut_146"],
    "zero-padding": ["nem.taskformat.x_read_attr_words__mutmut_12"],
    "binder-zip-lengths": [
        *(f"nem.binder.x_compute_registers__mutmut_{n}" for n in (64, 67, 68)),
        *(f"nem.binder.x__compute_task__mutmut_{n}" for n in (75, 78, 79)),
        *(f"nem.binder.x__copy_task__mutmut_{n}" for n in (25, 28, 29))],
    "binder-literal-descriptors": ["nem.binder.x__check_cstl_entries__mutmut_3",
                                   "nem.binder.x__compute_task__mutmut_241"],
    "binder-spec-direction": ["nem.binder.x__compute_task__mutmut_188"],
    "binder-single-ancestor": ["nem.binder.x__task_deps__mutmut_10",
                               "nem.binder.x__task_deps__mutmut_13"],
    "binder-unit-known": ["nem.binder.x_bind__mutmut_76", "nem.binder.x_bind__mutmut_79"],
    "binder-fold-exact": ["nem.binder.x_fold_run__mutmut_11", "nem.binder.x_fold_run__mutmut_17"],
    "binder-lowest-bit": ["nem.binder.x_plan_from_binary__mutmut_44"],
    "struct-cache": ["nac.container.cursor.xǁ_Cursorǁunpack__mutmut_1",
                     "nac.container.cursor.xǁ_Cursorǁunpack__mutmut_2"],
    "record-zip-strict": [f"nac.container.cursor.xǁ_Cursorǁrecord__mutmut_{n}"
                          for n in (10, 13, 18)],
    "int16-fallback": ["nac.container.read_ops.x__parse_instruction__mutmut_30"],
    "first-tick": ["nac.container.validate.x__validate_mmap__mutmut_11"],
    "standard-low-ids": ["nac.container.read_tables.x_read_cmap__mutmut_24"],
    "header-slice": ["nac.container.reader.x__read_header__mutmut_121",
                     "nac.container.reader.x__read_header__mutmut_142"],
    "buffer-copy": ["nac.container.reader.x_loads__mutmut_3"],
    "small-signed-fields": [*(f"nac.container.writer.x__constant_bytes__mutmut_{n}"
                              for n in (12, 24, 38, 51)),
                            "nac.container.writer.x_tensor_metadata__mutmut_21"],
    #: nem.ops: names as "function__N" for nem.ops.x_function__mutmut_N
    "ops-absent-bias": _ops(["_gemm__9", "_gemm__11", "_conv2d__9", "_conv2d__11"]),
    "ops-get-default-or": _ops([
        "_conv2d__43", "_conv2d__45", "_real_op__87", "_real_op__89", "_real_op__100",
        "_real_op__102", "_real_op__150", "_real_op__152", "_reduce__25", "_reduce__27",
        "run_compute__87", "run_compute__89"]),
    "ops-guarded-default": _ops([
        "_norm__17", "_norm__19", "_norm__22", "_reduce__6", "_reduce__8", "_reduce__11"]),
    "ops-int64-promotion": _ops([
        "_conv2d__70", "_conv2d__72", "_conv2d__75", "_conv2d__77", "_conv2d__108", "_conv2d__110",
        "_conv2d__118", "_conv2d__120", "_gemm__33", "_gemm__35", "_group_path__3",
        "_group_path__5", "_matmul_acc__8", "_matmul_acc__10", "_matmul_acc__12", "_matmul_acc__14",
        "_matmul_acc__16", "_matmul_acc__18", "_int_path__16", "_int_path__18"]),
    "ops-default-int": _ops(["_conv2d__83", "_conv2d__86", "quant_params__69", "quant_params__71"]),
    "ops-default-float": _ops(["quant_params__65", "quant_params__67", "_erf__1"]),
    "ops-float-accumulator": _ops(["_conv_real__48", "_conv_real__50"]),
    "ops-int8-already": _ops([
        "_cstl_run__79", "_cstl_run__81", "run_compute__166", "run_compute__168"]),
    "ops-pool-kernel-required": _ops(["_cstl_work__17", "_cstl_work__18"]),
    "ops-one-in-one-out": _ops(["_cstl_work__27", "run_compute__81"]),
    "ops-unused-argument": _ops([
        "run_compute__23", "run_compute__57", "run_compute__59", "run_compute__113",
        "run_compute__115", "cstl_int8__52"]),
    "ops-equal-lengths": _ops([
        "_real_op__11", "_real_op__15", "_real_op__16", "_slice__33", "_slice__38", "_slice__39",
        "nmu_requant__30", "nmu_requant__33", "nmu_requant__34", "run_compute__189",
        "run_compute__193", "run_compute__194"]),
    "ops-output-channels": _ops(["_int_path__2"]),
    "ops-same-default": _ops(["_int_path__49", "nmu_group_requant__61", "_pad__27"]),
    "ops-pads-wrap": _ops(["_pad__9"]),
    "ops-regions-nonempty": _ops(["run_compute__214"]),
    "reply-header-guard": ["npu.board.protocol.xǁReplyDecoderǁfeed__mutmut_12",
                           "npu.board.protocol.xǁReplyDecoderǁfeed__mutmut_13",
                           "npu.board.model.xǁBridgeModelǁfeed__mutmut_14",
                           "npu.board.model.xǁBridgeModelǁfeed__mutmut_15"],
    "line-error-at-sync": ["npu.board.model.xǁBridgeModelǁ__init____mutmut_12",
                           "npu.board.model.xǁBridgeModelǁ__init____mutmut_13"],
    "whole-words": ["npu.board.model.xǁBridgeModelǁ_execute__mutmut_186",
                    "npu.board.model.xǁBridgeModelǁ_execute__mutmut_166"],
    "csr-write-mask": ["npu.board.model.xǁBridgeModelǁ_execute__mutmut_69",
                       "npu.board.model.xǁBridgeModelǁ_execute__mutmut_89"],
    "named-registers": ["npu.board.model.xǁBridgeModelǁ_execute__mutmut_103",
                        "npu.board.model.xǁBridgeModelǁ_execute__mutmut_115"],
}

EQUIVALENT: dict[str, str] = {name: REASONS[group] for group, names in _GROUPS.items()
                              for name in names}

#: The RTL blocks' equivalent mutants, one per line with its own reason:
#: ``equivalent_rtl/<module>.tsv`` holds ``name<TAB>group<TAB>reason``.
RTL_DIR = Path(__file__).resolve().parent / "equivalent_rtl"


def _load_rtl(directory: Path) -> None:
    for path in sorted(directory.glob("*.tsv")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != 3 or not all(f.strip() for f in fields):
                raise ValueError(f"{path.name}:{number}: expected name<TAB>group<TAB>reason, "
                                 f"got {line!r}")
            name, group, reason = (f.strip() for f in fields)
            if name in EQUIVALENT:
                raise ValueError(f"{path.name}:{number}: {name} is listed twice")
            key = f"{path.stem}:{group}"
            if REASONS.get(key, reason) != reason:  # the group's mutants differ in detail
                key = f"{key}:{number}"
            REASONS[key] = reason
            EQUIVALENT[name] = reason


_load_rtl(RTL_DIR)
