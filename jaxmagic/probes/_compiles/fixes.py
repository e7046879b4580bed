"""What to do about a function that compiled again, in words: the fix for each cause, from the cause's
general fix (``cause.CauseKind.fix``) made particular by what the probe found - the field or argument named
(``FunctionCompiles.field_fixes``), the kind of a static argument's values, and for a static number the
outcome of its trial (``static_trial``): "pass it traced" only where tracing with it traced works."""

from __future__ import annotations

import re

from jaxmagic.probes._compiles.cause import STATIC, STATIC_IDENTITY, TYPES, CauseKind
from jaxmagic.probes._compiles.model import FunctionCompiles

# The fix for a static argument, by the kind of its values (``StaticValue.kind``).
STATIC_FIXES = {
    "number": (
        "The static value only feeds arithmetic (a learning-rate schedule, a step counter): make it a traced "
        "argument - drop it from static_argnums/static_argnames and pass an array, e.g. jnp.int32(step)."
    ),
    "function": (
        "A function is hashed by identity, so a lambda or functools.partial built anew for each call is a new "
        "cache key. Build it once, before the loop, and pass that same object; put what changes into a "
        "traced argument."
    ),
    "functions": (
        "A tuple or NamedTuple holding functions (an optax GradientTransformation, a pair of init/apply "
        "functions) is hashed by its functions' identities, so one built by a factory at each call is always "
        "new. Build it once, before the loop, and pass that same object (or close over it); pass what "
        "changes, such as a learning rate, as a traced argument."
    ),
    "object": (
        "An object whose class has no __eq__/__hash__ of its own (a plain class, a dataclass(eq=False), a "
        "module object) is hashed by identity. Build it once and reuse it; or make it hashable by value "
        "(a frozen dataclass, or __eq__ and __hash__ over its fields); or, if it holds arrays, pass it as a "
        "traced pytree argument instead of a static one (jax.tree_util.register_dataclass, "
        "flax.struct.dataclass, equinox.Module)."
    ),
}

# A static number that must stay static (its trial with it traced failed): what works instead.
KEEP_STATIC_FIX = "Keep {names} static: passing it traced does not trace ({trial}). {why}"


def why_it_stays_static(chooses_code: bool) -> str:
    """Why a value whose trial with it traced failed must stay static, and what to do, by what it decides:
    which code runs (a flag, its trial failed on a Python ``if``/``not``), or a shape, a count or a loop
    length. One wording for static arguments, static fields and values a function carries."""
    if chooses_code:
        return (
            "It chooses which code runs (Python decides on it), which must be known while tracing: each of its "
            "values is a program of its own, compiled once - a train/eval flag compiles twice by design."
        )
    return (
        "It sets a shape, a count or a loop length, which must be known while tracing, so each new value "
        "compiles again: let it take few values - round it up to one of a few sizes (e.g. powers of two) and "
        "pad or mask what lies beyond the real count - or compile once with the largest value and mask."
    )


def mixed_types_note(values: list[str]) -> str:
    """A flag given both as a bool and as a number (True, then 1): equal in Python, two cache keys for jit."""
    flags = [text for text in values if text in ("True", "False")]
    if flags and len(flags) < len(values) and all(re.fullmatch(r"-?\d+", t) for t in values if t not in flags):
        return (
            " Pass it the same way every time: a bool and an int that are equal in Python (True and 1) are two "
            "cache keys for jit, each compiled."
        )
    return ""


def number_fix(kinds: dict[str, str], values: dict[str, list[str]]) -> str:
    """The fix for a static number, with the argument's own name and a dtype its values fit:
    ``jnp.float32(lr)`` for 0.1, 0.05; ``jnp.int32(step)`` for 1, 2."""
    name = next((n for n in values if kinds.get(n) == "number"), "")
    if not name:
        return STATIC_FIXES["number"]
    floats = any(any(c in text for c in ".eE") or text in ("inf", "nan") for text in values[name])
    dtype = "jnp.float32" if floats else "jnp.int32"
    return STATIC_FIXES["number"].replace("e.g. jnp.int32(step)", f"here {dtype}({name})")


def number_fix_tried(function: FunctionCompiles, general: str) -> str:
    """The fix for a static number, as its trial found it: "pass it traced" only when tracing with it traced
    succeeds; "keep it static, take few values" when it fails; "not tried" said, with why, when it was not.
    ``general``: the cause's general fix, whose first sentence leads."""
    ran = (
        f" (jaxmagic traced `{function.name}` once more after the cell to try it; its output while tracing was "
        "not shown)"
        if function.traced_again_to_try
        else ""
    )
    if function.static_fix_works is False:
        head = general.split(": ", 1)[0] + "."
        numbers = [n for n, k in function.static_kinds.items() if k == "number"]
        names = ", ".join(f"`{n}`" for n in numbers)
        chooses_code = function.static_fix_chooses_code
        why = why_it_stays_static(chooses_code)
        if chooses_code:
            why += "".join(mixed_types_note(function.static_values.get(n, [])) for n in numbers[:1])
        return f"{head} {KEEP_STATIC_FIX.format(names=names, trial=function.static_fix_trial, why=why)}{ran}"
    fix = f"{general} {number_fix(function.static_kinds, function.static_values)}"
    if function.static_fix_works:
        return f"{fix} Checked: {function.static_fix_trial}{ran}."
    return f"{fix} ({function.static_fix_trial or 'suggestion: not tried'})"


def main_fix(function: FunctionCompiles) -> str:
    """What to do about the function's main cause (for a static argument: what fits the kind of its values)."""
    kind = function.main_kind
    return fix_for(function, kind) if kind is not None else ""


def fix_for(function: FunctionCompiles, kind: CauseKind) -> str:
    """What to do about one cause of the function's compilations: its named fix, its general one, or both."""
    named = function.field_fixes.get(kind.key, "")
    if named and (kind is not STATIC_IDENTITY or " is NaN, " in named):  # a NaN is no object to build once
        return named
    general = _general_fix(function, kind)
    return f"{named} {general}" if named and general else named or general


def _general_fix(function: FunctionCompiles, cause: CauseKind) -> str:
    if cause.static_values:
        kinds = [function.static_kinds.get(name, "") for name in function.static_values]
        kind = next((k for k in kinds if k in STATIC_FIXES and (k != "number" or cause is STATIC)), "")
        if kind and cause is STATIC_IDENTITY:
            return f"{cause.fix.split(': ', 1)[0]}. {STATIC_FIXES[kind]}"
        if kind == "number" and cause is STATIC:
            return number_fix_tried(function, STATIC.fix)
        if kind:
            return f"{cause.fix} {STATIC_FIXES[kind]}"
    if cause is TYPES:
        scalars = [_scalar_kind_change(change) for change in function.change_examples.get(TYPES.key, [])]
        if scalars and all(scalars):
            name = scalars[0]
            return (
                f"`{name}` was an integer scalar in one call and a float one in another (a Python `1` and "
                f"`1.5` are i32[] and f32[]): different argument types. Pass the same kind every time, e.g. "
                f"`float({name})` (or `jnp.float32({name})`) where you call it."
            )
    return cause.fix


_SCALAR_CHANGE = re.compile(
    r"^(?P<name>[\w.\[\]']+): (?P<a>[if])\d+\[\](?: weak)? -> (?P<b>[if])\d+\[\](?: weak)?(?: \(dtype\))?$"
)


def _scalar_kind_change(change: str) -> str:
    """The argument's name when ``change`` is an int scalar becoming a float one or back ("s: i32[] -> f32[]")."""
    match = _SCALAR_CHANGE.match(change)
    return match["name"] if match and match["a"] != match["b"] else ""
