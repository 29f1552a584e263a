"""Command-line side of the hardware: the ``npu`` hub (:mod:`.cli`), its hardware
subcommands (:mod:`.hwcli`), FPGA synthesis and place-and-route (:mod:`.synth`) and the
generated top levels (:mod:`.toplevels`)."""
