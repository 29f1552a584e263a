"""NAC front-end wing: the ABCD instruction decoder (:mod:`.decoder`), the MMAP
coprocessor (:mod:`.mmap`) and the two in lock-step (:mod:`.frontend`)."""
