"""CSTL wing: per-channel requantisation (:mod:`.requant`), shared with the NMU's output."""
