"""The SEQ sequencer (``npu.engine.seq``) in the Amaranth simulator against a Python model."""
