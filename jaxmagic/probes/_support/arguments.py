"""The one error a probe raises for a bad option: it names the parameter, in Python's terms.

Probes know nothing of magic flags. The IPython layer maps ``parameter`` to the
flag that set it (``dims`` -> ``--dims``) and reports a one-sentence UsageError;
plain-Python callers get an ordinary ``ValueError`` they can catch.
"""

from __future__ import annotations


class ProbeArgumentError(ValueError):
    """A probe option has a value the probe cannot use.

    ``parameter`` is the probe's parameter name (``"dims"``, ``"runs"``);
    ``problem`` says what is wrong with the value, without naming it.
    """

    def __init__(self, parameter: str, problem: str):
        super().__init__(f"{parameter} {problem}")
        self.parameter = parameter
        self.problem = problem
