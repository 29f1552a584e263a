"""The host session of ``npu board run`` against the bridge's Python model as the board
(memory and CSR bank, no engine: STATUS reads what the test sets), and the serial link's
error paths."""

from __future__ import annotations

import struct
from typing import ClassVar

import numpy as np
import pytest

from nem.taskformat import BufferEntry, Program
from npu.board import protocol as p
from npu.board.host import BoardError, SerialLink, board_image, drive, session
from npu.board.model import BridgeModel
from npu.engine.config import EngineConfig
from npu.engine.top import engine_register_map

REGMAP = engine_register_map(EngineConfig.shipped("small"))


def _board(ro):
    model = BridgeModel(REGMAP, memory_bytes=8192, ro_values=ro)
    decoder = p.ReplyDecoder()
    frames = []

    def transact(frame):
        frames.append(frame)
        (reply,) = decoder.feed(model.feed_all(frame))
        if frame[1] == p.Command.START:
            model.memory[320:327] = b"resulty"   # what the engine would write
        return reply

    return model, transact, frames


def _program():
    bufs = [BufferEntry("X", "DDR", None, 64, 0, 300), BufferEntry("Y", "DDR", None, 64, 320, 7),
            BufferEntry("S", "L2", None, 64, 0, 64)]
    return Program(device_hash=bytes(32), buffers=tuple(bufs), tasks=())


def test_session_loads_starts_polls_and_reads_back():
    program = _program()
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, 300, dtype=np.uint8)
    binary = bytes(range(40))
    image = board_image(program, {"X": x}, 4096, binary, 8192)
    assert image.size == 4096 + 40
    ro = {"STATUS": 2, "CYCLES": 99, "ERROR_CAUSE": 0}
    model, transact, frames = _board(ro)
    run = drive(session(program, image, 4096, REGMAP), transact)
    assert run.status == "DONE" and run.counters["CYCLES"] == 99 and run.polls == 1
    assert bytes(model.memory[:300]) == x.tobytes()
    assert bytes(model.memory[4096:4136]) == binary
    assert model.csr.values["PROG_LO"] == 4096 and model.csr.pulses == ["START"]
    assert run.buffers["X"].tobytes() == x.tobytes()
    assert run.buffers["Y"].tobytes() == b"resulty"   # unaligned end: word reads trimmed
    assert set(run.buffers) == {"X", "Y"}             # L2 is not reachable
    # chunks of at most 60 words
    assert max(len(f) for f in frames) == 3 + 4 + 240 + 1  # sync, CMD, LEN, address, CRC


def test_session_reports_an_engine_that_never_ends():
    _, transact, _ = _board({"STATUS": 1})
    image = board_image(_program(), {}, 4096, b"\x00" * 8, 8192)
    with pytest.raises(BoardError, match="still BUSY after 3 STATUS polls"):
        drive(session(_program(), image, 4096, REGMAP, max_polls=3), transact)


def test_board_without_engine_and_image_checks():
    model = BridgeModel(REGMAP, memory_bytes=8192, engine=False)
    decoder = p.ReplyDecoder()

    def transact(frame):
        return decoder.feed(model.feed_all(frame))[0]

    image = board_image(_program(), {}, 4096, b"\x00" * 8, 8192)
    with pytest.raises(BoardError, match="no engine"):
        drive(session(_program(), image, 4096, REGMAP), transact)
    with pytest.raises(BoardError, match="buffer S in L2 needs initial bytes"):
        board_image(_program(), {"S": np.zeros(64, np.uint8)}, 4096, b"", 8192)
    with pytest.raises(BoardError, match="needs 4104 bytes of DDR"):
        board_image(_program(), {}, 4096, b"\x00" * 8, 4096)


def test_error_reply_names_the_request():
    reply = p.Reply(p.Status.ADDRESS, b"")
    with pytest.raises(p.ProtocolError, match="MEM_READ 0x10: the board replied ADDRESS"):
        reply.ok("MEM_READ 0x10")


def test_serial_link_without_a_board():
    link = SerialLink("loop://", timeout=0.2)  # an echo: the request, never a reply
    try:
        with pytest.raises(BoardError, match=r"no reply from the board within 0\.2 s"):
            link.transact(p.info())
    finally:
        link.close()
    with pytest.raises(BoardError, match="cannot open /dev/nonexistent-tty"):
        SerialLink("/dev/nonexistent-tty")


def test_reply_decoder_skips_noise_and_rejects_bad_crc():
    frame = p.reply_frame(p.Status.OK, struct.pack("<I", 7))
    d = p.ReplyDecoder()
    assert d.feed(b"\x00\x01" + frame[:3]) == []
    assert d.feed(frame[3:]) == [p.Reply(p.Status.OK, struct.pack("<I", 7))]
    bad = bytearray(frame)
    bad[-1] ^= 1
    with pytest.raises(p.ProtocolError, match="bad CRC"):
        d.feed(bytes(bad))


class _FakeBoard:
    """A board for ``npu board run``: the bridge model, and on START the given DDR results
    written where the engine would write them (STATUS then reads DONE)."""

    results: ClassVar[dict] = {}

    def __init__(self, port, *, baud, timeout):
        self.model = BridgeModel(REGMAP, memory_bytes=1 << 16, ro_values={"STATUS": 0})
        self.decoder = p.ReplyDecoder()

    def transact(self, frame):
        (reply,) = self.decoder.feed(self.model.feed_all(frame))
        if frame[1] == p.Command.START:
            for address, data in self.results.values():
                self.model.memory[address:address + len(data)] = data
            self.model.ro_values.update(STATUS=2, CYCLES=1234)
        return reply

    def close(self):
        pass


@pytest.mark.parametrize("corrupt", [False, True])
def test_npu_board_run_compares_with_the_executor(tmp_path, monkeypatch, capsys, corrupt):
    import sim.program_run as run
    from npu.board import host
    from npu.tools.cli import main
    from sim.engine_nmu_programs import gemm_tiles
    from sim.engine_programs import _header

    text, inputs = gemm_tiles(4, 8, 8, 4, seed=2)
    source = tmp_path / "g.nem"
    source.write_text(_header("small") + text)
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "in.npz", A=rng.integers(0, 256, 32, dtype=np.uint8),
             B=rng.integers(0, 256, 64, dtype=np.uint8), **inputs)
    prep = run.prepare(str(source), "small", memory=str(tmp_path / "in.npz"))
    want = run.expected(prep).buffers()
    table = {b.name: b for b in prep.program.buffers}
    y = bytearray(want["Y"].tobytes())
    if corrupt:
        y[5] ^= 0x40
    _FakeBoard.results = {"Y": (table["Y"].address, bytes(y))}
    monkeypatch.setattr(host, "SerialLink", _FakeBoard)
    status = main(["board", "run", str(source), "--port", "fake", "--device", "small",
                   "--memory", str(tmp_path / "in.npz")])
    out = capsys.readouterr().out
    assert "board: STATUS DONE after 1234 cycles" in out
    if corrupt:
        assert status == 1
        assert "MISMATCH" in out and "buffer Y, byte offset 5" in out
    else:
        assert status == 0
        assert "match: 4 DDR buffer(s)" in out and "not read back: " in out


def test_npu_board_run_on_a_build_directory(tmp_path, monkeypatch, capsys):
    """``npu board run DIR``: the build's model.bin with its memory image (weights loaded)."""
    torch = pytest.importorskip("torch")
    import sim.program_run as run
    from nac.compile import compile_module
    from nac.weights import write_nac
    from nem.build_dir import compile_model
    from npu.board import host
    from npu.tools.cli import main

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 8)).eval()
    x = np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32)
    nac, _, _ = compile_module(model, (torch.from_numpy(x),))
    write_nac(nac, tmp_path / "m.nac")
    compile_model(tmp_path / "m.nac", "small", tmp_path / "b", samples=[x])
    prep = run.prepare(str(tmp_path / "b" / "model.bin"), "small",
                       image=str(tmp_path / "b" / "model.image.safetensors"))
    want = run.expected(prep).buffers()
    _FakeBoard.results = {b.name: (b.address, want[b.name].tobytes())
                          for b in prep.program.buffers if b.level == "DDR"}
    monkeypatch.setattr(host, "SerialLink", _FakeBoard)
    # no --device: the build directory's target (small), not the default tiny
    assert main(["board", "run", str(tmp_path / "b"), "--port", "fake"]) == 0
    out = capsys.readouterr().out
    assert "inputs: memory image" in out and "match: " in out
    assert main(["board", "run", str(tmp_path / "b"), "--port", "fake", "--memory",
                 "x.npz"]) == 1
    assert "brings its memory image" in capsys.readouterr().err


def _session_frames(ro, image, **kw):
    """Run a session against the bridge model; the requests sent, the run, the model."""
    model, transact, frames = _board(ro)
    run = drive(session(_program(), image, 4096, REGMAP, **kw), transact)
    return frames, run, model


def test_session_watchdog_zero_chunks_and_polls():
    image = board_image(_program(), {"X": np.ones(300, np.uint8)}, 4096, bytes(40), 8192)
    waits = []
    frames, run, model = _session_frames(
        {"STATUS": 2, "ERROR_CAUSE": 0x80000001, "ERROR_TASK": 3, "CYCLES": 0xFFFFFFFF},
        image, watchdog=0x12345, memory_is_zero=True, poll_wait=lambda: waits.append(1))
    cmds = [f[1] for f in frames]
    writes = [struct.unpack_from("<I", f, 3)[0] for f in frames
              if f[1] == p.Command.MEM_WRITE]
    # 4136 bytes in chunks of 240: only the chunks with a nonzero byte are sent (X at
    # 0..299: chunks 0 and 240); the binary is all zero, so nothing else
    assert writes == [0, 240]
    assert model.csr.values["WATCHDOG"] == 0x12345
    wd = cmds.index(p.Command.CSR_WRITE)
    assert frames[wd] == p.csr_write(REGMAP.offset("WATCHDOG"), 0x12345)
    assert wd < cmds.index(p.Command.START)                # before the start
    assert run.status == "DONE" and run.cause == 0x80000001 and run.task == 3
    assert run.counters["CYCLES"] == 0xFFFFFFFF
    assert run.counters["ERROR_CAUSE"] == 0x80000001
    assert waits == []                                     # DONE on the first poll
    # without memory_is_zero every chunk goes, zero or not; without a watchdog, no write
    frames, _, model = _session_frames({"STATUS": 2}, image)
    assert [struct.unpack_from("<I", f, 3)[0] for f in frames
            if f[1] == p.Command.MEM_WRITE] == list(range(0, 4136, 240))
    assert p.Command.CSR_WRITE not in [f[1] for f in frames]
    (wd_reg,) = [r for r in REGMAP.regs if r.name == "WATCHDOG"]
    assert model.csr.values["WATCHDOG"] == wd_reg.init


def test_session_polls_wait_between_polls():
    states = iter([1, 1, 1, 3])
    waits = []
    model, transact, _ = _board({"STATUS": 1})

    def stepping(frame):
        if frame[1] == p.Command.STATUS:
            model.ro_values["STATUS"] = next(states)
        return transact(frame)

    image = board_image(_program(), {}, 4096, b"\x00" * 8, 8192)
    run = drive(session(_program(), image, 4096, REGMAP, poll_wait=lambda: waits.append(1)),
                stepping)
    assert run.status == "ERROR" and run.polls == 4 and len(waits) == 3


@pytest.mark.parametrize(("fail", "label"), [
    (p.Command.INFO, "INFO"), (p.Command.MEM_WRITE, "MEM_WRITE 0x0"),
    (p.Command.CSR_WRITE, "WATCHDOG"), (p.Command.START, "START"),
    (p.Command.STATUS, "STATUS"), (p.Command.CSR_READ, "CSR_READ ID"),
    (p.Command.MEM_READ, "MEM_READ"),
])
def test_session_error_replies_name_the_request(fail, label):
    _, transact, _ = _board({"STATUS": 2})

    def failing(frame):
        if frame[1] == fail:
            return p.Reply(p.Status.BUS, b"")
        return transact(frame)

    image = board_image(_program(), {}, 4096, b"\x01" * 8, 8192)
    with pytest.raises(p.ProtocolError, match=f"^{label}.*: the board replied BUS$"):
        drive(session(_program(), image, 4096, REGMAP, watchdog=5), failing)


def test_session_image_size_against_the_board_memory():
    _, transact, _ = _board({"STATUS": 2})
    # the model's memory is 8192 bytes: an image of exactly that size loads
    image = board_image(_program(), {}, 8192 - 8, b"\x00" * 8, 8192)
    assert image.size == 8192
    assert drive(session(_program(), image, 8192 - 8, REGMAP), transact).status == "DONE"
    big = np.zeros(8196, np.uint8)
    with pytest.raises(BoardError, match="the image has 8196 bytes; the board's memory 8192"):
        drive(session(_program(), big, 4096, REGMAP), transact)


def test_npu_board_run_options_reach_the_link_and_the_session(tmp_path, monkeypatch, capsys):
    from npu.board import host
    from npu.tools.cli import main
    from sim.engine_nmu_programs import gemm_tiles
    from sim.engine_programs import _header

    seen = {}

    class Recording(_FakeBoard):
        def __init__(self, port, *, baud, timeout):
            super().__init__(port, baud=baud, timeout=timeout)
            seen.update(port=port, baud=baud, timeout=timeout, frames=[])

        def transact(self, frame):
            seen["frames"].append(frame)
            if frame[1] == p.Command.START:         # the engine stops with an error
                self.model.ro_values.update(STATUS=3, ERROR_CAUSE=6, ERROR_TASK=2)
                return self.decoder.feed(self.model.feed_all(frame))[0]
            return super().transact(frame)

    text, _ = gemm_tiles(4, 8, 8, 4, seed=2)
    source = tmp_path / "g.nem"
    source.write_text(_header("small") + text)
    monkeypatch.setattr(host, "SerialLink", Recording)
    status = main(["board", "run", str(source), "--port", "/dev/ttyX", "--device", "small",
                   "--baud", "115200", "--timeout", "3.5", "--watchdog", "777", "--seed", "4"])
    out = capsys.readouterr().out
    assert (seen["port"], seen["baud"], seen["timeout"]) == ("/dev/ttyX", 115200, 3.5)
    assert p.csr_write(REGMAP.offset("WATCHDOG"), 777) in seen["frames"]
    assert status == 1
    assert "board: STATUS ERROR after 0 cycles" in out
    assert "board: error cause 6 at task 2" in out


def test_npu_board_run_missing_program(tmp_path, capsys):
    from npu.tools.cli import main

    missing = tmp_path / "nothing.bin"
    assert main(["board", "run", str(missing), "--port", "fake"]) == 1
    err = capsys.readouterr().err
    assert err == f"npu board run: error: {missing}: no such file\n"


def test_drive_async_runs_a_session_as_drive_does():
    """``drive_async`` (the cocotb test's driver) sends the same requests as ``drive``."""
    import asyncio

    from npu.board.host import drive_async

    image = board_image(_program(), {}, 4096, bytes(range(8)), 8192)
    _, transact, frames = _board({"STATUS": 2, "CYCLES": 5})
    want = drive(session(_program(), image, 4096, REGMAP), transact)
    _, transact2, frames2 = _board({"STATUS": 2, "CYCLES": 5})

    async def atransact(frame):
        await asyncio.sleep(0)
        return transact2(frame)

    got = asyncio.run(drive_async(session(_program(), image, 4096, REGMAP), atransact))
    assert frames2 == frames
    assert (got.status, got.counters, got.polls) == (want.status, want.counters, want.polls)
    assert {k: v.tobytes() for k, v in got.buffers.items()} == \
        {k: v.tobytes() for k, v in want.buffers.items()}
    assert got.buffers["Y"].tobytes() == b"resulty"


def test_session_sends_nonzero_chunks_after_zero_ones():
    """With ``memory_is_zero`` a zero chunk is skipped and the load goes on after it."""
    binary = bytes(8) + b"\x07" + bytes(7)          # one nonzero byte at 4096 + 8
    image = board_image(_program(), {"X": np.ones(300, np.uint8)}, 4096, binary, 8192)
    frames, _, model = _session_frames({"STATUS": 2}, image, memory_is_zero=True)
    writes = [struct.unpack_from("<I", f, 3)[0] for f in frames
              if f[1] == p.Command.MEM_WRITE]
    # chunks of 240: X covers chunks 0 and 240; 4104 lies in chunk 17 (4080..4319)
    assert writes == [0, 240, 17 * 240]
    assert model.memory[4104] == 7


def test_session_gives_up_after_100000_polls():
    """The documented limit (docs/board.md): 100,000 STATUS polls of a running engine."""
    _, transact, _ = _board({"STATUS": 1})
    polls = []

    def busy(frame):
        if frame[1] == p.Command.STATUS:
            polls.append(1)
            return p.Reply(p.Status.OK, struct.pack("<4I", 1, 0, 0, 0))
        return transact(frame)

    image = board_image(_program(), {}, 4096, b"\x01" * 8, 8192)
    with pytest.raises(BoardError, match=r"^the engine is still BUSY after 100000 STATUS polls$"):
        drive(session(_program(), image, 4096, REGMAP), busy)
    assert len(polls) == 100_000


def test_session_refuses_a_bitstream_without_engine():
    model = BridgeModel(REGMAP, memory_bytes=8192, engine=False)
    decoder = p.ReplyDecoder()

    def transact(frame):
        (reply,) = decoder.feed(model.feed_all(frame))
        return reply

    image = board_image(_program(), {}, 4096, b"\x01" * 8, 8192)
    with pytest.raises(BoardError, match=r"^the board's bitstream has no engine \(INFO\)$"):
        drive(session(_program(), image, 4096, REGMAP), transact)


def test_buffers_read_back_in_aligned_chunks():
    """An unaligned buffer longer than a chunk: word-aligned MEM_READs of at most 240 bytes
    from the word below its start to the word above its end, ending at the memory's end."""
    bufs = (BufferEntry("Z", "DDR", None, 64, 8192 - 502, 501),)
    program = Program(device_hash=bytes(32), buffers=bufs, tasks=())
    image = board_image(program, {}, 0, b"\x01" * 8, 8192)
    model, transact, frames = _board({"STATUS": 2})
    model.memory[:] = np.random.default_rng(3).integers(0, 256, 8192, dtype=np.uint8).tobytes()
    got = drive(session(program, image, 0, REGMAP), transact)
    reads = [struct.unpack_from("<IB", f, 3) for f in frames if f[1] == p.Command.MEM_READ]
    # 7690 .. 8190: words from 7688 to 8192 (504 bytes) = 240 + 240 + 24 bytes
    assert reads == [(7688, 60), (7928, 60), (8168, 6)]
    assert got.buffers["Z"].tobytes() == bytes(model.memory[7690:8191])


def test_board_image_refuses_initial_bytes_outside_ddr():
    with pytest.raises(BoardError, match=r"^buffer S in L2 needs initial bytes; the board "
                                         r"loads DDR only \(the bridge cannot reach L1/L2\)$"):
        board_image(_program(), {"S": np.zeros(64, np.uint8)}, 4096, b"\x00" * 8, 8192)


def _report(buffers, results, *, want=True, mismatch=None):
    """report_against_executor with stand-ins for the prepared run and the executor."""
    import types

    from npu.board.host import report_against_executor

    program = Program(device_hash=bytes(32), buffers=tuple(buffers), tasks=())
    prep = types.SimpleNamespace(program=program, refusal="no reason")
    expected = {b.name: np.zeros(b.size, np.uint8) for b in buffers}
    executor = types.SimpleNamespace(buffers=lambda: expected) if want else None
    seen = {}

    def compare(prep_, exp, got):
        seen.update(got)
        return mismatch

    result = types.SimpleNamespace(buffers=results)
    status = report_against_executor(prep, executor, result,
                                     types.SimpleNamespace(compare=compare))
    return status, seen


def test_report_names_the_buffers_it_did_not_read(capsys):
    ddr = [BufferEntry("A", "DDR", None, 64, 0, 6), BufferEntry("B", "DDR", None, 64, 64, 4)]
    back = {"A": np.ones(6, np.uint8), "B": np.ones(4, np.uint8)}
    status, seen = _report(ddr, back)
    assert status == 0
    assert capsys.readouterr().out == "match: 2 DDR buffer(s), 10 bytes equal the executor's\n"
    assert seen["A"] is back["A"]
    inner = [BufferEntry("W", "L2", None, 64, 0, 8), BufferEntry("T", "L1", None, 64, 0, 8)]
    assert _report(ddr + inner, back)[0] == 0
    assert capsys.readouterr().out == ("match: 2 DDR buffer(s), 10 bytes equal the "
                                       "executor's (not read back: T, W in L1/L2)\n")
    assert _report(ddr, back, mismatch="buffer A, byte offset 2")[0] == 1
    assert capsys.readouterr().out == "MISMATCH: buffer A, byte offset 2\n"
    assert _report(ddr, back, want=False)[0] == 1
    assert capsys.readouterr().out == ("executor: refuses the binary (no reason); nothing "
                                       "to compare\n")
