"""Process-wide JAX hooks that one probe at a time can hold.

Some probes replace a function inside JAX for the block (the key-reuse dispatch
that shows every jit call, the ``jax.debug`` print primitives). Two probes
cannot both own such a function, so the second one to enter refuses with
:class:`AlreadyActive`, whose ``problem`` the magics turn into a UsageError
saying which magics do not combine.
"""

from __future__ import annotations


class AlreadyActive(RuntimeError):
    """Another probe holds the hook this probe needs; ``problem`` says which, in words for a message."""

    def __init__(self, problem: str):
        self.problem = problem
        super().__init__(problem)
