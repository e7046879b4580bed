"""A fix the explainer proposes, and the small operations on lists of them that every fitter uses."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Fix:
    """One standard fix: what to write, and when it is the right one."""

    use: str  # "jnp.where(cond, a, b)"
    when: str  # "elementwise choice between two values"
    checked: str = ""  # "checked: ..." when jaxmagic tried it on your function, "suggestion: ..." when not
    from_line: bool = False  # written from the failing line's code (not a pattern): it can be tried on its values


def written_fix(use: str, when: str) -> Fix:
    """A fix written wholly from the line's own code (no placeholder such as ``body_fn``): one that can
    be tried on the line's values."""
    return Fix(use, when, from_line=True)


def drop(fixes: list[Fix], *starts: str) -> list[Fix]:
    return [f for f in fixes if not f.use.startswith(starts)]


def static_fixes(fixes: list[Fix]) -> list[Fix]:
    return [f for f in fixes if "static_argnames" in f.use]
