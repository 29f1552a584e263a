"""``npu nem sim``: bound programs on the engine RTL (cocotb + Verilator) against the
executor.

The engine build is the regression's for the ``small`` device (same design parameters, so
``build/sim`` is shared with ``npu sim``). Four RTL runs: the tiled copy program through the
Python API (the match, the trace and the mismatch report all use this one run), the NMU
gemm through the CLI from a task binary and its memory image, a binary whose first task
waits on tokens nobody signals (the watchdog), and a run stopped by the cycle budget.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from nem.binder import bind
from nem.checker import Region, check_file
from nem.taskformat import BUFFER_ENTRY, HEADER, MAGIC, TASK_HEADER, encode
from npu.engine.config import DEVICE_DIR, DEVICES, EngineConfig
from npu.tools.cli import main
from sim.engine_programs import TILED, nmu_programs
from sim.program_run import chrome_trace, compare, expected, prepare, region_bytes, simulate

needs_rtl = pytest.mark.cocotb  # the tests that run the engine in Verilator

T, TB = 6, 256  # the tiled program's tiles and tile bytes (sim/engine_programs.TILED)


@pytest.fixture(scope="module")
def tiled(tmp_path_factory):
    """One RTL run of the tiled copy program: (prepared, executor result, RTL run)."""
    path = tmp_path_factory.mktemp("tiled") / "tiled.nem"
    path.write_text(TILED)
    prep = prepare(path, "small", seed=11)
    return prep, expected(prep), simulate(prep)


@needs_rtl
def test_tiled_matches_the_executor_and_the_hand_result(tiled):
    prep, want, rtl = tiled
    assert rtl.status == "DONE" and not rtl.budget_hit
    assert compare(prep, want.buffers(), rtl.buffers) is None
    # by hand: tile i of IN goes S -> X -> R at tile T-1-i, and R goes to OUT whole
    inp = prep.initial["IN"].reshape(T, TB)
    assert np.array_equal(rtl.buffers["OUT"].reshape(T, TB), inp[::-1])
    c = rtl.counters
    assert c["TASKS_ISSUED"] == c["TASKS_DONE"] == len(prep.program.tasks) == 2 + 2 * T
    assert c["BYTES_DDR_L2"] == c["BYTES_L2_DDR"] == T * TB
    # the cycle model is fitted to the engine (docs/engine.md: tiled 740 RTL against 807
    # modelled on this device); a counter that does not count, or a model gone astray,
    # leaves the band
    assert 0.8 * want.total_cycles < c["CYCLES"] < 1.25 * want.total_cycles


@needs_rtl
def test_trace_holds_both_timelines(tiled):
    prep, want, rtl = tiled
    trace = chrome_trace(prep, rtl, want)
    json.dumps(trace)
    names = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
             if e["ph"] == "M" and e["name"] == "process_name"}
    assert names[1].startswith("RTL") and names[2].startswith("executor")
    for pid in (1, 2):
        spans = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == pid]
        assert sorted(e["args"]["task"] for e in spans) == list(range(2 + 2 * T))
        assert all(e["dur"] > 0 for e in spans)
    rtl_spans = sorted((e for e in trace["traceEvents"] if e["ph"] == "X" and e["pid"] == 1),
                       key=lambda e: e["args"]["task"])
    starts = [e["ts"] for e in rtl_spans]
    assert starts == sorted(starts)  # the SEQ issues in stream order
    assert rtl_spans[-1]["ts"] + rtl_spans[-1]["dur"] <= rtl.counters["CYCLES"]
    assert rtl_spans[0]["name"].startswith("t0 ")  # source labels


@needs_rtl
def test_mismatch_names_the_first_wrong_task(tiled):
    """The comparison gets a deliberately wrong executor result: one byte flipped.

    Byte 300 of R lies in tile 1 (bytes 256..511), which the store ``b`` of iteration
    i = T-1-1 = 4 writes; the stream is t0, then a, b per iteration (a = 1 + 2i,
    b = 2 + 2i), so that is task 10. OUT is written only by t9, task 13 = 2T + 1.
    """
    prep, want, rtl = tiled
    wrong = want.buffers()
    wrong["OUT"][700] ^= 0x5A
    m = compare(prep, wrong, rtl.buffers)
    assert (m.task, m.buffer, m.offset, m.differing) == (2 * T + 1, "OUT", 700, 1)
    assert m.rtl == rtl.buffers["OUT"][700] and m.executor == rtl.buffers["OUT"][700] ^ 0x5A
    assert m.label.startswith("t9 ")
    wrong["R"][300] ^= 0xFF
    m = compare(prep, wrong, rtl.buffers)
    assert (m.task, m.buffer, m.offset) == (10, "R", 300)
    assert m.label.startswith("b ") and "i=4" in m.label
    text = str(m)
    for part in ("task 10", "buffer R", "byte offset 300", f"RTL {int(m.rtl):#04x}",
                 f"executor {int(m.rtl) ^ 0xFF:#04x}"):
        assert part in text, (part, text)


def _bind(tmp_path, text, name):
    path = tmp_path / f"{name}.nem"
    path.write_text(text)
    result = check_file(path, device=str(DEVICE_DIR / DEVICES["small"][0]))
    assert result.ok, result.diagnostics
    return path, result


@needs_rtl
def test_gemm_from_binary_and_image_via_cli(tmp_path, capsys):
    text, inputs = nmu_programs("small")["gemm"]
    path, _ = _bind(tmp_path, text, "gemm")
    rng = np.random.default_rng(5)
    memory = {"A": rng.integers(-128, 128, 960, dtype=np.int8),
              "B": rng.integers(-128, 128, 480, dtype=np.int8), **inputs}
    np.savez(tmp_path / "in.npz", **memory)
    device = str(DEVICE_DIR / DEVICES["small"][0])
    assert main(["nem", "bind", str(path), "--device", device, "-o", str(tmp_path / "g.bin"),
                 "--image", str(tmp_path / "g.img"), "--memory", str(tmp_path / "in.npz")]) == 0
    capsys.readouterr()
    out_npz, trace = tmp_path / "out.npz", tmp_path / "t.json"
    status = main(["nem", "sim", str(tmp_path / "g.bin"), "--device", "small", "--image",
                   str(tmp_path / "g.img"), "-o", str(out_npz), "--trace", str(trace)])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "match:" in out and "RTL / executor" in out and "NMU MACs" in out
    with np.load(out_npz) as final:
        assert np.array_equal(final["A"].view(np.int8), memory["A"])
        assert final["Y"].any()
    assert json.loads(trace.read_text())["otherData"]["rtl_cycles"] > 0


@needs_rtl
def test_hang_ends_by_the_watchdog(tmp_path, capsys):
    """The first task waits on every token; START clears them and nobody signals before it
    runs. The executor refuses the binary (it would wait forever); the RTL must stop with
    cause WATCHDOG at task 0 and the command exit 1."""
    _, result = _bind(tmp_path, TILED, "tiled")
    data = bytearray(encode(bind(result)))
    header = HEADER.unpack(bytes(data))
    first = HEADER.size + header["buffer_count"] * BUFFER_ENTRY.size
    assert header["stream_offset"] == first
    TASK_HEADER.patch(data, first, "wait", (1 << EngineConfig.shipped("small").tokens) - 1)
    (tmp_path / "hang.bin").write_bytes(bytes(data))
    status = main(["nem", "sim", str(tmp_path / "hang.bin"), "--device", "small",
                   "--watchdog", "2000", "--budget", "100000"])
    out = capsys.readouterr().out
    assert status == 1, out
    assert "refuses the binary" in out and "wait forever" in out
    assert "cause WATCHDOG at task 0" in out and "SEQ state" in out


@needs_rtl
def test_cycle_budget_stops_a_run(tmp_path, capsys):
    path, _ = _bind(tmp_path, TILED, "tiled")
    status = main(["nem", "sim", str(path), "--device", "small", "--budget", "200",
                   "--seed", "2"])
    out = capsys.readouterr().out
    assert status == 1, out
    assert "no end within the cycle budget" in out and "STATUS BUSY" in out
    assert "SEQ state" in out


def test_cli_errors(tmp_path, capsys):
    assert main(["nem", "sim", str(tmp_path / "none.nem"), "--device", "small"]) == 1
    assert "none.nem: no such file" in capsys.readouterr().err
    assert main(["nem", "sim", str(tmp_path), "--device", "small"]) == 1
    assert f"{tmp_path}: is a directory" in capsys.readouterr().err
    (tmp_path / "p.nem").write_text(TILED)
    assert main(["nem", "sim", str(tmp_path / "p.nem"), "--device", "small", "--image",
                 str(tmp_path / "none.img")]) == 1
    assert "--image" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["nem", "sim", str(tmp_path / "none.nem"), "--device", "big"])
    assert exc.value.code == 2
    assert "invalid choice: 'big'" in capsys.readouterr().err
    bad = tmp_path / "bad.nem"
    bad.write_text("program p:\nbuffer A : DDR (size=16)\nt = transfer.async(dst=nowhere)\n")
    assert main(["nem", "sim", str(bad), "--device", "small"]) == 1
    err = capsys.readouterr().err
    assert "bad.nem" in err and "not a valid NEM program" in err
    truncated = tmp_path / "cut.bin"
    truncated.write_bytes(MAGIC + bytes(10))
    assert main(["nem", "sim", str(truncated), "--device", "small"]) == 1
    assert "cut.bin" in capsys.readouterr().err


def test_region_bytes_by_hand():
    """The bytes a strided region covers, worked out by hand: i16 [2, 3] with element
    strides [4, 1] covers elements 0, 1, 2, 4, 5, 6, i.e. bytes 0-5 and 8-13, plus the
    offset 8; i4 [2, 2] with strides [3, 1] covers nibbles 0, 1, 3, 4, i.e. bytes 0, 1, 2."""
    r = Region(None, "B", "L1", 0, 8, 14, elem="i16", shape=(2, 3), strides=(4, 1))
    assert region_bytes(r).tolist() == [8, 9, 10, 11, 12, 13, 16, 17, 18, 19, 20, 21]
    r = Region(None, "B", "L1", 0, 5, 3, elem="i4", shape=(2, 2), strides=(3, 1))
    assert region_bytes(r).tolist() == [5, 6, 7]
    r = Region(None, "B", "DDR", None, 3, 4)  # untyped: its byte range
    assert region_bytes(r).tolist() == [3, 4, 5, 6]
