"""C-Kernel-Engine IR v2 importer internals; the public API is :mod:`nac.import_ckernel`."""
