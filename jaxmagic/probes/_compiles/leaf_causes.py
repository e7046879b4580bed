"""Causes read from the user's own objects, leaf by leaf, when a library repacked the arguments jit was given."""

from __future__ import annotations

from jaxmagic.probes._compiles import model
from jaxmagic.probes._compiles.cause import Cause, only_weak_type_differs
from jaxmagic.probes._compiles.model import FunctionCompiles
from jaxmagic.probes._compiles.stack import CallInfo
from jaxmagic.probes._compiles.user_arguments import LeafValue


def leaf_cause(
    summary: FunctionCompiles, before: dict[str, LeafValue], info: CallInfo, changed_numbers: dict[str, tuple[str, str]]
) -> Cause | None:
    """What changed in the user's own arguments to a library's jit wrapper since the last compilation: a
    value that is not an array (a new object, a new number), an array's type, or a leaf that came or went.
    A number that changed goes into ``changed_numbers`` (path -> (type name, path)): its fix, "pass it as an
    array", is tried after the block (``field_trial``), which words it."""
    now = info.leaves
    added, removed = [p for p in now if p not in before], [p for p in before if p not in now]
    if added or removed:
        changes = [f"`{p}`: a new leaf" for p in added] + [f"`{p}`: no longer there" for p in removed]
        changes = changes[: model.CHANGES_KEPT]
        return Cause("pytree", "The structure of an argument changed: " + "; ".join(changes) + ".", changes)
    retyped = [
        (p, before[p].array_type, v.array_type)
        for p, v in now.items()
        if v.array_type and before[p].array_type and v.array_type != before[p].array_type
    ]
    arrays = [f"`{p}`: {a} -> {b}" for p, a, b in retyped]
    identity, changed = [], []
    for path, leaf in now.items():
        value, old = leaf.value, before[path].value
        if value is None or old is None:
            continue
        if value.look != old.look:
            changed.append((path, f"`{path}`: {old.text} -> {value.text}"))
        elif value.ident != old.ident and (value.by_identity or value.hashed != old.hashed or value.hashed is None):
            how = "" if value.by_identity else ", unequal by its own __eq__/__hash__"
            identity.append((path, f"`{path}` is a new {value.type_name} with the same text {value.text}{how}"))
    if identity or changed:
        path = (identity or changed)[0][0]
        leaf = now[path]
        top_level = "." not in path and "[" not in path
        if identity:
            cause = "static_identity" if top_level else "pytree_identity"
        else:
            cause = "static" if top_level else "pytree_static"
        texts = [text for _, text in identity or changed][: model.CHANGES_KEPT]
        rule = _wrapper_rule(info, leaf, path)
        summary.field_fixes[cause] = _leaf_fix(summary, path, leaf, bool(identity), rule, info.library)
        changed_numbers.clear()
        if not identity and leaf.value is not None and leaf.value.kind == "number":
            changed_numbers[path] = (leaf.value.type_name, path)
        why = "A value of the arguments that is not an array " + (
            "is a new object at this call, alike the last one: " if identity else "changed: "
        )
        return Cause(cause, why + "; ".join(texts) + f". {rule}", texts)
    if arrays:
        arrays = arrays[: model.CHANGES_KEPT]
        if only_weak_type_differs([(a, b) for _p, a, b in retyped]):  # the same kind as JAX's own explanation's
            return Cause(
                "weak_type",
                "A weakly typed value (a Python scalar, or an array whose dtype came from one) and a typed one are "
                "different argument types (weak typing): " + "; ".join(arrays) + ".",
                arrays,
            )
        return Cause("types", "Argument types changed from the last compilation: " + "; ".join(arrays) + ".", arrays)
    return None


def unseen_change(summary: FunctionCompiles, info: CallInfo) -> str:
    """Why a compilation through a library's jit wrapper is not explained in the user's terms."""
    if not info.leaves:
        return (
            f"{info.library}'s jit wrapper gave jit a different cache key for `{summary.name}`, and the arguments "
            "your line passed could not be read at the wrapper's entry (a method, or a call that is not "
            "`wrapper(*args, **kwargs)`), so what changed cannot be named in them."
        )
    return (
        f"{info.library}'s jit wrapper gave jit a different cache key for `{summary.name}`, and no part of the "
        "arguments your line passed changed (arrays, other values, static attributes): a value the wrapper "
        "keeps outside them (its own settings, a closure of the function) is the likely cause."
    )


def _wrapper_rule(info: CallInfo, leaf: LeafValue, path: str) -> str:
    """How the library's wrapper treats a leaf that is not an array, as seen in the arguments it gave jit."""
    if not leaf.held_static:
        return f"{info.library}'s jit wrapper makes it part of the cache key."
    every = all(v.held_static for v in info.leaves.values() if v.value is not None)
    which = "every value of the arguments that is not an array" if every else f"`{path}`"
    return (
        f"{info.library}'s jit wrapper passes {which} to jax.jit as a static argument: part of the cache key, "
        "compared with == and hash."
    )


_CALLABLE_TYPES = ("PjitFunction", "function", "partial", "method", "builtin_function_or_method")


def _leaf_fix(summary: FunctionCompiles, path: str, leaf: LeafValue, identity: bool, rule: str, library: str) -> str:
    value = leaf.value
    assert value is not None
    if identity and (value.kind == "function" or value.type_name in _CALLABLE_TYPES):
        what = "jit wrapper" if value.type_name == "PjitFunction" else "function"
        owner = path.rsplit(".", 1)[0] if "." in path else ""
        made = (
            f" If `{owner}` makes it when it is built (`self.{path.rsplit('.', 1)[1]} = jax.jit(f)` in its "
            f"__init__), each new `{owner}` holds a new one: make it once, outside, and pass that same {what} in."
            if owner
            else ""
        )
        return (
            f"`{path}` is a new {what} at each call, compared by identity: {rule} Define it once (outside the "
            f"loop, or at module level) and pass that same {what}.{made}"
        )
    if identity and value.kind == "object":
        checked = f" ({leaf.frozen})" if leaf.frozen.startswith("checked: a frozen dataclass with") else ""
        frozen = (
            f"; or make {value.type_name} a frozen dataclass (`@dataclasses.dataclass(frozen=True)`), so that equal "
            f"ones compare equal and hash alike{checked}"
            if checked or not leaf.frozen
            else f" ({leaf.frozen}, so a frozen dataclass is no fix here)"
        )
        return (
            f"`{path}` is a new {value.type_name} at each call, and {value.type_name} has no __eq__/__hash__ of its "
            f"own, so every new one compiles `{summary.name}` again: {rule} Build it once, outside the loop, and "
            f"pass that same object every call{frozen}."
        )
    if value.kind == "number":
        return (
            f"`{path}` is a Python {value.type_name}: {rule} Each new value compiles `{summary.name}` again. If it "
            f"only feeds arithmetic, pass it as an array (`jnp.asarray(...)`), which the wrapper traces; keep it a "
            f"Python number only if it sets a shape or a loop count, and then let it take few values."
        )
    return (
        f"`{path}` ({value.type_name}) changed: {rule} Each new value compiles `{summary.name}` again; pass what "
        "changes between calls as an array, and keep the other values the same objects."
    )
