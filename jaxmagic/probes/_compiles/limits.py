"""How much the compilation probe keeps: the bounds that keep a cell with a thousand compilations a summary.

Read as ``limits.NAME`` by the collector and the report, so one value (or a
test's monkeypatch of this module) holds for both.
"""

DETAILS_PER_FUNCTION = 12  # compilations of one function kept in full; later ones are only counted
DETAILS_TOTAL = 120  # compilations kept in full over all functions
EXPLAIN_LIMIT = 16  # explained compilations of one function before explanations are switched off
STATIC_VALUES_KEPT = 6  # first values of each static argument kept for the report
CHANGES_KEPT = 8  # changed arguments listed per compilation
LOG_LINE_CHARS = 600
PROGRAMS_KEPT = 8  # programs of one function digested for %jax_gather (program_prints), in compile order
