"""NEM engine wing: the top level (:mod:`.top`), its configuration from a NEM device
(:mod:`.config`), the sequencer (:mod:`.seq`), the DMA / sDMA units (:mod:`.copy_units`)
and the requantisation-entry fetcher (:mod:`.entry_fetch`). Imports the NMU, the CSTL and
the bus blocks; nothing below imports the engine."""
