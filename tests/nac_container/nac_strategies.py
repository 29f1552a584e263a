"""Hypothesis strategies for valid NAC files (shared by round-trip and fuzz tests)."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from nac.container import (
    Constant,
    DataSection,
    Instruction,
    MmapRecord,
    NacFile,
    Orch,
    QuantParams,
    Tensor,
)
from nac.encoding import CONSTANT_CODES, SIGNATURE_CODES, ConstType, DType, MmapAction, QuantMethod

_f32 = st.floats(width=32, allow_nan=False)


def s16(ident):
    """An uint16 id as the int16 stored in C."""
    return ident - 0x10000 if ident >= 0x8000 else ident
_names = st.text(min_size=0, max_size=12)


def constants():
    return st.one_of(
        st.just(Constant(ConstType.NULL)),
        st.builds(Constant, st.just(ConstType.BOOL), st.booleans()),
        st.builds(Constant, st.just(ConstType.INT64), st.integers(-(1 << 63), (1 << 63) - 1)),
        st.builds(Constant, st.just(ConstType.FLOAT64), st.floats(allow_nan=False)),
        st.builds(Constant, st.just(ConstType.STRING), _names),
        st.builds(Constant, st.just(ConstType.LIST_INT32),
                  st.lists(st.integers(-(1 << 31), (1 << 31) - 1), max_size=5).map(tuple)),
        st.builds(Constant, st.just(ConstType.LIST_FLOAT32), st.lists(_f32, max_size=5).map(tuple)),
    )


@st.composite
def tensors(draw):
    dtype = draw(st.sampled_from(list(DType)))
    shape = tuple(draw(st.lists(st.integers(0, 3), min_size=0, max_size=3)))
    n = int(np.prod(shape)) if shape else 1
    data = draw(st.binary(min_size=n * dtype.numpy.itemsize, max_size=n * dtype.numpy.itemsize))
    quant = draw(st.sampled_from([QuantMethod.NONE, QuantMethod.FP16, QuantMethod.INT8_TENSOR,
                                  QuantMethod.INT8_CHANNEL, QuantMethod.BLOCK_FP8]))
    params = None
    if quant == QuantMethod.INT8_TENSOR:
        params = QuantParams(scales=(draw(_f32),))
    elif quant == QuantMethod.INT8_CHANNEL:
        params = QuantParams(scales=tuple(draw(st.lists(_f32, max_size=4))),
                             axis=draw(st.integers(0, 3)))
    elif quant == QuantMethod.BLOCK_FP8:
        params = QuantParams(scales=tuple(draw(st.lists(_f32, max_size=3))),
                             block_size=draw(st.integers(1, 64)),
                             orig_shape=tuple(draw(st.lists(st.integers(0, 9), max_size=3))))
    return Tensor(dtype, shape, quant, params, data)


@st.composite
def nac_files(draw):
    """A valid NacFile (canonical; every cross-section reference resolved)."""
    perm_ids = draw(st.lists(st.integers(1, 255), unique=True, max_size=5))
    perm = tuple((i, draw(st.text(alphabet=sorted(SIGNATURE_CODES), max_size=5)))
                 for i in perm_ids)
    cnst = tuple((i, draw(constants())) for i in
                 draw(st.lists(st.integers(0, 65535), unique=True, max_size=6)))
    cmap_ids = draw(st.lists(st.integers(20, 255), unique=True, max_size=4))
    cmap = tuple((i, draw(_names)) for i in cmap_ids)
    params = tuple((i, draw(_names)) for i in
                   draw(st.lists(st.integers(0, 65535), unique=True, max_size=4)))
    internal = draw(st.booleans())
    num_outputs = draw(st.integers(0, 3))
    ops = []
    n = draw(st.integers(0, 25))
    const_ids = [i for i, _ in cnst]
    op_ids = list(range(10, 20)) + cmap_ids
    for index in range(n):
        kind = draw(st.integers(0, 5))
        if index == 0 or kind == 0:
            b = draw(st.sampled_from([0, 2] + ([1] if params else []) + ([3] if cnst else [])))
            if b == 0:
                ops.append(Instruction(2, 0))
            else:
                ident = {1: lambda: draw(st.sampled_from([p for p, _ in params])),
                         2: lambda: draw(st.integers(0, 32767)),
                         3: lambda: draw(st.sampled_from(const_ids))}[b]()
                ops.append(Instruction(2, b, (draw(st.sampled_from([1, 2])), s16(ident))))
            continue
        if kind == 1:
            k = draw(st.integers(0, min(3, index)))
            ops.append(Instruction(3, 1, (k, *draw(st.lists(st.integers(-32768, 32767),
                                                            min_size=k, max_size=k))),
                                   tuple(-draw(st.integers(1, index)) for _ in range(k))))
            continue
        a = draw(st.sampled_from(op_ids))
        usable = [(b, s) for b, s in perm
                  if not (any(ch in CONSTANT_CODES for ch in s) and not const_ids)]
        if not usable:
            ops.append(Instruction(a, 0))
            continue
        b, sig = draw(st.sampled_from([*usable, (0, "")]))
        if b == 0:
            ops.append(Instruction(a, 0))
            continue
        has_c = any(ch in CONSTANT_CODES for ch in sig)
        d, ids = [], []
        for _ in sig:
            if has_c and draw(st.booleans()):
                d.append(0)
                ids.append(s16(draw(st.sampled_from(const_ids))))
            else:
                d.append(-draw(st.integers(1, index)))
        ops.append(Instruction(a, b, (len(ids), *ids) if has_c else None, tuple(d)))
    if n >= 1 and draw(st.booleans()) and n > num_outputs:
        ops.append(Instruction(3, 0, (num_outputs, *([0] * num_outputs)),
                               tuple(-draw(st.integers(1, len(ops))) for _ in
                                     range(num_outputs))))
    ops = tuple(ops)
    mmap = None
    if ops and draw(st.booleans()):
        pre = [i for i, ins in enumerate(ops) if ins.a == 2 and ins.b == 1]
        records = []
        for tick in sorted(draw(st.sets(st.integers(0, len(ops) - 1), max_size=5))):
            options = [(MmapAction.SAVE_RESULT, tick)]
            if tick > 0:
                options.append((MmapAction.FREE, draw(st.integers(0, tick - 1))))
            if tick < len(ops) - 1:
                options.append((MmapAction.FORWARD, draw(st.integers(tick + 1, len(ops) - 1))))
            options += [(MmapAction.PRELOAD, p) for p in pre if p >= tick]
            records.append(MmapRecord(tick, tuple(draw(st.lists(st.sampled_from(options),
                                                                min_size=1, max_size=3)))))
        mmap = tuple(records)
    tensors_ = None
    if internal:
        tensors_ = tuple((pid, draw(tensors())) for pid, _ in params if draw(st.booleans()))
    data = DataSection(params, tuple((i, draw(_names)) for i in
                                     draw(st.lists(st.integers(0, 65535), unique=True,
                                                   max_size=3))), tensors_)
    optional = lambda value: draw(st.sampled_from([None, value]))  # noqa: E731
    return NacFile(
        quant_method=draw(st.sampled_from(list(QuantMethod))), internal_weights=internal,
        num_inputs=draw(st.integers(0, 65535)), num_outputs=num_outputs,
        d_model=draw(st.integers(0, 65535)), mmap=mmap, ops=ops, cmap=cmap, cnst=cnst,
        perm=perm, data=data, proc=optional(draw(st.binary(max_size=8))),
        orch=optional(Orch(draw(st.binary(max_size=6)),
                           tuple((i, draw(constants())) for i in
                                 draw(st.lists(st.integers(0, 9), unique=True, max_size=2))))),
        rsrc=optional(tuple((draw(_names), draw(st.binary(max_size=8)))
                            for _ in range(draw(st.integers(0, 2))))))
