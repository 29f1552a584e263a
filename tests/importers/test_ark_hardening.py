"""The ARK importer on malformed JSON values (issue 24): every wrong value type names the
node, op and field and raises ArkError (they were TypeError / AttributeError / IndexError /
ValueError crashes), and deep nesting is refused before parsing (it was RecursionError).
The base model is the fuzzer's small Matmul -> Relu -> ReduceSum model."""

import copy
import json
import sys
from pathlib import Path

import pytest

from nac.import_ark import MAX_NESTING, ArkError, import_ark

sys.path.insert(0, str(Path(__file__).parents[1] / "fuzz"))
from fuzz_ark import small_model

BASE = small_model()


def _edit(path, value):
    model = copy.deepcopy(BASE)
    *head, last = path
    target = model
    for key in head:
        target = target[key]
    if value is KeyError:
        del target[last]
    else:
        target[last] = value
    return model


MATMUL = ("Nodes", 0, "Ops", 0)
READ0 = (*MATMUL, "ReadTensors", 0)
REDUCE = ("Nodes", 2, "Ops", 0)


@pytest.mark.parametrize("path, value, message", [
    (("Nodes",), {}, "field 'Nodes' must be a list, not {}"),
    (("Nodes", 0), 7, "Nodes\\[0\\]: expected an object with field 'Ops', not 7"),
    (("Nodes", 0, "Id"), "0", "Nodes\\[0\\]: field 'Id' must be an integer, not '0'"),
    (("Nodes", 0, "Ops"), None, "Nodes\\[0\\]: field 'Ops' must be a list, not None"),
    ((*MATMUL,), [1], "node 0 op 0: must be an object, not \\[1\\]"),
    ((*MATMUL, "Type"), ["Matmul"], "node 0 op 0: field 'Type' must be a string"),
    ((*MATMUL, "IsVirtual"), "no", "field 'IsVirtual' must be true or false, not 'no'"),
    ((*MATMUL, "ReadTensors"), {"a": 1}, "field 'ReadTensors' must be a list"),
    ((*READ0,), "t0", "ReadTensors\\[0\\]: expected an object with field 'Id', not 't0'"),
    ((*READ0, "Shape"), [2, "3"], "ReadTensors\\[0\\]: field 'Shape' must be a list of "
     "non-negative integers, not \\[2, '3'\\]"),
    ((*READ0, "Shape"), [2, -3], "field 'Shape' must be a list of non-negative integers"),
    ((*READ0, "Offsets"), 0, "field 'Offsets' must be a list of non-negative integers, not 0"),
    ((*READ0, "PaddedShape"), [[2], 3], "field 'PaddedShape' must be a list of non-negative"),
    ((*READ0, "Buffer"), 3, "field 'Buffer' must be an object, not 3"),
    ((*READ0, "Buffer", "Id"), None, "ReadTensors\\[0\\].Buffer: field 'Id' must be an "
     "integer, not None"),
    ((*MATMUL, "ResultTensors", 0, "Buffer", "Id"), True, "ResultTensors\\[0\\].Buffer: "
     "field 'Id' must be an integer, not True"),
    ((*MATMUL, "Args"), [], "field 'Args' must be an object, not \\[\\]"),
    ((*MATMUL, "Args"), {"TransposeInput": {"BOOL": 1}}, "argument 'TransposeInput': BOOL "
     "must be true or false, not 1"),
    ((*MATMUL, "Args"), {"ShapeMNK": {"DIMS": [2, "4", 3]}}, "argument 'ShapeMNK': DIMS must "
     "be a list of integers"),
    ((*REDUCE, "Args", "Axis"), {"INT": 1.5}, "argument 'Axis': INT must be an integer, not "
     "1.5"),
    ((*REDUCE, "Args", "KeepDim"), {"BOOL": "yes"}, "argument 'KeepDim': BOOL must be true or "
     "false"),
    (("Nodes", 1, "Ops", 0, "ReadTensors"), [], "node 1 op 0 \\(Relu 'relu'\\): Relu reads "
     "one tensor, not 0"),
])
def test_wrong_value_types_are_named(path, value, message):
    with pytest.raises(ArkError, match=message):
        import_ark(_edit(path, value), path="m.json")


def test_incompatible_broadcast_is_named():
    model = _edit((*READ0, "Shape"), [5, 2, 3])
    model["Nodes"][0]["Ops"][0]["ReadTensors"][1]["Shape"] = [4, 3, 4]
    for key in ("Strides", "Offsets", "PaddedShape"):
        del model["Nodes"][0]["Ops"][0]["ReadTensors"][0][key]
        del model["Nodes"][0]["Ops"][0]["ReadTensors"][1][key]
    with pytest.raises(ArkError, match=r"node 0 op 0 .*shapes \[5\], \[4\] do not broadcast"):
        import_ark(model, path="m.json")


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000,
                                  '{"Nodes": [' + '{"a":' * 50_000 + "1" + "}" * 50_000 + "]}"])
def test_deep_nesting_is_refused_before_parsing(text):
    with pytest.raises(ArkError, match=f"m.json: JSON nested deeper than {MAX_NESTING} levels"):
        import_ark(text, path="m.json")


def test_strings_with_brackets_do_not_count_as_nesting():
    model = copy.deepcopy(BASE)
    model["Nodes"][0]["Ops"][0]["Name"] = "[" * 1000 + '\\"{' * 100
    graph, _ = import_ark(json.dumps(model), path="m.json")
    assert len(graph.outputs) == 1
