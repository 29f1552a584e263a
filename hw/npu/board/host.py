"""Host side of the board: ``npu board run PROG.bin|DIR --port /dev/ttyUSB0``.

The host logic is written once, sans-I/O, as generators that yield request frames
(:mod:`npu.board.protocol`) and receive :class:`~npu.board.protocol.Reply` objects:

* :func:`session` loads a prepared program (the DDR image: its DDR buffers' initial
  bytes and the task binary at ``base``) in MEM_WRITE chunks, starts it, polls STATUS and
  reads every DDR buffer and the engine's counters back.

Two drivers run them: :func:`drive` over a blocking :class:`SerialLink` (pyserial, the
board) and :func:`drive_async` over any ``async transact(frame) -> Reply`` (the cocotb
testbench ``sim/tb_board.py``, which moves the bytes over the simulated UART pins). Both
therefore exercise the same code.

The board's memory is the engine's DDR; L1 and L2 sit inside the engine and the bridge
cannot reach them, so a program whose L1/L2 buffers need initial bytes is refused, and only
DDR buffers are read back and compared with the executor (the report says which buffers
were not checked).
"""

from __future__ import annotations

import json
import os
import struct
import sys
import time
from dataclasses import dataclass, field

import numpy as np

from nem.target import SHIPPED
from npu.board import protocol as p

__all__ = ["BoardError", "BoardRun", "SerialLink", "board_image", "drive", "drive_async",
           "register", "session"]

#: Bytes per MEM_WRITE / MEM_READ frame.
CHUNK = 4 * p.MAX_WORDS


class BoardError(RuntimeError):
    """The board could not run the program (no reply, an error reply, a refusal)."""


@dataclass
class BoardRun:
    """What :func:`session` read back."""

    status: str
    cause: int
    task: int
    counters: dict[str, int]
    buffers: dict[str, np.ndarray] = field(repr=False)
    polls: int = 0


def board_image(program, initial, base, binary, memory_bytes):
    """The DDR image: DDR buffers' initial bytes, the binary at *base*; padded to words.

    Raises :class:`BoardError` naming the buffer when an L1/L2 buffer has initial bytes or
    the image does not fit in *memory_bytes*.
    """
    end = base + len(binary)
    if end > memory_bytes:
        raise BoardError(f"the program needs {end} bytes of DDR (binary at {base:#x}); the "
                         f"board has {memory_bytes}")
    image = np.zeros(-(-end // 4) * 4, dtype=np.uint8)
    for b in program.buffers:
        if b.name not in initial:
            continue
        if b.level != "DDR":
            raise BoardError(f"buffer {b.name} in {b.level} needs initial bytes; the board "
                             "loads DDR only (the bridge cannot reach L1/L2)")
        image[b.address:b.address + b.size] = initial[b.name]
    image[base:end] = np.frombuffer(binary, dtype=np.uint8)
    return image


def _read_range(address, size):
    """Generator: the bytes [address, address + size) of board memory (word-aligned
    reads)."""
    lo = address & ~3
    hi = -(-(address + size) // 4) * 4
    out = bytearray()
    at = lo
    while at < hi:
        n = min(CHUNK, hi - at)
        reply = yield p.mem_read(at, n // 4)
        out += reply.ok(f"MEM_READ {at:#x}")
        at += n
    return bytes(out[address - lo:address - lo + size])


def session(program, image, base, regmap, *, watchdog=None, max_polls=100_000,
            poll_wait=None, memory_is_zero=False):
    """Generator: load *image*, start the binary at *base*, wait, read back.

    Parameters
    ----------
    program : nem.taskformat.Program
        The bound program (its buffer table says what to read back).
    image : numpy.ndarray of uint8
        From :func:`board_image`.
    base : int
        Byte address of the task binary.
    regmap : npu.bus.csr.RegisterMap
        The engine's CSR map (counter names and offsets).
    watchdog : int, optional
        Written to ``WATCHDOG`` before the start.
    max_polls : int
        STATUS polls before giving up (:class:`BoardError`).
    poll_wait : callable, optional
        Called between polls (a sleep on the board; the simulation needs none).
    memory_is_zero : bool
        The board's memory holds zeros (fresh from configuration or reset of a
        simulation): chunks of the image that are all zero are not sent.

    Returns
    -------
    BoardRun
    """
    from npu.engine.seq import Status

    reply = yield p.info()
    info = p.Info.decode(reply.ok("INFO"))
    if not info.engine:
        raise BoardError("the board's bitstream has no engine (INFO)")
    if image.size > info.memory_bytes:
        raise BoardError(f"the image has {image.size} bytes; the board's memory "
                         f"{info.memory_bytes}")
    raw = image.tobytes()
    for at in range(0, len(raw), CHUNK):
        if memory_is_zero and not any(raw[at:at + CHUNK]):
            continue
        reply = yield p.mem_write(at, raw[at:at + CHUNK])
        reply.ok(f"MEM_WRITE {at:#x}")
    if watchdog is not None:
        reply = yield p.csr_write(regmap.offset("WATCHDOG"), watchdog)
        reply.ok("WATCHDOG")
    reply = yield p.start(base)
    reply.ok("START")
    polls = 0
    while True:
        reply = yield p.status()
        state, cause, task, _ = struct.unpack("<4I", reply.ok("STATUS"))
        polls += 1
        if state in (Status.DONE, Status.ERROR):
            break
        if polls >= max_polls:
            raise BoardError(f"the engine is still {Status(state).name} after {polls} "
                             "STATUS polls")
        if poll_wait is not None:
            poll_wait()
    counters = {}
    for reg in regmap.regs:
        if reg.access == "ro":
            reply = yield p.csr_read(reg.offset)
            (counters[reg.name],) = struct.unpack("<I", reply.ok(f"CSR_READ {reg.name}"))
    buffers = {}
    for b in program.buffers:
        if b.level == "DDR":
            data = yield from _read_range(b.address, b.size)
            buffers[b.name] = np.frombuffer(data, dtype=np.uint8).copy()
    return BoardRun(Status(state).name, cause, task, counters, buffers, polls)


def drive(gen, transact):
    """Run generator *gen* with a blocking ``transact(frame) -> Reply``; its return value."""
    reply = None
    try:
        while True:
            reply = transact(gen.send(reply))
    except StopIteration as stop:
        return stop.value


async def drive_async(gen, transact):
    """As :func:`drive` with ``async transact(frame) -> Reply``."""
    reply = None
    try:
        while True:
            reply = await transact(gen.send(reply))
    except StopIteration as stop:
        return stop.value


class SerialLink:
    """Request/reply over a serial port (pyserial).

    Parameters
    ----------
    port : str
        ``/dev/ttyUSB0`` or any pyserial URL (``loop://`` ...).
    baud : int
        Bit rate (the bitstream's; default 1,000,000).
    timeout : float
        Seconds to wait for a whole reply.
    """

    def __init__(self, port, *, baud=p.BAUD, timeout=2.0):
        import serial

        try:
            self.serial = serial.serial_for_url(port, baudrate=baud, timeout=0.05)
        except (serial.SerialException, ValueError) as exc:
            raise BoardError(f"cannot open {port}: {exc}") from None
        self.timeout = timeout
        self.decoder = p.ReplyDecoder()

    def transact(self, frame):
        """Send *frame*; return the reply (:class:`BoardError` if none comes in time)."""
        self.serial.write(frame)
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            data = self.serial.read(max(1, self.serial.in_waiting))
            try:
                replies = self.decoder.feed(data)
            except p.ProtocolError as exc:
                raise BoardError(str(exc)) from None
            if replies:
                return replies[0]
        raise BoardError(f"no reply from the board within {self.timeout} s to command "
                         f"{frame[1]:#04x}")

    def close(self):
        """Close the port."""
        self.serial.close()


def _program_path(path):
    """``(binary or program, memory image or None)`` of *path*: a file as given; a build
    directory of ``npu compile`` gives its ``model.bin`` and ``model.image.safetensors``."""
    if os.path.isdir(path):
        binary = os.path.join(path, "model.bin")
        if not os.path.isfile(binary):
            raise BoardError(f"{path}: not a build directory (no model.bin)")
        image = os.path.join(path, "model.image.safetensors")
        return binary, image if os.path.isfile(image) else None
    return path, None


def _built_for(program):
    """The shipped device a build directory of ``npu compile`` was built for (its
    manifest's target), else None."""
    manifest = os.path.join(program, "manifest.json")
    if not os.path.isfile(manifest):
        return None
    try:
        with open(manifest, "rb") as f:      # json.load detects UTF-8/16/32 itself
            target = json.load(f).get("target")
    except (OSError, ValueError, AttributeError):
        return None
    return target if target in SHIPPED else None


def _cmd_run(args):
    import sim.program_run as run
    from npu.engine.config import EngineConfig
    from npu.engine.top import engine_register_map

    path, image_file = _program_path(args.program)
    if not os.path.isfile(path):
        print(f"npu board run: error: {path}: no such file", file=sys.stderr)
        return 1
    if image_file and args.memory:
        print("npu board run: error: a build directory brings its memory image; "
              "--memory does not apply", file=sys.stderr)
        return 1
    from nem.binder import BindError
    from nem.executor import ExecError
    from nem.memimage import MemoryImageError

    device = args.device or _built_for(args.program) or "tiny"
    try:
        prep = run.prepare(path, device, memory=args.memory, image=image_file,
                           seed=args.seed)
    except (run.SimError, BindError, ExecError, MemoryImageError) as exc:
        print(f"npu board run: error: {exc}", file=sys.stderr)
        return 1
    regmap = engine_register_map(EngineConfig.shipped(device))
    want = run.expected(prep)
    link = SerialLink(args.port, baud=args.baud, timeout=args.timeout)
    try:
        info = p.Info.decode(drive(iter_once(p.info()), link.transact).ok("INFO"))
        image = board_image(prep.program, prep.initial, prep.base, prep.binary,
                            info.memory_bytes)
        print(f"{path}: {len(prep.program.tasks)} task(s), image {image.size} bytes, "
              f"board memory {info.memory_bytes} bytes; inputs: {prep.inputs}")
        began = time.monotonic()
        result = drive(session(prep.program, image, prep.base, regmap,
                               watchdog=args.watchdog, poll_wait=lambda: time.sleep(0.01)),
                       link.transact)
    finally:
        link.close()
    print(f"board: STATUS {result.status} after {result.counters['CYCLES']} cycles "
          f"({time.monotonic() - began:.1f} s over the UART, {result.polls} polls)")
    if result.status != "DONE":
        print(f"board: error cause {result.cause} at task {result.task}")
        return 1
    return report_against_executor(prep, want, result, run)


def iter_once(frame):
    """Generator: one request, its reply returned."""
    reply = yield frame
    return reply


def report_against_executor(prep, want, result, run):
    """Compare the DDR buffers read back with the executor's; print; exit status."""
    if want is None:
        print(f"executor: refuses the binary ({prep.refusal}); nothing to compare")
        return 1
    expected = want.buffers()
    got = dict(expected)
    got.update(result.buffers)
    unchecked = sorted(b.name for b in prep.program.buffers if b.level != "DDR")
    mismatch = run.compare(prep, expected, got)
    if mismatch is not None:
        print(f"MISMATCH: {mismatch}")
        return 1
    total = sum(v.size for v in result.buffers.values())
    print(f"match: {len(result.buffers)} DDR buffer(s), {total} bytes equal the executor's"
          + (f" (not read back: {', '.join(unchecked)} in L1/L2)" if unchecked else ""))
    return 0


def register(subparsers):
    """Add ``npu board run``; return its user-error exception types."""
    board = subparsers.add_parser("board", help="run programs on the ULX3S-85F board")
    sub = board.add_subparsers(dest="board_command", metavar="COMMAND", required=True)
    r = sub.add_parser("run", help="load a task binary over the UART, run it, compare "
                       "with the executor")
    r.add_argument("program", help="a task binary, a .nem program, or a build directory "
                   "of npu compile (its model.bin and memory image)")
    r.add_argument("--port", required=True, help="serial port (e.g. /dev/ttyUSB0)")
    r.add_argument("--device", choices=tuple(SHIPPED),
                   help="the engine device of the bitstream (default: a build directory's "
                   "target, else tiny, make bitstream's)")
    r.add_argument("--memory", metavar="IN.npz", help="initial buffer contents by name")
    r.add_argument("--baud", type=int, default=p.BAUD, help="UART bit rate")
    r.add_argument("--timeout", type=float, default=2.0,
                   help="seconds to wait for each reply (default 2)")
    r.add_argument("--watchdog", type=int, metavar="CYCLES", help="the WATCHDOG register")
    r.add_argument("--seed", type=int, help="seed of random inputs without --memory")
    r.set_defaults(func=_cmd_run)
    return (BoardError, p.ProtocolError)
