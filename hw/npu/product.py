"""A wide product over several register stages, one 18 x 18 multiplier per partial product.

The ECP5's MULT18X18D multiplies two 18-bit signed operands. Yosys splits a wider ``*``
into such multipliers too, but sums their partial products in the same cycle: a chain of
carry chains that limits the clock. :func:`staged_product` cuts the operands into digits
itself, registers each digit product (one multiplier, its result in a register) and then
sums them pairwise, one register level per level of the adder tree, so that no cycle holds
more than one multiplier or one adder. Each digit product's register is
:func:`npu.dsp.registered_product`'s: on the ECP5 the multiplier's own output register.

Digits: the unsigned operand ``b`` in 17-bit digits; the signed operand ``a`` in unsigned
17-bit digits below a signed top digit (at most 18 bits). A digit product is then at most
signed 18 x unsigned 17 bits, which fits one signed 18 x 18 multiplier. The sum is exact:
``a * b = sum(a_i * b_j * 2**(17 * (i + j)))``.
"""

from __future__ import annotations

from amaranth import Signal, signed

from npu.dsp import registered_product

__all__ = ["DIGIT", "product_latency", "staged_product"]

#: Bits of an unsigned digit (a signed 18 x 18 multiplier takes an unsigned 17-bit value).
DIGIT = 17


def _digits(width):
    """Digit count of a ``width``-bit operand (the last digit holds the rest)."""
    return max(1, -(-width // DIGIT))


def product_latency(a_width, b_width):
    """Register stages of :func:`staged_product` for a ``signed(a_width)`` times an
    unsigned ``b_width``-bit operand: one for the digit products, one per adder level."""
    terms = _digits(a_width) * _digits(b_width)
    return 1 + (terms - 1).bit_length()


def staged_product(m, a, b, *, en, name, platform=None):
    """``a * b`` (``a`` signed, ``b`` unsigned) over :func:`product_latency` stages.

    Parameters
    ----------
    m : amaranth.Module
        Where the stages go (``sync`` domain).
    a : amaranth.Value
        Signed operand, at least 2 bits wide.
    b : amaranth.Value
        Unsigned operand, at least 1 bit wide.
    en : amaranth.Value
        The pipeline advances (every stage register loads only when it is high).
    name : str
        Prefix of the stage registers' names.
    platform : object or None
        The elaboration's platform (:data:`npu.dsp.ECP5` puts each digit product in a
        MULT18X18D's output register).

    Returns
    -------
    amaranth.Signal
        ``signed(len(a) + len(b))``: the product of the operands presented
        :func:`product_latency` advancing cycles before.
    """
    wa, wb = len(a), len(b)
    if not a.shape().signed or wa < 2 or b.shape().signed:
        raise ValueError(f"{name}: staged_product takes a signed a (>= 2 bits) and an "
                         f"unsigned b, not {a.shape()} and {b.shape()}")
    da, db = _digits(wa), _digits(wb)
    a_dig = []
    for i in range(da):
        lo, hi = i * DIGIT, min(wa, (i + 1) * DIGIT)
        digit = a[lo:hi]
        a_dig.append(digit.as_signed() if i == da - 1 else digit.as_unsigned())
    b_dig = [b[j * DIGIT:min(wb, (j + 1) * DIGIT)] for j in range(db)]

    terms = []          # (register, weight in digits)
    for i, x in enumerate(a_dig):
        for j, y in enumerate(b_dig):
            prod = registered_product(m, x, y, en=en, name=f"{name}_pp{i}_{j}",
                                      platform=platform)
            # |x * y| < 2**(len(x) + len(y)): the product's low bits, signed, are exact
            terms.append((prod[:len(x) + len(y) + 1].as_signed(), i + j))
    level = 0
    while len(terms) > 1:
        terms.sort(key=lambda t: t[1])
        merged = []
        for k in range(0, len(terms) - 1, 2):
            (lo, wl), (hi, wh) = terms[k], terms[k + 1]
            expr = lo + (hi << (DIGIT * (wh - wl)))
            reg = Signal(expr.shape(), name=f"{name}_s{level}_{k // 2}")
            with m.If(en):
                m.d.sync += reg.eq(expr)
            merged.append((reg, wl))
        if len(terms) % 2:
            last, weight = terms[-1]
            reg = Signal(last.shape(), name=f"{name}_s{level}_{len(terms) // 2}")
            with m.If(en):
                m.d.sync += reg.eq(last)
            merged.append((reg, weight))
        terms, level = merged, level + 1
    total, weight = terms[0]
    assert weight == 0     # the sum keeps the weight of its lowest term, a_0 * b_0
    out = Signal(signed(wa + wb), name=f"{name}_p")
    m.d.comb += out.eq(total)
    return out
