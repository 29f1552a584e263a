"""Mutants that cannot change behaviour, each with the reason (``docs/testing.md`` lists them).

Keys are mutmut's mutant names (``module.x_function__mutmut_N``; methods
``module.xǁClassǁmethod__mutmut_N``). mutmut numbers the mutants of a function afresh when
the function changes; ``report.py`` flags an entry that no longer names a surviving mutant.
"""

EQUIVALENT: dict[str, str] = {}
