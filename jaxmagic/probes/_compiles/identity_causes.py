"""Causes about the function itself: a new jit wrapper, a function rebuilt with other carried values, a changed
static field (pytree metadata) compared by identity."""

from __future__ import annotations

import re

from jaxmagic.probes._compiles import model
from jaxmagic.probes._compiles.baked import baked_changes
from jaxmagic.probes._compiles.cause import Cause
from jaxmagic.probes._compiles.field_trial import NUMBER_TYPES
from jaxmagic.probes._compiles.function_state import FunctionState
from jaxmagic.probes._compiles.metadata import MetaChange, metadata_changes
from jaxmagic.probes._compiles.model import FunctionCompiles, line_text
from jaxmagic.probes._compiles.stack import CallInfo
from jaxmagic.probes._compiles.why_again import baked_fix
from jaxmagic.report import SourceLine
from jaxmagic.usercode.source import is_user_file, source_line

_METADATA = re.compile(
    r"now (?P<now>.*) with pytree metadata (?P<a>.*) and before (?P<before>.*) with pytree metadata (?P<b>.*), so"
)


def same_metadata_text(detail: str) -> bool:
    """JAX's "... now X with pytree metadata M and before X with pytree metadata M, so the pytree node
    metadata does not match": the same text both times, so the metadata differs only by identity."""
    match = _METADATA.search(detail)
    return match is not None and match["now"] == match["before"] and match["a"] == match["b"]


def metadata_cause(summary: FunctionCompiles, state: FunctionState, info: CallInfo) -> Cause | None:
    """A pytree argument's static field changed: a new object alike the last one (compared by identity),
    or a new value. Names the field; None when no field of the arguments changed as far as can be seen."""
    changes = metadata_changes(state.last_metadata, info.metadata)
    if not changes:
        return None
    same = [c for c in changes if c.identity]
    if same:
        texts = [_identity_text(c) for c in same[: model.CHANGES_KEPT]]
        summary.field_fixes["pytree_identity"] = _identity_fix(same[0], summary.name)
        if info.library:
            summary.field_fixes["pytree_identity"] = (
                f"`{same[0].path}` is a static attribute of `{same[0].owner}` (not an array): part of the "
                f"structure {info.library}'s jit wrapper compares with == at every call. "
                + summary.field_fixes["pytree_identity"]
            )
        return Cause(
            "pytree_identity",
            "A static field of an argument holds a new object at this call, alike the last one but compared "
            "by identity, so the cache key differs: " + "; ".join(texts) + ".",
            texts,
        )
    texts = [f"`{c.path}` ({c.owner}.{c.field}): {c.before} -> {c.now}" for c in changes[: model.CHANGES_KEPT]]
    first = changes[0]
    # a number's fix is tried after the block (field_trial.py); the field the fix names is the one tried
    numeric = first.type_name in NUMBER_TYPES
    state.changed_fields = {first.path: (first.type_name, f"{first.owner}.{first.field}")} if numeric else {}
    summary.field_fixes["pytree_static"] = (
        f"`{first.owner}.{first.field}` is a static field: each new value ({first.before} -> {first.now}) compiles "
        f"`{summary.name}` again. Keep it static only if it changes the program's structure and takes few values; "
        f"otherwise make `{first.field}` a data field (an array, traced) instead of pytree metadata."
    )
    if info.library:  # an attribute that is not an array is static through the wrapper: an array one is traced
        summary.field_fixes["pytree_static"] = (
            f"`{first.path}` is a static attribute of `{first.owner}` (not an array): part of the structure "
            f"{info.library}'s jit wrapper compares at every call, so each new value ({first.before} -> "
            f"{first.now}) compiles `{summary.name}` again. If it only feeds arithmetic, "
            f"{_as_array(info.library, first)}; keep it a Python value only if it sets a shape or a loop "
            f"count, and then let it take few values."
        )
    return Cause("pytree_static", "A static field of an argument changed value: " + "; ".join(texts) + ".", texts)


def _as_array(library: str, change: MetaChange) -> str:
    """How the library lets an attribute be an array, which its jit traces."""
    if library == "flax":  # NNX keeps an attribute that first held a Python value static: an array later raises
        return (
            f"store it as an array from where it is first set (`self.{change.field} = jnp.asarray(...)` in "
            f"`{change.owner}.__init__`), which the wrapper traces - NNX keeps an attribute that first held a "
            "Python value static, and assigning an array to it later raises ValueError"
        )
    return "store it as an array (`jnp.asarray(...)`), which the wrapper traces"


def _identity_text(change: MetaChange) -> str:
    alike = (
        f"the same code ({change.same_code.rsplit(' ', 1)[-1]})" if change.same_code else f"the same text {change.now}"
    )
    return f"`{change.path}` ({change.owner}.{change.field}) is a new {change.type_name} with {alike}"


def _identity_fix(change: MetaChange, function: str) -> str:
    field = f"`{change.owner}.{change.field}`"
    if change.type_name in ("PjitFunction", "function", "partial", "method"):
        what = "jit wrapper" if change.type_name == "PjitFunction" else "function"
        fix = (
            f"{field} gets a new {what} each time a `{change.owner}` is built, and a {what} compares by identity, "
            f"so every new `{change.owner}` compiles `{function}` again. Build it once (outside the loop): make the "
            f"{what} one time, before the loop or at module level, and pass that same object to every "
            f"`{change.owner}`; or keep it out of the static fields"
        )
        made = _function_made_at(change)
        if made is not None:
            fix += f". The {what} is made by `{made.code}` ({made.where}), a new one each time that line runs"
    else:
        fix = (
            f"{field} holds a new {change.type_name} each time, and {change.type_name} has no __eq__/__hash__ of its "
            f"own, so it compares by identity and every new one compiles `{function}` again. Build it once "
            f"(outside the loop) and reuse it, or define __eq__ and __hash__ on {change.type_name} over its "
            f"settings (a frozen dataclass)"
        )
    return fix + (f" ({change.check})." if change.check else " (a suggestion: not tried on your code).")


def _function_made_at(change: MetaChange) -> SourceLine | None:
    """For a plain function of the user's (a lambda, a nested def) kept in the field: the line that makes it
    (its definition runs again at every pass); None for anything else."""
    if change.type_name != "function" or not change.same_code:
        return None
    location = change.same_code.rsplit(" ", 1)[0]
    filename, _, line = location.rpartition(":")
    if not line.isdigit() or not is_user_file(filename):
        return None
    return source_line(filename, int(line), "")


def function_rebuilt(state: FunctionState, info: CallInfo) -> bool:
    """Whether jit traced another function object than at the function's last compilation (a weak reference
    that died is another object too: the function traced now is alive)."""
    if state.compiled_before == 0 or state.last_function is None or info.function is None:
        return False
    if info.library or info.transformed or info.leaves:
        return False  # a library's wrapper or a transformed program: the object traced is not the user's
    return state.last_function() is not info.function()


def rebuilt_cause(summary: FunctionCompiles, state: FunctionState, info: CallInfo) -> Cause:
    """Why a function jitted anew compiled again: a Python value it carries changed (a closure's variable, a
    functools.partial's argument: a constant of the program), or only the rebuilding (the same values).

    jax#9288 (a lambda jitted in a loop compiles at every iteration), jax#2251 (a jitted function defined
    inside the function called per step), optax#577 (a learning rate closed over is baked into the HLO).
    """
    changed = baked_changes(state.last_baked, info.baked)
    if not changed or info.library:
        cause = _new_function_cause(summary, info)
        if not info.library:
            cause.why += " " + _carried_values_text(summary, info)
        return cause
    texts = [f"`{name}`: {before} -> {now}" for name, before, now in changed[: model.CHANGES_KEPT]]
    names = [name for name, _, _ in changed]
    seen = {name: list(state.baked_seen.get(name, [])) for name in names}
    for name, _, now in changed:  # this compilation's value is recorded after its cause is found
        if now not in seen[name]:
            seen[name].append(now)
    summary.field_fixes["baked_constant"] = baked_fix(summary.name, names, seen, info)
    site = f" at {line_text(source_line(*info.call_site))}" if info.call_site is not None else ""
    return Cause(
        "baked_constant",
        f"`{summary.name}` is built anew{site} around another Python value: " + "; ".join(texts) + ". A value "
        "a function closes over (or a functools.partial binds) is a constant of the program jit traces, so "
        "each value is a new function and a new compilation.",
        texts,
    )


def _carried_values_text(summary: FunctionCompiles, info: CallInfo) -> str:
    if info.baked is None:
        return (
            f"Whether a value baked into `{summary.name}` (a closure, a functools.partial's argument) differed "
            "between the builds could not be told: what jit was given is not a Python function or partial "
            "whose closure can be read."
        )
    plain = {name: value.text for name, value in info.baked.items() if value.by_value}
    other = [f"`{name}` ({value.type_name})" for name, value in info.baked.items() if not value.by_value]
    unread = f" It also carries {', '.join(other[:4])}, not compared." if other else ""
    if not plain:
        return f"`{summary.name}` carries no Python number or string that could differ between builds.{unread}"
    values = ", ".join(f"`{name}` = {text}" for name, text in list(plain.items())[:4])
    return f"The Python values it carries are the same as at the last build ({values}).{unread}"


def _new_function_cause(summary: FunctionCompiles, info: CallInfo) -> Cause:
    where = f" (defined {summary.defined_at})" if summary.defined_at else ""
    around = f", {info.wrapper}," if info.wrapper else ""
    site = ""
    if info.call_site is not None:
        line = source_line(*info.call_site)
        site = f" at {line_text(line)}"
    if info.library:
        return Cause(
            "new_function",
            f"`{summary.name}`{where} is jitted anew at each call{site}: {info.library}'s jit wrapper is built "
            "again (or given a newly built function) every time, and a new one starts with an empty cache.",
            [f"{info.library}'s jit wrapper built anew{site}"],
        )
    return Cause(
        "new_function",
        f"`{summary.name}`{where} is jitted anew at each call{site}: jax.jit{around} builds a new wrapper "
        "every time, and a new wrapper starts with an empty cache.",
        [f"jax.jit applied to a newly built function{site}"],
    )
