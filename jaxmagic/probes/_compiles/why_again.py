"""One answer to "why did this function compile again", as data: the cause object ``%%jax_compiles``, the
doctor and ``%jax_watch`` all word their recompilation finding from, so they cannot disagree.

``why_compiled_again(f)`` reads a function's summary (``model.FunctionCompiles``, filled by
``causes.classify`` compilation by compilation); ``baked_fix`` is the fix for a Python value baked into a
function built anew for each value (``baked.py``).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from jaxmagic.probes._compiles.baked_trial import CLOSURE_UNTRIED, UNTRIED_MARK
from jaxmagic.probes._compiles.cause import BAKED_CONSTANT, CAUSE_TITLES, STATIC, STATIC_IDENTITY
from jaxmagic.probes._compiles.fixes import main_fix

if TYPE_CHECKING:  # the types only: causes.py and the collector pass them in
    from jaxmagic.probes._compiles.model import FunctionCompiles
    from jaxmagic.probes._compiles.stack import CallInfo


def budget_magic(function: str) -> str:
    """The magic that stops at a function's next recompilation, as the doctor and the watch suggest it: with
    ``--fn`` only for a name that can be typed there (not `<lambda>`: the budget then applies to every function)."""
    named = function.replace(".", "_").isidentifier()
    return f"%%jax_compiles --budget 1 --fn {function}" if named else "%%jax_compiles --budget 1"


@dataclasses.dataclass
class RecompileCause:
    """Why one function compiled more than once in a block: its main cause and what the cause is about."""

    function: str  # "train_step", "<lambda>"
    defined_at: str  # "In [3], line 2"
    kind: str  # a key of CAUSE_TITLES: the main cause
    title: str  # CAUSE_TITLES[kind]
    names: list[str] = dataclasses.field(default_factory=list)  # the static argument, the baked variable: `lr`
    values: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # their values seen, in order
    reason: str = ""  # every cause with its evidence, in a few words
    evidence: str = ""
    fix: str = ""
    count: int = 0  # compilations in the block


def why_compiled_again(f: FunctionCompiles) -> RecompileCause:
    """The cause object of a function that compiled again (its main cause, the names and values it is about)."""
    kind, main = f.main_cause, f.main_kind
    values: dict[str, list[str]] = {}
    if main is BAKED_CONSTANT:
        values = dict(f.baked_values)
    elif main is STATIC:
        values = {name: texts for name, texts in f.static_values.items() if len(texts) > 1}
    elif main is STATIC_IDENTITY:
        values = {name: f.static_values.get(name, []) for name, ids in f.static_ids.items() if len(ids) > 1}
    return RecompileCause(
        function=f.name,
        defined_at=f.defined_at,
        kind=kind,
        title=CAUSE_TITLES.get(kind, kind),
        names=list(values),
        values=values,
        reason=f.reason,
        evidence=f.evidence or f.cause_breakdown,
        fix=main_fix(f),
        count=f.count,
    )


def baked_fix(function: str, names: list[str], seen: dict[str, list[str]], info: CallInfo) -> str:
    """The fix naming the baked value: pass it as a traced argument of a function jitted once."""
    name = names[0]
    value = (info.baked or {}).get(name)
    held_by = f" ({value.held_by})" if value is not None and value.held_by else ""
    kind = f"a Python {value.type_name}" if value is not None else "a Python value"
    texts = seen.get(name, [])
    each = f" ({', '.join(texts)})" if len(texts) > 1 else ""
    partial = value is not None and value.held_by.startswith("bound by functools.partial")
    parameter = name.rsplit(".", 1)[-1]
    how = (
        f"jit `{value.held_by.rsplit('`', 2)[-2]}` itself once, outside the loop, and pass `{parameter}` at each "
        f"call (`update_jit(..., {parameter}={parameter})`)"
        if partial and value is not None
        else f"make `{parameter}` a parameter of the function you jit (`lambda ..., {parameter}: ...`), jit it once, "
        f"outside the loop or the function that builds it, and pass `{parameter}` at each call"
    )
    others = (
        f" ({len(names) - 1} more value(s) changed too: {', '.join(f'`{n}`' for n in names[1:4])})" if names[1:] else ""
    )
    return (
        f"`{name}`{held_by} is {kind} baked into `{function}`'s compiled program as a constant: each value{each} "
        f"builds a new function and compiles again{others}. Pass it traced instead: {how}, so one compilation "
        f"serves every value. Keep it baked only if it sets a shape or a loop count (then each value compiles "
        f"by design). {UNTRIED_MARK if partial else CLOSURE_UNTRIED}"
    )
