"""NMU AGUs: directed cases for mutants of ``npu.nmu.agu`` and ``npu.nmu.agu_step``
the other tests missed."""
