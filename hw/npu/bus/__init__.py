"""Buses and memories: AXI4 burst engines (:mod:`.axi`), the AXI4-Lite CSR bank
(:mod:`.csr`), SRAM (:mod:`.memory`), stream FIFOs (:mod:`.stream`), the region-copy DMA
datapath (:mod:`.dma`) and shared SRAM / AXI ports (:mod:`.ports`). Knows no engine."""
