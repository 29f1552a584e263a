"""``npu compile`` / ``npu import`` argument validation (issue 24): bad values and options
that do not apply are usage errors (argparse, exit status 2) naming the option and value,
never a traceback."""

from pathlib import Path

import pytest

from npu.tools.cli import main

DATA = Path(__file__).parents[1] / "importers" / "data"


@pytest.mark.parametrize("argv, message", [
    (["compile", "mlp", "--preload", "-1"], "argument --preload: must be at least 0, got -1"),
    (["compile", "mlp", "--preload", "x"], "argument --preload: not an integer: 'x'"),
    (["import", "mind", str(DATA / "simple_module.ir"), "--preload", "-1"],
     "argument --preload: must be at least 0, got -1"),
    (["compile", "torch.nn:Identity", "--shape", "a,b"],
     "argument --shape: 'a,b': dimension 'a' is not an integer"),
    (["compile", "torch.nn:Identity", "--shape", "0,-1"],
     "argument --shape: '0,-1': dimensions must be at least 1"),
    (["compile", "torch.nn:Identity", "--shape", "100000,100000"],
     "argument --shape: '100000,100000': 10000000000 elements, more than 67108864"),
    (["compile", "mlp", "--tokens", "0"], "argument --tokens: must be at least 1, got 0"),
    (["compile", "mlp", "--tokens", "3"], "--tokens applies only to ckernel-ir2 files"),
    (["compile", "mlp", "--shape", "1,16"], "--shape applies only to a 'module:factory' model"),
    (["compile", str(DATA / "simple_module.ir"), "--tokens", "2"],
     "--tokens applies only to ckernel-ir2 imports, not mind"),
    (["compile", str(DATA / "simple_module.ir"), "--shape", "2,3"],
     "--shape applies only to a 'module:factory' model"),
    (["import", "ark", str(DATA / "ark_model.json"), "--weights", "w.safetensors"],
     "--weights applies only to ckernel-ir2 imports, not ark"),
])
def test_usage_errors_exit_2(argv, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as info:
        main([*argv, "-o", str(tmp_path / "out.nac")])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "out.nac").exists()
