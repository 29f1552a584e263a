"""NMU wing (``docs/nmu.md``): the unit as the engine sees it (:mod:`.unit`), its shadow
registers and task decode (:mod:`.regs`), address generation (:mod:`.agu`), the MAC array
(:mod:`.array`), the output stage (:mod:`.output`) and the Python model (:mod:`.model`)."""
