"""``npu board`` and ``npu board run`` as documented: docs/board.md's option table, read
here row by row, against the parser the command line builds (help texts, values, defaults,
what is required), and the command's usage errors."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from npu.tools.cli import build_parser, main

DOC = Path(__file__).resolve().parents[2] / "docs" / "board.md"


def _subparsers(parser):
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return action


def _board_parsers():
    parser, _ = build_parser()
    top = _subparsers(parser)
    board = top.choices["board"]
    return top, board, _subparsers(board).choices["run"], _subparsers(board)


def _doc_rows():
    """The option table under "Running on the board": one dict per row."""
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = lines.index("| option | value | default | help |")
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        assert len(cells) == 4, f"{DOC}: row {line!r} has {len(cells)} cells, not 4"
        option, value, default, text = cells
        rows.append({"option": option.strip("`"),
                     "value": [v.strip().strip("`") for v in value.split(",") if v.strip()],
                     "default": default, "help": text})
    return rows


def _documented(action):
    """What the table shows for one parser action, worked out from the action."""
    option = action.option_strings[0] if action.option_strings else action.dest
    if action.choices is not None:
        value = [str(c) for c in action.choices]
    elif not action.option_strings:
        value = []
    else:
        value = [action.metavar or action.dest.upper()]
    required = action.required or not action.option_strings
    default = "required" if required else ("" if action.default is None else str(action.default))
    return {"option": option, "value": value, "default": default, "help": action.help}


def test_option_table_matches_the_parser():
    _, _, run, _ = _board_parsers()
    actions = [a for a in run._actions if not isinstance(a, argparse._HelpAction)]
    assert _doc_rows() == [_documented(a) for a in actions]


def test_command_texts_match_the_doc():
    top, _, _, board_sub = _board_parsers()
    text = " ".join(DOC.read_text(encoding="utf-8").split())
    helps = {a.dest: a.help for a in top._choices_actions}
    runs = {a.dest: a.help for a in board_sub._choices_actions}
    assert f"`npu board`: {helps['board']}." in text
    assert f"`npu board run`: {runs['run']}." in text


def test_board_help_lists_run(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["board", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert re.search(r"^usage: npu board \[-h\] COMMAND", out, re.M)
    _, _, _, board_sub = _board_parsers()
    assert re.search(r"^\s+run\s+" + re.escape(board_sub._choices_actions[0].help[:20]),
                     out, re.M)


@pytest.mark.parametrize("argv, needs", [
    (["board"], "the following arguments are required: COMMAND"),
    (["board", "run"], "the following arguments are required: program, --port"),
    (["board", "run", "x.bin"], "the following arguments are required: --port"),
    (["board", "run", "x.bin", "--port", "p", "--device", "big"],
     "argument --device: invalid choice: 'big'"),
    (["board", "run", "x.bin", "--port", "p", "--baud", "fast"],
     "argument --baud: invalid int value: 'fast'"),
    (["board", "run", "x.bin", "--port", "p", "--timeout", "soon"],
     "argument --timeout: invalid float value: 'soon'"),
    (["board", "run", "x.bin", "--port", "p", "--watchdog", "1.5"],
     "argument --watchdog: invalid int value: '1.5'"),
    (["board", "run", "x.bin", "--port", "p", "--seed", "s"],
     "argument --seed: invalid int value: 's'"),
])
def test_usage_errors(argv, needs, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert needs in capsys.readouterr().err


def test_defaults_reach_the_command():
    parser, _ = build_parser()
    args = parser.parse_args(["board", "run", "x.bin", "--port", "p"])
    assert (args.baud, args.timeout, args.watchdog, args.seed, args.memory, args.device) == \
        (1_000_000, 2.0, None, None, None, None)
    assert args.board_command == "run"
    assert args.func.__name__ == "_cmd_run"


@pytest.fixture
def prepared(monkeypatch):
    """``sim.program_run.prepare`` replaced: records its arguments, then fails as a bad
    program does (``SimError``), so ``npu board run`` stops before the serial port."""
    import sim.program_run as run

    calls = []

    def prepare(path, device, **kw):
        calls.append(dict(path=path, device=device, **kw))
        raise run.SimError(f"{path}: not a program (stand-in)")

    monkeypatch.setattr(run, "prepare", prepare)
    return calls


def test_a_program_that_does_not_prepare(tmp_path, prepared, capsys):
    prog = tmp_path / "x.bin"
    prog.write_bytes(b"junk")
    assert main(["board", "run", str(prog), "--port", "p", "--seed", "4"]) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == f"npu board run: error: {prog}: not a program (stand-in)\n"
    # no --device and no build directory: the bitstream's default device, tiny
    assert prepared == [dict(path=str(prog), device="tiny", memory=None, image=None, seed=4)]


@pytest.mark.parametrize(("manifest", "device"), [
    (b'{"target": "small"}', "small"),
    ('{"target": "sim", "model": "caf\u00e9"}'.encode("utf-16"), "sim"),
    (b'{"target": "huge"}', "tiny"),             # not a shipped device: the default
    (b'["small"]', "tiny"),
    (b'{"target": ', "tiny"),
    (None, "tiny"),
])
def test_a_build_directory_chooses_its_device(tmp_path, prepared, capsys, manifest, device):
    (tmp_path / "model.bin").write_bytes(b"junk")
    if manifest is not None:
        (tmp_path / "manifest.json").write_bytes(manifest)
    assert main(["board", "run", str(tmp_path), "--port", "p"]) == 1
    # no model.image.safetensors in the directory: no image
    assert prepared == [dict(path=str(tmp_path / "model.bin"), device=device, memory=None,
                             image=None, seed=None)]
    capsys.readouterr()


def test_a_build_directory_brings_its_image(tmp_path, prepared, capsys):
    (tmp_path / "model.bin").write_bytes(b"junk")
    (tmp_path / "model.image.safetensors").write_bytes(b"junk")
    main(["board", "run", str(tmp_path), "--port", "p"])
    assert prepared[0]["image"] == str(tmp_path / "model.image.safetensors")
    capsys.readouterr()
    assert main(["board", "run", str(tmp_path), "--port", "p", "--memory", "in.npz"]) == 1
    assert capsys.readouterr().err == ("npu board run: error: a build directory brings its "
                                       "memory image; --memory does not apply\n")
    assert len(prepared) == 1


def test_a_directory_that_is_not_a_build(tmp_path, prepared, capsys):
    assert main(["board", "run", str(tmp_path), "--port", "p"]) == 1
    assert capsys.readouterr().err == (f"npu: error: {tmp_path}: not a build directory "
                                       "(no model.bin)\n")
    assert prepared == []


def _board_for(tmp_path, monkeypatch, *, statuses, info_fails=False):
    """A small gemm and a stand-in board (the bridge model) whose STATUS goes through
    *statuses*; the serial link, the clock and the sleeps recorded."""
    import types

    from npu.board import host
    from npu.board import protocol as p
    from npu.board.model import BridgeModel
    from npu.engine.config import EngineConfig
    from npu.engine.top import engine_register_map
    from sim.engine_nmu_programs import gemm_tiles
    from sim.engine_programs import _header

    regmap = engine_register_map(EngineConfig.shipped("small"))
    states = iter(statuses)
    record = types.SimpleNamespace(sleeps=[], clock=[100.0])

    class Board:
        def __init__(self, port, *, baud, timeout):
            self.model = BridgeModel(regmap, memory_bytes=1 << 16, ro_values={"STATUS": 1})
            self.decoder = p.ReplyDecoder()

        def transact(self, frame):
            if frame[1] == p.Command.INFO and info_fails:
                return p.Reply(p.Status.BUS, b"")
            if frame[1] == p.Command.STATUS:
                self.model.ro_values.update(STATUS=next(states), CYCLES=77)
            (reply,) = self.decoder.feed(self.model.feed_all(frame))
            return reply

        def close(self):
            pass

    def monotonic():
        record.clock[0] += 1.25
        return record.clock[0]

    monkeypatch.setattr(host, "SerialLink", Board)
    monkeypatch.setattr(host, "time", types.SimpleNamespace(
        monotonic=monotonic, sleep=record.sleeps.append))
    text, _ = gemm_tiles(4, 8, 8, 4, seed=2)
    source = tmp_path / "g.nem"
    source.write_text(_header("small") + text)
    return source, record


def test_polls_sleep_briefly_between_polls_and_the_time_is_reported(tmp_path, monkeypatch,
                                                                      capsys):
    source, record = _board_for(tmp_path, monkeypatch, statuses=[1, 1, 1, 3])
    assert main(["board", "run", str(source), "--port", "p", "--device", "small"]) == 1
    out = capsys.readouterr().out
    # three waits between four polls, each a positive pause well below the reply timeout
    assert len(record.sleeps) == 3
    assert all(isinstance(s, float) and 0 < s <= 0.1 for s in record.sleeps)
    # the stand-in clock moves 1.25 s per reading: began, then the report
    assert "board: STATUS ERROR after 77 cycles (1.2 s over the UART, 4 polls)\n" in out


def test_an_info_error_names_info(tmp_path, monkeypatch, capsys):
    source, _ = _board_for(tmp_path, monkeypatch, statuses=[2], info_fails=True)
    assert main(["board", "run", str(source), "--port", "p", "--device", "small"]) == 1
    assert capsys.readouterr().err == "npu: error: INFO: the board replied BUS\n"
