"""``constraints/ulx3s-85f.lpf`` against amaranth-boards' ULX3S-85F platform and the board
top's ports: every port of :class:`npu.board.top.BoardTop` is constrained, at the
platform's pin with its I/O standard and drive, and the oscillator's frequency is the
platform's clock."""

from __future__ import annotations

import re

import pytest

from npu.board.build import LPF

ulx3s = pytest.importorskip("amaranth_boards.ulx3s",
                            reason="amaranth-boards (the dev extra) is not installed")

LOCATE = re.compile(r'^LOCATE COMP "([^"]+)" SITE "([^"]+)";$')
IOBUF = re.compile(r'^IOBUF PORT "([^"]+)"((?: \w+=\w+)*);$')
FREQ = re.compile(r'^FREQUENCY PORT "([^"]+)" ([\d.]+) MHZ;$')


def _parse(text):
    sites, attrs, freqs = {}, {}, {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line in ("BLOCK RESETPATHS;", "BLOCK ASYNCPATHS;"):
            continue
        if m := LOCATE.match(line):
            assert m.group(1) not in sites, f"line {number}: {m.group(1)} located twice"
            sites[m.group(1)] = m.group(2)
        elif m := IOBUF.match(line):
            attrs[m.group(1)] = dict(kv.split("=") for kv in m.group(2).split())
        elif m := FREQ.match(line):
            freqs[m.group(1)] = float(m.group(2))
        else:
            raise AssertionError(f"{LPF}:{number}: not a LOCATE, IOBUF or FREQUENCY line: "
                                 f"{raw!r}")
    return sites, attrs, freqs


def _platform_pins():
    """Port name -> (site, attrs) from the platform's resources."""
    platform = ulx3s.ULX3S_85F_Platform()
    out = {}

    def pin(resource, sub=None):
        ios = resource.ios
        attrs = dict(resource.attrs)
        if sub is not None:
            (io,) = [s for s in ios if s.name == sub]
            attrs.update(io.attrs)
            ios = io.ios
        (pins,) = ios
        (name,) = pins.names
        return name, {k: str(v) for k, v in attrs.items()}

    clk = platform.lookup("clk25", 0)
    out["clk25"] = pin(clk)
    uart = platform.lookup("uart", 0)
    out["uart_rx"] = pin(uart, "rx")
    out["uart_tx"] = pin(uart, "tx")
    for k in range(8):
        out[f"led[{k}]"] = pin(platform.lookup("led", k))
    return platform, clk, out


def test_lpf_matches_the_platform():
    sites, attrs, freqs = _parse(LPF.read_text())
    platform, clk, pins = _platform_pins()
    assert set(sites) == set(pins) == set(attrs)
    for port, (site, want) in pins.items():
        assert sites[port] == site, port
        assert attrs[port] == want, port
    assert freqs == {"clk25": clk.clock.frequency / 1e6}
    assert (platform.device, platform.package, platform.speed) == ("LFE5U-85F", "BG381", "6")


def test_every_board_top_port_is_constrained():
    from amaranth.back import verilog

    from npu.board.top import BoardTop

    text = verilog.convert(BoardTop(device=None, memory_bytes=4096), name="board_top")
    decl = re.search(r"module board_top\(([^)]*)\);", text).group(1)
    ports = [p.strip() for p in decl.split(",")]
    constrained = set()
    for port in ports:
        width = re.search(rf"(?:input|output)\s+(?:\[(\d+):0\]\s+)?{re.escape(port)};", text)
        n = int(width.group(1)) + 1 if width.group(1) else 1
        constrained |= {port} if n == 1 else {f"{port}[{k}]" for k in range(n)}
    sites, _, _ = _parse(LPF.read_text())
    assert constrained == set(sites)
