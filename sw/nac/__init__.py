"""NAC v1.6 model files: container, graph IR, compiler passes, MMAP scheduler, float runtime."""
