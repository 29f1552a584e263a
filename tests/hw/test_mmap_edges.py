"""MMAP coprocessor: directed cases for mutants of ``npu.nac.mmap`` the other tests missed."""
