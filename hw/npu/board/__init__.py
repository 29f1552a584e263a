"""Board build for the Radiona ULX3S-85F: UART host bridge, block RAM, PLL, pins.

* :mod:`npu.board.protocol`: the host protocol (frames, commands, error codes), sans-I/O.
* :mod:`npu.board.uart`: UART receiver and transmitter.
* :mod:`npu.board.bridge`: the frame parser / command executor; :mod:`npu.board.model` its
  Python model.
* :mod:`npu.board.axiram`: block RAM behind the engine's AXI4 port, with the bridge's
  host port.

``docs/board.md`` describes the protocol and the build.
"""
