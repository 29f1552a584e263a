"""The torch.export front-end: input kinds, shapes and dtypes on every value, the verifier
after every pass on real graphs, and a lifted constant through file and runtime."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from nac import read_nac, write_nac  # noqa: E402
from nac.compile import compile_module  # noqa: E402
from nac.encoding import SystemOp  # noqa: E402
from nac.frontend_torch import from_torch  # noqa: E402
from nac.ir import verify  # noqa: E402
from nac.passes import PASSES  # noqa: E402
from nac.runtime import NacRuntimeError, run  # noqa: E402
from nac.zoo import ZOO, build  # noqa: E402

torch.set_num_threads(1)


class Kinds(torch.nn.Module):
    """A parameter, a buffer and a tensor created in forward (a lifted constant)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.arange(12, dtype=torch.float32).reshape(4, 3) / 7)
        self.register_buffer("shift", torch.tensor([0.5, -1.0, 2.0]))

    def forward(self, x):
        return torch.relu(x @ self.w + self.shift) * torch.tensor([1.0, 3.0, -2.0])


def test_input_kinds_shapes_and_dtypes(tmp_path):
    module = Kinds().eval()
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    graph = from_torch(module, (x,))
    kinds = {n.name: n.kind for n in graph.nodes if n.kind != "op"}
    assert kinds["w"] == "param" and kinds["shift"] == "param"
    assert sorted(kinds.values()).count("input") == 1
    assert sorted(kinds.values()).count("const") == 1
    # Every value, inputs and ops alike, has the shape and dtype torch computed.
    with torch.no_grad():
        want = module(x)
    assert graph.nodes[graph.outputs[0]].shape == tuple(want.shape)
    assert all(n.dtype == "float32" and all(d > 0 for d in n.shape) for n in graph.nodes)
    # Parameters and buffers are <INPUT B=1>, the user input <INPUT B=0>, the lifted
    # constant <INPUT B=3>; the result still equals torch through the file.
    # Like a user input, a lifted constant's value comes from outside the instruction list
    # (spec 7.1.4): from the external weight store, or given to the runtime.
    nac, weights, _ = compile_module(module, (x,), run_passes=False, internal_weights=False)
    bs = sorted(ins.b for ins in nac.ops if ins.a == SystemOp.INPUT)
    assert bs == [0, 1, 1, 3]
    write_nac(nac, tmp_path / "kinds.nac", weights=weights)
    got = run(read_nac(tmp_path / "kinds.nac"), [x.numpy()])[0]
    assert np.max(np.abs(got - want.numpy())) <= 1e-6
    internal, _, _ = compile_module(module, (x,), run_passes=False)
    write_nac(internal, tmp_path / "internal.nac")
    back = read_nac(tmp_path / "internal.nac")
    (lifted,) = [n.name for n in graph.nodes if n.kind == "const"]
    with pytest.raises(NacRuntimeError, match=rf"<INPUT B=3> '{lifted}' has no value"):
        run(back, [x.numpy()])
    value = graph.tensors[lifted]
    got = run(back, [x.numpy()], extra_tensors={lifted: value})[0]
    assert np.max(np.abs(got - want.numpy())) <= 1e-6


@pytest.mark.parametrize("name", sorted(ZOO))
def test_verifier_after_every_pass(name):
    module, inputs = build(name)
    graph = from_torch(module, inputs)
    sizes = [len(graph.nodes)]
    for p in PASSES:
        graph = verify(p(graph))
        sizes.append(len(graph.nodes))
        # No pass may change what the graph returns.
        assert [graph.nodes[o].shape for o in graph.outputs] == \
            [tuple(module(*inputs).shape)]
    assert sizes[-1] <= sizes[0]
