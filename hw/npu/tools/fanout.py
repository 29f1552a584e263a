"""Register replication on a Yosys JSON netlist: high-fan-out flip-flops split into copies.

A flip-flop that drives hundreds of cell inputs (a unit's ``busy`` into the enables of
every address register, a decoded mode flag into a datapath) is one net spread over
much of the die: on the ECP5 most of the board's worst paths are such routes (70-89 %
of their delay, ``docs/fpga.md``). :func:`replicate_registers` gives each such flip-flop
copies, each with the original's inputs (D, clock, enable, set/reset) and parameters, so
that every copy holds the same value in every cycle, and hands each copy at most
``max_fanout`` of the original's sinks. The placer can then put each copy beside its
sinks; the long wire moves in front of the copies, into the path that ends at their D
inputs, which is the original's own D path (a register-to-register path of its own).
A copy's input pins are sinks of the flip-flops that drive them and count toward their
bound, so afterwards no flip-flop of the module drives more than ``max_fanout``.

Sinks are grouped by the name of the cell they belong to (Yosys names a mapped cell after
the register or signal it implements, so one register's bits and the logic in front of
them sort together): a proxy for what the placer will put side by side.

The netlist is the JSON that ``synth_ecp5 -json`` writes and nextpnr reads
(``modules -> top -> cells``, bits as integers, constants as strings). The transform runs
between synthesis and place and route (``npu.board.build --max-fanout``).
"""

from __future__ import annotations

import json
from collections import defaultdict
from copy import deepcopy
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "REGISTER_CELLS",
    "FanoutError",
    "Replication",
    "replicate_file",
    "replicate_registers",
]

#: Cell type -> its output port, for the cells that are copied (ECP5 flip-flops).
REGISTER_CELLS = {"TRELLIS_FF": "Q"}


class FanoutError(ValueError):
    """The netlist is not what the transform expects (names the module, cell or port)."""


@dataclass(frozen=True)
class Replication:
    """What :func:`replicate_registers` did.

    Attributes
    ----------
    registers : int
        Flip-flops that had more than ``max_fanout`` sinks and got copies.
    copies : int
        Flip-flops added.
    largest : int
        The largest fan-out before (0 when no flip-flop drives anything).
    largest_after : int
        The largest fan-out of a flip-flop after.
    """

    registers: int
    copies: int
    largest: int
    largest_after: int


def replicate_registers(netlist, top, max_fanout, *, cell_types=REGISTER_CELLS):
    """Copy every flip-flop of ``top`` whose output drives more than ``max_fanout`` cell
    inputs, in place, so that no flip-flop drives more than ``max_fanout``.

    Parameters
    ----------
    netlist : dict
        A Yosys JSON netlist (``json.load`` of ``synth_ecp5 -json``); changed in place.
    top : str
        The flattened top module.
    max_fanout : int
        Most cell inputs one flip-flop drives afterwards (at least 2). The top module's
        output ports driven by a flip-flop stay on the original and do not count.
    cell_types : dict of str to str
        Cell types to copy and their single output port.

    Returns
    -------
    Replication

    Raises
    ------
    FanoutError
        ``top`` is not in the netlist, ``max_fanout`` is below 2, or a cell to copy does
        not have its output port as a single bit.
    """
    if not isinstance(max_fanout, int) or max_fanout < 2:
        raise FanoutError(f"max_fanout must be an integer of at least 2, not {max_fanout!r}")
    modules = netlist.get("modules", {})
    if top not in modules:
        raise FanoutError(f"no module {top!r} in the netlist (it has "
                          f"{', '.join(sorted(modules)) or 'none'})")
    module = modules[top]
    cells = module.get("cells", {})
    drivers = {}                    # output bit -> the cell to copy that drives it
    for name, cell in cells.items():
        out = cell_types.get(cell.get("type"))
        if out is None:
            continue
        q = cell.get("connections", {}).get(out)
        if not isinstance(q, list) or len(q) != 1:
            raise FanoutError(f"cell {name!r} ({cell.get('type')}) in {top!r}: output "
                              f"port {out!r} is {q!r}, not one bit")
        if isinstance(q[0], int):
            drivers[q[0]] = name
    sinks = _sinks(cells)
    largest = max((len(sinks.get(b, ())) for b in drivers), default=0)

    # How many copies each driver needs. A copy reads its original's inputs, so it adds a
    # sink to each of their drivers: count those too, until no count changes (each round
    # adds fewer copies than the one before, by a factor of max_fanout at least).
    reads = {name: [b for port, bits in cells[name]["connections"].items()
                    if cells[name].get("port_directions", {}).get(port) != "output"
                    for b in bits if isinstance(b, int)] for name in drivers.values()}
    extra = dict.fromkeys(drivers, 0)      # sinks the copies of other drivers add
    need = dict.fromkeys(drivers, 0)       # copies per driver (by its output bit)
    while True:
        want = {b: max(0, -(-(len(sinks.get(b, ())) + extra[b]) // max_fanout) - 1)
                for b in drivers}
        if want == need:
            break
        need = want
        extra = dict.fromkeys(drivers, 0)
        for b, n in need.items():
            for r in reads[drivers[b]]:
                if r in extra:
                    extra[r] += n

    names = {}
    for net, entry in module.get("netnames", {}).items():
        for i, bit in enumerate(entry.get("bits", [])):
            if isinstance(bit, int) and bit not in names:
                names[bit] = net if len(entry["bits"]) == 1 else f"{net}[{i}]"
    next_bit = 1 + max((b for bits in _all_bits(module) for b in bits), default=1)
    # the copies first, reading what their originals read; then every driver's sinks,
    # the copies' input pins among them, handed out in groups of at most max_fanout
    taken = [f"{drivers[b]}$fo{k}" for b, n in need.items() for k in range(1, n + 1)
             if f"{drivers[b]}$fo{k}" in cells]
    if taken:
        raise FanoutError(f"cell {taken[0]!r} already exists in {top!r}: the netlist was "
                          f"replicated before")
    outputs = {}                           # driver's bit -> its bit and its copies' bits
    for bit, n in need.items():
        if n <= 0:
            continue
        name = drivers[bit]
        out = cell_types[cells[name]["type"]]
        outputs[bit] = [bit]
        for k in range(1, n + 1):
            copy = deepcopy(cells[name])
            copy["connections"][out] = [next_bit]
            cells[f"{name}$fo{k}"] = copy
            module.setdefault("netnames", {})[f"{names.get(bit, f'{name}.{out}')}$fo{k}"] = {
                "hide_name": 0, "bits": [next_bit], "attributes": {}}
            outputs[bit].append(next_bit)
            next_bit += 1
    sinks = _sinks(cells)
    for bit, bits in outputs.items():
        users = sorted(sinks[bit])
        for k, new_bit in enumerate(bits[1:], start=1):
            for sink, port, i in users[k * max_fanout:(k + 1) * max_fanout]:
                cells[sink]["connections"][port][i] = new_bit
    sinks = _sinks(cells)
    registers, copies = len(outputs), sum(len(b) - 1 for b in outputs.values())
    largest_after = max((len(sinks.get(b, ())) for b in
                         [*drivers, *(b for bits in outputs.values() for b in bits[1:])]),
                        default=0)
    return Replication(registers, copies, largest, largest_after)


def _sinks(cells):
    """Input bit -> the ``(cell, port, index)`` pins that read it."""
    sinks = defaultdict(list)
    for name, cell in cells.items():
        dirs = cell.get("port_directions", {})
        for port, bits in cell.get("connections", {}).items():
            if dirs.get(port) == "output":
                continue
            for i, bit in enumerate(bits):
                if isinstance(bit, int):
                    sinks[bit].append((name, port, i))
    return sinks


def _all_bits(module):
    for cell in module.get("cells", {}).values():
        for bits in cell.get("connections", {}).values():
            yield [b for b in bits if isinstance(b, int)]
    for port in module.get("ports", {}).values():
        yield [b for b in port.get("bits", []) if isinstance(b, int)]
    for entry in module.get("netnames", {}).values():
        yield [b for b in entry.get("bits", []) if isinstance(b, int)]


def replicate_file(source, dest, top, max_fanout):
    """:func:`replicate_registers` from one JSON file into another.

    Parameters
    ----------
    source, dest : path-like
        The netlist read and the one written (may be the same file).
    top : str
    max_fanout : int

    Returns
    -------
    Replication

    Raises
    ------
    FanoutError
        ``source`` is not a readable JSON netlist, or as :func:`replicate_registers`.
    """
    source = Path(source)
    try:
        netlist = json.loads(source.read_text())
    except (OSError, UnicodeDecodeError) as e:
        raise FanoutError(f"{source}: cannot read the netlist: {e}") from None
    except json.JSONDecodeError as e:
        raise FanoutError(f"{source}:{e.lineno}:{e.colno}: not JSON: {e.msg}") from None
    if not isinstance(netlist, dict):
        raise FanoutError(f"{source}: a Yosys netlist is a JSON object, not "
                          f"{type(netlist).__name__}")
    result = replicate_registers(netlist, top, max_fanout)
    Path(dest).write_text(json.dumps(netlist))
    return result


def main(argv=None):
    """``python -m npu.tools.fanout IN.json OUT.json --top T --max-fanout N``."""
    import argparse
    import sys

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source")
    parser.add_argument("dest")
    parser.add_argument("--top", required=True)
    parser.add_argument("--max-fanout", type=int, default=32)
    args = parser.parse_args(argv)
    try:
        r = replicate_file(args.source, args.dest, args.top, args.max_fanout)
    except FanoutError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{r.registers} flip-flops above {args.max_fanout} sinks (largest {r.largest}): "
          f"{r.copies} copies added, largest fan-out now {r.largest_after}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
