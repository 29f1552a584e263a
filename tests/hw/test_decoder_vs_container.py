"""The ABCD decoder (model and RTL) against the NAC container's own argument gathering.

Files come from the container's hypothesis strategy (so from an independent generator),
the decoder's signature table from their PERM section through ``perm_entry``.
"""

import sys
from pathlib import Path

from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nac_container"))

from nac_strategies import nac_files

from nac import dumps, gather_arguments
from nac.container import section_body
from nac.encoding import SystemOp
from npu.nac.decoder import DecodedInstruction, DecodeError, DecoderModel, perm_entry


def ops_stream(nac):
    """The OPS instruction bytes the decoder reads: the OPS body after its count."""
    return section_body(dumps(nac), "OPS ")[4:]


def expected(nac):
    """What the decoder must emit, derived from the container's view of each instruction."""
    perm = dict(nac.perm)
    out = []
    for index, ins in enumerate(nac.ops):
        if ins.a >= 10:
            args = tuple((a.is_const, a.value) for a in gather_arguments(ins, index, perm))
            out.append(DecodedInstruction(index, ins.a, ins.b, ins.const_ids, args))
        elif ins.a == SystemOp.INPUT:
            out.append(DecodedInstruction(index, ins.a, ins.b, ins.const_ids[:1], ()))
        else:  # OUTPUT
            out.append(DecodedInstruction(index, ins.a, ins.b, ins.const_ids,
                                          tuple((False, index + d) for d in ins.d)))
    return tuple(out)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nac_files())
def test_decoder_model_matches_container(nac):
    if not nac.ops:
        return
    table = {b: perm_entry(sig, 8) for b, sig in nac.perm if b < 256 and len(sig) <= 8}
    stream = ops_stream(nac)
    result = DecoderModel(table, max_args=8, max_consts=8,
                          num_outputs=nac.num_outputs).decode(stream)
    assert result.error == DecodeError.NONE, result
    assert result.instructions == expected(nac)
