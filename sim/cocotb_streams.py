"""Background stream drivers for cocotb: a source, a sink and a passive monitor.

Amaranth flattens a stream port ``i`` to the Verilog ports ``i__valid``, ``i__ready`` and
``i__payload``; the drivers take that prefix. Each one runs a coroutine of its own from
construction (or :meth:`~StreamSource.start`) until :meth:`~StreamSource.stop` or the end
of the test: the source drives queued payloads, the sink accepts into a queue, the monitor
only watches. A pause generator (any iterator; a true value pauses that cycle) inserts idle
cycles on a source and withholds ``ready`` on a sink, e.g.
``sink.set_pause_generator(itertools.cycle([1, 1, 0]))`` or :func:`random_pauses`.

Timing discipline (independent of the simulator's event ordering): the drivers write just
after the *falling* clock edge, in its ``ReadWrite`` phase, and decide a transfer in the
``ReadOnly`` phase of that half-cycle, when every DUT output is settled and equal to what
the next rising edge samples. A transfer happens on that rising edge iff ``valid and
ready`` then. Calls that wait (``send``, ``wait``, ``recv``) return just after a falling
edge, before the ``ReadWrite`` phase, so what the caller does next (queue a payload, change
the pauses) takes effect in that same cycle whatever order the coroutines woke in. Cycles
are counted in falling edges from the driver's start; a transfer is numbered by the cycle
whose rising edge completes it.

Every wait is bounded: a source whose payload is not accepted within ``timeout_cycles``
cycles, or a :meth:`StreamSink.recv` that sees nothing for that long, raises
:class:`~sim.stream_errors.StreamTimeout` naming the stream and the cycle. An error inside a
driver's coroutine (a timeout, a failing callback) is raised in the caller of
:meth:`~StreamSource.send`, :meth:`~StreamSource.wait` or :meth:`~StreamSink.recv` that is
waiting on that driver; when nobody waits, it fails the test at once.
"""

from __future__ import annotations

import random
from collections import deque
from typing import NamedTuple

import cocotb
from cocotb.triggers import FallingEdge, First, ReadOnly, ReadWrite

from sim.stream_errors import StreamTimeout

__all__ = ["StreamMonitor", "StreamSink", "StreamSource", "StreamTimeout", "Transfer",
           "random_pauses"]

DEFAULT_TIMEOUT_CYCLES = 10_000


def random_pauses(seed, probability):
    """Endless pause generator: true (pause) with *probability* each cycle, from *seed*."""
    rng = random.Random(seed)
    while True:
        yield rng.random() < probability


class Transfer(NamedTuple):
    """One completed handshake: the cycle whose rising edge took it, and the payload."""

    cycle: int
    payload: int


def _check_cycles(value, what):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{what} must be a positive integer, not {value!r}")
    return value


class _StreamDriver:
    """What the three drivers share: signals, clock, cycle count, pauses, background task."""

    def __init__(self, dut, prefix, clock, *, name, timeout_cycles, start):
        self.valid = getattr(dut, f"{prefix}__valid")
        self.ready = getattr(dut, f"{prefix}__ready")
        self.payload = getattr(dut, f"{prefix}__payload")
        self.clock = clock
        self.name = name or prefix
        self.timeout_cycles = _check_cycles(timeout_cycles, "timeout_cycles")
        self.cycle = 0
        self._pauses = None
        self._task = None
        self._error = None
        if start:
            self.start()

    @property
    def running(self):
        """True while the background coroutine runs."""
        return self._task is not None and not self._task.done()

    def set_pause_generator(self, generator=None):
        """Pause on every cycle for which *generator* yields a true value.

        ``None`` (or an exhausted generator) means never pause.
        """
        self._pauses = None if generator is None else iter(generator)

    def start(self):
        """Start the background coroutine (a no-op while it runs)."""
        if not self.running:
            self._error = None
            self._task = cocotb.start_soon(self._guarded())

    def stop(self):
        """Stop the background coroutine and release the handshake signal it drives.

        Call it outside the ``ReadOnly`` phase: cocotb refuses writes there.
        """
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._release()

    def _release(self):
        pass

    def _paused(self):
        if self._pauses is None:
            return False
        try:
            return bool(next(self._pauses))
        except StopIteration:
            self._pauses = None
            return False

    async def _guarded(self):
        try:
            await self._run()
        except Exception as exc:
            self._error = exc  # raised again by the next call on this driver
            raise

    async def _run(self):
        raise NotImplementedError

    def _check_alive(self, action):
        if self._error is not None:
            raise self._error
        if not self.running:
            raise RuntimeError(f"{self.name}: {action} on a stopped driver (call start())")

    async def _next_cycle(self, action):
        """Wait for the next falling edge; raise the driver's error if it dies meanwhile."""
        self._check_alive(action)
        # While a caller waits on the task's completion, cocotb leaves a failure of the task
        # to that caller instead of failing the test: the error surfaces here.
        await First(FallingEdge(self.clock), self._task.complete)
        self._check_alive(action)


class StreamSource(_StreamDriver):
    """Drives a DUT input stream from a queue, in the background.

    Parameters
    ----------
    dut : cocotb handle
    prefix : str
        Port name prefix, e.g. ``"i"`` for ``i__valid``/``i__ready``/``i__payload``.
    clock : cocotb handle
    name : str, optional
        The stream's name in error messages; default *prefix*.
    pause_generator : iterator, optional
        As for :meth:`set_pause_generator`: a true value keeps ``valid`` low that cycle.
        Pauses are drawn only while a payload waits, and never once ``valid`` is high
        (a presented payload stays until it is accepted).
    timeout_cycles : int
        Cycles a presented payload may wait for ``ready`` before :class:`StreamTimeout`.
    start : bool
        Start the background coroutine now (default) or at :meth:`start`.
    """

    def __init__(self, dut, prefix, clock, *, name=None, pause_generator=None,
                 timeout_cycles=DEFAULT_TIMEOUT_CYCLES, start=True):
        self._queue = deque()
        self._current = None
        self.queued = 0
        self.sent = 0
        super().__init__(dut, prefix, clock, name=name, timeout_cycles=timeout_cycles,
                         start=False)
        self.set_pause_generator(pause_generator)
        if start:
            self.start()

    def send_nowait(self, payload):
        """Queue *payload* (an int or anything cocotb assigns to the port) and return."""
        if self._error is not None:
            raise self._error
        self._queue.append(payload)
        self.queued += 1

    async def send(self, payload):
        """Queue *payload* and return once the DUT has accepted it."""
        self.send_nowait(payload)
        ticket = self.queued
        while self.sent < ticket:
            await self._next_cycle(f"send (payload {ticket - 1})")

    def idle(self):
        """True when nothing is queued or being presented."""
        return not self._queue and self._current is None

    async def wait(self):
        """Return once every queued payload has been accepted (just after a falling edge)."""
        while not self.idle():
            await self._next_cycle(f"wait ({len(self._queue)} payloads queued)")
        if self._error is not None:
            raise self._error

    def _release(self):
        self._queue.clear()
        self._current = None
        self.valid.value = 0

    async def _run(self):
        stalled = 0
        while True:
            await FallingEdge(self.clock)
            self.cycle += 1
            await ReadWrite()  # after the testbench code woken by this edge
            if self._current is None:
                # Pauses are drawn only for a waiting payload, never while one is presented.
                if not self._queue or self._paused():
                    self.valid.value = 0
                    continue
                self._current = self._queue.popleft()
                self.payload.value = self._current
                self.valid.value = 1
                stalled = 0
            await ReadOnly()
            if self.ready.value == 1:
                self._current = None
                self.sent += 1
            else:
                stalled += 1
                if stalled >= self.timeout_cycles:
                    raise StreamTimeout(self.name, self.cycle,
                                        f"transfer {self.sent} not accepted in "
                                        f"{self.timeout_cycles} cycles")


class _StreamReceiver(_StreamDriver):
    """Shared by sink and monitor: the receive queue, the callback and ``recv``."""

    def __init__(self, dut, prefix, clock, *, name, callback, timeout_cycles, start):
        self._queue = deque()
        self.callback = callback
        self.received = 0
        super().__init__(dut, prefix, clock, name=name, timeout_cycles=timeout_cycles,
                         start=start)

    def _record(self, payload):
        # Runs in the ReadOnly phase: a callback may read the DUT, not write it.
        transfer = Transfer(self.cycle, payload)
        self.received += 1
        self._queue.append(payload)
        if self.callback is not None:
            self.callback(transfer)
        return transfer

    def empty(self):
        """True when no received payload is waiting in the queue."""
        return not self._queue

    def count(self):
        """Number of received payloads waiting in the queue."""
        return len(self._queue)

    def recv_nowait(self):
        """The oldest received payload (an int); :class:`IndexError` if there is none."""
        if self._error is not None:
            raise self._error
        if not self._queue:
            raise IndexError(f"{self.name}: nothing received")
        return self._queue.popleft()

    async def recv(self, *, timeout_cycles=None):
        """The oldest received payload (an int), waiting for one if the queue is empty.

        Parameters
        ----------
        timeout_cycles : int, optional
            Cycles to wait before raising :class:`StreamTimeout`; default the driver's.
        """
        limit = self.timeout_cycles if timeout_cycles is None else _check_cycles(
            timeout_cycles, "timeout_cycles")
        waited = 0
        while not self._queue:
            if waited >= limit:
                raise StreamTimeout(self.name, self.cycle,
                                    f"{self.received} transfers, then nothing for "
                                    f"{limit} cycles")
            await self._next_cycle("recv")
            waited += 1
        return self.recv_nowait()


class StreamSink(_StreamReceiver):
    """Accepts a DUT output stream into a queue, in the background.

    Parameters
    ----------
    dut, prefix, clock, name
        As for :class:`StreamSource`.
    pause_generator : iterator, optional
        As for :meth:`set_pause_generator`: a true value keeps ``ready`` low that cycle
        (back-pressure). Default: always ready.
    callback : callable, optional
        Called with each :class:`Transfer` as it is taken, in the ``ReadOnly`` phase
        (it may read DUT signals; an exception from it fails the test).
    timeout_cycles : int
        Default bound of :meth:`recv`.
    start : bool
        Start the background coroutine now (default) or at :meth:`start`.
    """

    def __init__(self, dut, prefix, clock, *, name=None, pause_generator=None, callback=None,
                 timeout_cycles=DEFAULT_TIMEOUT_CYCLES, start=True):
        super().__init__(dut, prefix, clock, name=name, callback=callback,
                         timeout_cycles=timeout_cycles, start=False)
        self.set_pause_generator(pause_generator)
        if start:
            self.start()

    def _release(self):
        self.ready.value = 0

    async def _run(self):
        while True:
            await FallingEdge(self.clock)
            self.cycle += 1
            await ReadWrite()  # after the testbench code woken by this edge
            ready = not self._paused()
            self.ready.value = int(ready)
            await ReadOnly()
            if ready and self.valid.value == 1:
                self._record(int(self.payload.value))


class StreamMonitor(_StreamReceiver):
    """Watches a stream without driving it and records every transfer.

    Parameters
    ----------
    dut, prefix, clock, name
        As for :class:`StreamSource`.
    callback : callable, optional
        Called with each :class:`Transfer` in the ``ReadOnly`` phase (e.g. a scoreboard).
    timeout_cycles : int
        Default bound of :meth:`recv`.
    start : bool
        Start the background coroutine now (default) or at :meth:`start`.

    Attributes
    ----------
    transfers : list of Transfer
        Every transfer seen, in order (:meth:`recv` consumes a separate queue).
    """

    def __init__(self, dut, prefix, clock, *, name=None, callback=None,
                 timeout_cycles=DEFAULT_TIMEOUT_CYCLES, start=True):
        self.transfers = []
        super().__init__(dut, prefix, clock, name=name, callback=callback,
                         timeout_cycles=timeout_cycles, start=start)

    def set_pause_generator(self, generator=None):
        """A monitor drives nothing, so it cannot pause: only ``None`` is accepted."""
        if generator is not None:
            raise TypeError(f"{self.name}: a StreamMonitor is passive and takes no pauses")

    async def _run(self):
        while True:
            await FallingEdge(self.clock)
            self.cycle += 1
            await ReadOnly()
            if self.valid.value == 1 and self.ready.value == 1:
                self.transfers.append(self._record(int(self.payload.value)))
