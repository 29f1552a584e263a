"""The opcode registry: loaded from the shipped opcodes.yaml, validated against schema.json.

nem.md: "Tools MUST validate their opcode tables against the registry." The checks here read
the YAML directly (not through ``nem.registry``) and compare, and show that the checker
takes opcode signatures from whatever registry it is given.
"""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from nem.checker import check_workspace
from nem.loader import load_text
from nem.registry import RegistryError, load_registry


def _raw() -> dict:
    text = resources.files("nem").joinpath("data", "opcodes.yaml").read_text("utf-8")
    return yaml.safe_load(text)


def test_shipped_registry_loads_every_opcode():
    raw = _raw()
    reg = load_registry()
    assert set(reg.opcodes) == set(raw["opcodes"])
    assert len(reg.opcodes) == 49  # nem-notes.md: "the opcode registry (49 opcodes ...)"
    for name, spec in raw["opcodes"].items():
        op = reg[name]
        assert op.forms == tuple(spec["forms"])
        assert [o.name for o in op.operands] == [o["name"] for o in spec["operands"]]
        assert [(o.direction, o.required) for o in op.operands] == [
            (o["direction"], o["required"]) for o in spec["operands"]
        ]
        for attr in spec.get("attributes", ()):
            got = op.attribute(attr["name"])
            assert got is not None and got.type == attr["type"]
            assert got.required == attr["required"]
            assert got.has_default == ("default" in attr)
            if "default" in attr:
                assert got.default == attr["default"]


def _write(tmp_path, doc) -> str:
    path = tmp_path / "opcodes.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_registry_breaking_the_schema_is_rejected(tmp_path):
    doc = _raw()
    del doc["opcodes"]["relu"]["forms"]
    with pytest.raises(RegistryError) as err:
        load_registry(_write(tmp_path, doc))
    assert "opcodes/relu" in str(err.value)
    assert "forms" in str(err.value)


def test_registry_with_a_wrong_type_is_rejected(tmp_path):
    doc = _raw()
    doc["opcodes"]["gemm"]["operands"][0]["required"] = "yes"
    with pytest.raises(RegistryError, match="opcodes/gemm/operands/0/required"):
        load_registry(_write(tmp_path, doc))


def test_registry_not_yaml(tmp_path):
    path = tmp_path / "opcodes.yaml"
    path.write_text("opcodes: [unclosed\n")
    with pytest.raises(RegistryError, match="not valid YAML"):
        load_registry(str(path))


def _check(text: str, registry):
    ws = load_text(text, "r.nem")
    return {d.code for d in check_workspace(ws, registry=registry).diagnostics}


PROGRAM = """
buffer A : L1 (size=64)
let X = region(A, 0, 64) elem=i8, shape=[64], layout=C
t = relu.async in X out X
"""


def test_checker_takes_signatures_from_the_registry(tmp_path):
    assert _check(PROGRAM, load_registry()) == set()
    # Without relu in the registry the checker does not know it.
    doc = _raw()
    del doc["opcodes"]["relu"]
    assert _check(PROGRAM, load_registry(_write(tmp_path, doc))) == {"E701"}
    # A registry that gives relu a required attribute makes the same program incomplete.
    doc = _raw()
    doc["opcodes"]["relu"]["attributes"] = [
        {"name": "slope", "type": "float", "required": True, "description": "test"}
    ]
    assert _check(PROGRAM, load_registry(_write(tmp_path, doc))) == {"E706"}
