"""The decoder RTL (cocotb + Verilator) on real .nac files: the compiler's zoo models and
hypothesis-generated container files, against the NAC container's own reading of them
(``nac.gather_arguments``), with random input stalls and output back-pressure."""

import json
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "nac_container"))

from nac_strategies import nac_files
from test_decoder_vs_container import expected, ops_stream

from npu.nac.decoder import perm_entry
from sim.runner import Design, build, run_cocotb

pytestmark = pytest.mark.cocotb
# batch_norm has 9 arguments (5 tensors, 4 constants): the zoo needs max_args >= 9.
MAX_ARGS, MAX_CONSTS = 12, 8


def vector(name, nac):
    exp = expected(nac)
    return {"name": name, "perm": {b: list(perm_entry(sig, MAX_ARGS)) for b, sig in nac.perm},
            "stream": ops_stream(nac).hex(), "num_outputs": nac.num_outputs,
            "expected": [{"index": i.index, "a": i.a, "b": i.b, "consts": list(i.consts),
                          "args": [[int(c), v] for c, v in i.args]} for i in exp]}


def zoo_vectors():
    torch = pytest.importorskip("torch")
    from nac.compile import compile_module
    from nac.zoo import ZOO
    from nac.zoo import build as build_model

    torch.set_num_threads(1)
    out = []
    for name in sorted(ZOO):
        module, inputs = build_model(name)
        nac, _, _ = compile_module(module, inputs)
        assert all(len(sig) <= MAX_ARGS for _, sig in nac.perm), name
        out.append(vector(f"zoo:{name}", nac))
    return out


def hypothesis_vectors(count):
    found = []

    @settings(max_examples=count, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(nac_files())
    def collect(nac):
        if nac.ops and all(b < 256 and len(sig) <= MAX_ARGS for b, sig in nac.perm):
            found.append(vector(f"hypothesis:{len(found)}", nac))

    collect()
    return found


@pytest.mark.xdist_group("nac_decoder_files")
def test_decoder_rtl_on_nac_files(tmp_path):
    vectors = zoo_vectors() + hypothesis_vectors(40)
    path = tmp_path / "vectors.json"
    path.write_text(json.dumps(vectors))
    design = Design("nac_decoder", "npu.nac.decoder:InstructionDecoder",
                    {"max_args": MAX_ARGS, "max_consts": MAX_CONSTS})
    tests, failed = run_cocotb(build(design), "sim.tb_decoder", testcase="vector_files",
                               name="files", env={"NPU_DECODER_VECTORS": str(path)})
    assert tests == 1 and failed == 0
    assert len(vectors) >= 20
