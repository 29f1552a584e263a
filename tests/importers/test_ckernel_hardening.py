"""C-Kernel-Engine IR v2 import caps and refusals (issue 24).

* The element caps apply to the buffers the nodes bind, after ``tokens`` is applied: a
  huge buffer no node uses is no error, and ``--tokens`` rescues a file whose ``tokens``
  dimension is too large.
* The buffers the nodes bind are capped in total (each was capped alone; 3 GB of
  synthesised weights ended in MemoryError). The expected sizes come from the dimensions
  written into the example: ``w1`` is ``[2 * intermediate, embed]``.
* A backward (training) plan is refused as such.
"""

import copy
import json
import resource
from pathlib import Path

import pytest

from nac.import_ckernel import CKernelError, import_ckernel

SHIPPED_PATH = Path(__file__).parent / "data" / "ckernel_ir_v2_tiny.json"
SHIPPED = json.loads(SHIPPED_PATH.read_text())


def _with_dims(**values):
    model = copy.deepcopy(SHIPPED)
    for d in model["dimensions"]:
        if d["name"] in values:
            d["value"] = values[d["name"]]
    return model


def _limited(fn):
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as f:
        used = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (used + (1 << 30), hard))
    try:
        return fn()
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_unused_buffers_are_not_capped():
    model = copy.deepcopy(SHIPPED)
    pos = next(b for b in model["buffers"] if b["name"] == "pos_emb")
    assert not any(bd["buffer"] == "pos_emb" for n in model["nodes"] for bd in n["bindings"])
    pos["shape"][0]["mult"] = 10**9  # 64 * 10^9 rows: far over any cap, and never read
    graph, _ = import_ckernel(model, path="m.json", max_elements=1 << 20)
    assert graph.outputs


def test_total_of_bound_buffers_is_capped_before_allocating():
    # Every buffer alone fits the 2**28-element cap (w1: 2 * 65536 x 2048 = 2**28), together
    # they do not; the weights would be synthesised (allocated) as they are bound.
    model = _with_dims(intermediate=65536, aligned_intermediate=65536, embed=2048,
                       aligned_embed=2048, head_dim=1024, aligned_head=1024)
    with pytest.raises(CKernelError, match=r"m.json: nodes\[7\] \(layer 0, mlp_up\): binding "
                       r"'w1': buffer 'w1' \[131072, 2048\] brings the buffers the nodes use "
                       r"to \d+ elements, more than 268435456"):
        _limited(lambda: import_ckernel(model, path="m.json"))


def test_tokens_is_applied_before_the_caps(tmp_path, capsys):
    from npu.tools.cli import main

    path = tmp_path / "long.json"
    path.write_text(json.dumps(_with_dims(tokens=10**8)))
    out = tmp_path / "long.nac"
    assert main(["import", "ckernel-ir2", str(path), "-o", str(out)]) == 1
    assert "binding 'input': buffer 'input' [100000000, 64] has more than 268435456 " \
        "elements" in capsys.readouterr().err
    assert main(["import", "ckernel-ir2", str(path), "-o", str(out), "--tokens", "4"]) == 0
    assert "inputs input [4, 64]" in capsys.readouterr().out


def test_backward_kernel_is_refused_as_such():
    model = copy.deepcopy(SHIPPED)
    model["nodes"][0]["op"] = "rmsnorm_backward"
    model["nodes"][0]["kernel"] = "rmsnorm_backward"
    with pytest.raises(CKernelError, match=r"nodes\[0\] \(layer 0, rmsnorm_backward\): kernel "
                       r"'rmsnorm_backward' belongs to a backward \(training\) plan; backward "
                       r"plans are not supported"):
        import_ckernel(model, path="m.json")


def test_grad_buffer_is_refused_as_backward():
    model = copy.deepcopy(SHIPPED)
    gamma = next(b for b in model["buffers"] if b["name"] == "ln1_gamma")
    gamma["role"] = "grad"
    with pytest.raises(CKernelError, match=r"binding 'gamma': buffer 'ln1_gamma' has role "
                       r"'grad', so this is a backward \(training\) plan; backward plans are "
                       r"not supported"):
        import_ckernel(model, path="m.json")


def test_backward_node_disabled_by_its_condition_is_skipped():
    model = copy.deepcopy(SHIPPED)
    extra = copy.deepcopy(model["nodes"][0])
    extra.update(op="rmsnorm_backward", kernel="rmsnorm_backward",
                 condition="training_enabled")
    model["nodes"].append(extra)
    _, info = import_ckernel(model, path="m.json")
    assert info.skipped[-1] == (len(model["nodes"]) - 1, "rmsnorm_backward")
