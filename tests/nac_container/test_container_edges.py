"""placeholder: filled by the mutation work (see tests/mutation/targets.py)."""
