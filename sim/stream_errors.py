"""The one error of the stream drivers: a bounded wait ran out.

Both driver families raise it, the Amaranth-simulator helpers (:mod:`sim.streams`) and the
cocotb drivers (:mod:`sim.cocotb_streams`), so a test catches one type whichever simulator
it runs on.
"""

from __future__ import annotations

__all__ = ["StreamTimeout"]


class StreamTimeout(AssertionError):
    """A stream did not complete a transfer within its bound of cycles.

    A subclass of :class:`AssertionError`, so a block that stops answering fails the test
    as a check does, instead of hanging the run.

    Parameters
    ----------
    stream : str
        The stream's name (for a DUT port, its prefix, e.g. ``"o"``).
    cycle : int
        The cycle at which the bound ran out: counted from the start of the driver (cocotb)
        or of the call (Amaranth simulator).
    problem : str
        What did not happen, e.g. ``"transfer 3 not accepted in 100 cycles"``.
    """

    def __init__(self, stream: str, cycle: int, problem: str):
        self.stream = stream
        self.cycle = cycle
        self.problem = problem
        super().__init__(f"{stream}: {problem} (cycle {cycle})")

    def __reduce__(self):
        return type(self), (self.stream, self.cycle, self.problem)
