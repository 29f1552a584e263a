"""NAC ABCD decoder: directed cases for mutants of ``npu.nac.decoder`` the other tests missed."""
