"""Why one compilation happened: the cause found from JAX's explanation, the argument types and static values.

Each cause comes with its sentence (``_Cause.why``) and the changes that show it.
"""

from __future__ import annotations

import dataclasses
import re

from jaxmagic._jax.compile_log import (
    CacheMissExplanation,
    argument_passing_changes,
    context_differences,
    pytree_changes,
    signature_text,
)
from jaxmagic._jax.own_settings import CONTEXT_COUNT, is_own_difference
from jaxmagic.probes.compiles import limits
from jaxmagic.probes.compiles.baked import baked_changes
from jaxmagic.probes.compiles.field_trial import NUMBER_TYPES
from jaxmagic.probes.compiles.function_state import FunctionState
from jaxmagic.probes.compiles.metadata import MetaChange, metadata_changes
from jaxmagic.probes.compiles.report import FunctionCompiles
from jaxmagic.probes.compiles.stack import CallInfo, StaticValue
from jaxmagic.probes.compiles.user_arguments import LeafValue
from jaxmagic.probes.compiles.why_again import baked_fix
from jaxmagic.probes.compiles.wording import line_text
from jaxmagic.report.source import is_user_file, source_line


@dataclasses.dataclass
class _Cause:
    cause: str  # a key of CAUSE_TITLES
    why: str
    changes: list[str] = dataclasses.field(default_factory=list)


def classify(
    summary: FunctionCompiles,
    state: FunctionState,
    explanation: CacheMissExplanation | None,
    types: list[str] | None,
    info: CallInfo,
    traced: bool,
    user_values: dict[str, str],
) -> list[_Cause]:
    """Why one compilation happened: every cause seen, the main one first."""
    if info.kind != "user":
        shapes = signature_text(types) if types is not None else "these arguments"
        return [_Cause("eager", f"An eager operation compiled for {shapes}.")]
    static = _static_cause(summary, state, info)
    own = _own_differences(explanation, user_values)
    explanation = _without_own_context(explanation, user_values)
    if explanation is None and own and summary.count == 0 and state.last_types is None:
        # JAX names a context difference before any other, so only the function's first compilation
        # in the block is surely jaxmagic's doing; later ones are compared with the ones before.
        return [_own_cause(summary, own, types)]
    if info.leaves and (explanation is None or explanation.kind not in ("never_seen", "context")):
        # A library repacked the user's arguments for jit: JAX's explanation speaks of the library's
        # structure; the user's own objects, compared leaf by leaf, say what changed.
        if not state.last_leaves:  # compiled before this block, under arguments not seen here
            return [_Cause("first", f"First compilation of `{summary.name}` in this cell.")]
        leaf = leaf_cause(summary, state.last_leaves, info)
        if leaf is not None:
            return [leaf]
    if explanation is not None:
        explained = _explained_cause(summary, state, explanation, types, info)
        if explained is not None:
            if explained.cause in ("first", "new_function", "baked_constant"):
                return [explained]
            same_types = types is not None and state.last_types is not None and types == state.last_types
            if static is not None and explained.cause in ("types", "weak_type") and same_types:
                # JAX compares with the closest earlier key, which may be one with other types; against
                # the previous compilation only the static argument changed.
                return [static]
            return [explained] + ([static] if static is not None else [])
        # "unavailable", "debug_info", "other": JAX could not name it; static values can.
    elif _function_rebuilt(state, info):
        # No explanation (switched off after many compilations, or none logged): the traced function is
        # another object than at the last compilation, which is what JAX's "never seen function" says.
        return [rebuilt_cause(summary, state, info)]
    elif traced and summary.count == 0 and state.last_types is None and static is None:
        return [_Cause("first", f"First compilation of `{summary.name}` in this cell.")]
    elif not traced and state.compiled_before > 0 and not info.transformed:  # a transformed program is never traced
        return [
            _Cause(
                "no_retrace",
                f"`{summary.name}` compiled again from its cached trace: different jit options, device, "
                "or an explicit .lower().compile().",
            )
        ]
    return [_unexplained_cause(summary, state, explanation, types, info, static)]


def _without_own_context(
    explanation: CacheMissExplanation | None, user_values: dict[str, str]
) -> CacheMissExplanation | None:
    """The explanation without the context differences jaxmagic's own settings made; None if nothing is left.

    JAX ranks a context difference above any argument difference, so after a
    probe ran a function under its own settings, every later miss of that
    function is "explained" by them. Those say nothing about the user's calls:
    the cause is then found as if JAX had said nothing.
    """
    if explanation is None or explanation.kind != "context":
        return explanation
    differences = context_differences(explanation.details)
    kept = [d for d in differences if not is_own_difference(d.name, d.now, d.before, user_values)]
    if differences and not kept:
        return None
    if len(kept) == len(differences):
        return explanation
    return dataclasses.replace(explanation, details=[d.detail for d in kept])


def _own_differences(explanation: CacheMissExplanation | None, user_values: dict[str, str]) -> list[str]:
    """The settings JAX named for a miss when every one of them is jaxmagic's own doing; else []."""
    if explanation is None or explanation.kind != "context":
        return []
    differences = context_differences(explanation.details)
    if differences and all(is_own_difference(d.name, d.now, d.before, user_values) for d in differences):
        return [d.name for d in differences]
    return []


# jaxmagic's own cache-key settings in words (their JAX names would read as something to change)
_OWN_SETTING_WORDS = {
    "jax_debug_key_reuse": "the key-reuse checker (%%jax_keys, %%jax_doctor, %jax_watch)",
    "user_context": "the fresh-trace key of %%jax_leaks / %%jax_doctor / %%jax_print",
}


def _own_cause(summary: FunctionCompiles, own: list[str], types: list[str] | None) -> _Cause:
    """A compilation jaxmagic made happen: JAX's cache key differed only in what jaxmagic sets."""
    shapes = f" for {signature_text(types)}" if types is not None else ""
    if CONTEXT_COUNT in own:
        why = (
            f"`{summary.name}` compiled again{shapes} because it was compiled before jaxmagic made its "
            "cache-key context (jax.make_user_context, made when %load_ext jaxmagic ran after JAX was "
            "imported): every function compiled before then compiles once more for each of its argument "
            "types, once. Loading jaxmagic before importing JAX avoids it."
        )
    else:
        settings = ", ".join(dict.fromkeys(_OWN_SETTING_WORDS.get(name, "a setting of its own") for name in own))
        why = (
            f"`{summary.name}` compiled again{shapes} because it was last traced inside a jaxmagic magic, under "
            f"{settings}, which the magic switches on for its cell only: once per function and argument types."
        )
    return _Cause("jaxmagic", why)


def _explained_cause(summary, state, explanation, types, info) -> _Cause | None:
    name = f"`{summary.name}`"
    kind = explanation.kind
    if kind == "never_seen":
        earlier = state.last_function() if state.last_function is not None else None
        if (
            state.compiled_before > 0
            and earlier is not None
            and info.function is not None
            and earlier is info.function()
        ):
            # the very function object it traced before: not a new wrapper - JAX forgot it
            return _Cause(
                "cache_cleared",
                f"`{summary.name}` compiled again although it is the same function: JAX's caches were emptied "
                "since its last compilation (jax.clear_caches(), or a library calling it).",
                ["JAX's caches emptied between the calls"],
            )
        if state.compiled_before > 0:
            return rebuilt_cause(summary, state, info)
        return _Cause("first", f"First compilation of {name}.")
    if kind == "types":
        changes = [
            c.text + ("" if c.what in ("type", "weak type") else f" ({c.what})") for c in explanation.type_changes
        ]
        changes = changes or explanation.details
        if explanation.type_changes and all(c.what == "weak type" for c in explanation.type_changes):
            return _Cause(
                "weak_type",
                "A weakly typed value (a Python scalar, or an array whose dtype came from one) and a "
                "typed one are different argument types (weak typing): " + "; ".join(changes) + ".",
                changes,
            )
        return _Cause(
            "types", "Argument types changed from the closest earlier call: " + "; ".join(changes) + ".", changes
        )
    if kind == "pytree":
        passed = argument_passing_changes(explanation.details, info.parameter_names)
        if passed:
            changes = [
                f"{n}: passed by keyword in one call, positionally in the other"
                if how == "positionally"
                else f"{n}: passed in one call, left to its default in the other"
                for n, how in passed
            ]
            return _Cause("passing", "The same argument was passed in two ways: " + "; ".join(changes) + ".", changes)
        if any("metadata" in d for d in explanation.details):
            fields = _metadata_cause(summary, state, info)
            if fields is not None:
                return fields
            if any(_same_metadata_text(d) for d in explanation.details):
                changes = pytree_changes(explanation.details, info.parameter_names)
                return _Cause(
                    "pytree_identity",
                    "An argument's pytree metadata prints the same as at the earlier call but compares unequal: "
                    "it holds an object compared by identity (which field could not be told from the "
                    "arguments): " + "; ".join(changes) + ".",
                    changes,
                )
        if info.library:  # the library's own structure (its private fields): not what the user can change
            return _Cause("unexplained", _unseen_change(summary, info) + " JAX's own words are in the compile log.")
        changes = pytree_changes(explanation.details, info.parameter_names)
        return _Cause("pytree", "The structure of an argument changed: " + "; ".join(changes) + ".", changes)
    if kind == "context":
        changes = [d.text for d in context_differences(explanation.details)] or explanation.details
        return _Cause(
            "context", "A JAX setting that is part of the trace changed: " + "; ".join(changes) + ".", changes
        )
    return None


_METADATA = re.compile(
    r"now (?P<now>.*) with pytree metadata (?P<a>.*) and before (?P<before>.*) with pytree metadata (?P<b>.*), so"
)


def _same_metadata_text(detail: str) -> bool:
    """JAX's "... now X with pytree metadata M and before X with pytree metadata M, so the pytree node
    metadata does not match": the same text both times, so the metadata differs only by identity."""
    match = _METADATA.search(detail)
    return match is not None and match["now"] == match["before"] and match["a"] == match["b"]


def _metadata_cause(summary: FunctionCompiles, state: FunctionState, info: CallInfo) -> _Cause | None:
    """A pytree argument's static field changed: a new object alike the last one (compared by identity),
    or a new value. Names the field; None when no field of the arguments changed as far as can be seen."""
    changes = metadata_changes(state.last_metadata, info.metadata)
    if not changes:
        return None
    same = [c for c in changes if c.identity]
    if same:
        texts = [_identity_text(c) for c in same[: limits.CHANGES_KEPT]]
        summary.field_fixes["pytree_identity"] = _identity_fix(same[0], summary.name)
        if info.library:
            summary.field_fixes["pytree_identity"] = (
                f"`{same[0].path}` is a static attribute of `{same[0].owner}` (not an array): part of the "
                f"structure {info.library}'s jit wrapper compares with == at every call. "
                + summary.field_fixes["pytree_identity"]
            )
        return _Cause(
            "pytree_identity",
            "A static field of an argument holds a new object at this call, alike the last one but compared "
            "by identity, so the cache key differs: " + "; ".join(texts) + ".",
            texts,
        )
    texts = [f"`{c.path}` ({c.owner}.{c.field}): {c.before} -> {c.now}" for c in changes[: limits.CHANGES_KEPT]]
    first = changes[0]
    # a number's fix is tried after the block (field_trial.py); the field the fix names is the one tried
    numeric = first.type_name in NUMBER_TYPES and not info.library
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
            f"{first.now}) compiles `{summary.name}` again. If it only feeds arithmetic, store it as an array "
            f"(`jnp.asarray(...)`), which is traced; keep it a Python value only if it sets a shape or a loop "
            f"count, and then let it take few values. {_untried_through(info.library)}"
        )
    return _Cause("pytree_static", "A static field of an argument changed value: " + "; ".join(texts) + ".", texts)


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


def _function_made_at(change: MetaChange):
    """For a plain function of the user's (a lambda, a nested def) kept in the field: the line that makes it
    (its definition runs again at every pass); None for anything else."""
    if change.type_name != "function" or not change.same_code:
        return None
    location = change.same_code.rsplit(" ", 1)[0]
    filename, _, line = location.rpartition(":")
    if not line.isdigit() or not is_user_file(filename):
        return None
    return source_line(filename, int(line), "")


def _function_rebuilt(state: FunctionState, info: CallInfo) -> bool:
    """Whether jit traced another function object than at the function's last compilation (a weak reference
    that died is another object too: the function traced now is alive)."""
    if state.compiled_before == 0 or state.last_function is None or info.function is None:
        return False
    if info.library or info.transformed or info.leaves:
        return False  # a library's wrapper or a transformed program: the object traced is not the user's
    return state.last_function() is not info.function()


def rebuilt_cause(summary: FunctionCompiles, state: FunctionState, info: CallInfo) -> _Cause:
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
    texts = [f"`{name}`: {before} -> {now}" for name, before, now in changed[: limits.CHANGES_KEPT]]
    names = [name for name, _, _ in changed]
    seen = {name: list(state.baked_seen.get(name, [])) for name in names}
    for name, _, now in changed:  # this compilation's value is recorded after its cause is found
        if now not in seen[name]:
            seen[name].append(now)
    summary.field_fixes["baked_constant"] = baked_fix(summary.name, names, seen, info)
    site = f" at {line_text(source_line(*info.call_site))}" if info.call_site is not None else ""
    return _Cause(
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


def _new_function_cause(summary: FunctionCompiles, info: CallInfo) -> _Cause:
    where = f" (defined {summary.defined_at})" if summary.defined_at else ""
    around = f", {info.wrapper}," if info.wrapper else ""
    site = ""
    if info.call_site is not None:
        line = source_line(*info.call_site)
        site = f" at {line_text(line)}"
    if info.library:
        return _Cause(
            "new_function",
            f"`{summary.name}`{where} is jitted anew at each call{site}: {info.library}'s jit wrapper is built "
            "again (or given a newly built function) every time, and a new one starts with an empty cache.",
            [f"{info.library}'s jit wrapper built anew{site}"],
        )
    return _Cause(
        "new_function",
        f"`{summary.name}`{where} is jitted anew at each call{site}: jax.jit{around} builds a new wrapper "
        "every time, and a new wrapper starts with an empty cache.",
        [f"jax.jit applied to a newly built function{site}"],
    )


def _static_cause(summary: FunctionCompiles, state: FunctionState, info: CallInfo) -> _Cause | None:
    static_changes, identity_changes = _static_changes(state.last_static, info.static_values)
    if identity_changes:
        _name_identity_fix(summary, state.last_static or {}, info.static_values)
        return _Cause(
            "static_identity",
            f"Static argument {'; '.join(identity_changes)}: each call passes a new object, and jit "
            "hashes it by identity, so none matches an earlier call.",
            identity_changes,
        )
    if static_changes:
        return _Cause(
            "static",
            f"Static argument value changed: {'; '.join(static_changes)}. A static argument is "
            "part of the compiled program, so each new value compiles again.",
            static_changes,
        )
    return None


def _name_identity_fix(summary: FunctionCompiles, before: dict[str, StaticValue], now: dict[str, StaticValue]) -> None:
    """The static-argument fix naming the parameter that is a new object at each call, and what it is."""
    for name, value in now.items():
        old = before.get(name)
        if old is not None and value.kind == "number" and value.text in ("nan", "-nan"):
            summary.field_fixes["static_identity"] = (
                f"The static argument `{name}` of `{summary.name}` is NaN, which never equals itself: every call "
                "is a new cache key however it is built. Pass it as a traced argument (not static), or mark "
                "'no value' with None."
            )
            return
        if old is None or old.ident == value.ident or not value.by_identity or value.kind == "functions":
            continue
        if name not in summary.static_argnames:
            continue  # only a real parameter of the jitted function is named
        kind = "function" if value.kind == "function" else value.type_name
        how = (
            "define it once (outside the loop, or at module level) and pass that same function"
            if value.kind == "function"
            else f"build it once (outside the loop) and pass that same object, or define __eq__ and __hash__ on "
            f"{value.type_name} over its settings (a frozen dataclass) so equal ones match"
        )
        summary.field_fixes["static_identity"] = (
            f"The static argument `{name}` of `{summary.name}` is a new {kind} at each call, compared by identity: "
            f"{how}" + (f" ({value.check})." if value.check else " (a suggestion: not tried on your code).")
        )
        return


def leaf_cause(summary: FunctionCompiles, before: dict[str, LeafValue], info: CallInfo) -> _Cause | None:
    """What changed in the user's own arguments to a library's jit wrapper since the last compilation: a
    value that is not an array (a new object, a new number), an array's type, or a leaf that came or went."""
    now = info.leaves
    added, removed = [p for p in now if p not in before], [p for p in before if p not in now]
    if added or removed:
        changes = [f"`{p}`: a new leaf" for p in added] + [f"`{p}`: no longer there" for p in removed]
        changes = changes[: limits.CHANGES_KEPT]
        return _Cause("pytree", "The structure of an argument changed: " + "; ".join(changes) + ".", changes)
    arrays = [
        f"`{p}`: {before[p].array_type} -> {v.array_type}"
        for p, v in now.items()
        if v.array_type and before[p].array_type and v.array_type != before[p].array_type
    ]
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
        texts = [text for _, text in identity or changed][: limits.CHANGES_KEPT]
        rule = _wrapper_rule(info, leaf, path)
        summary.field_fixes[cause] = _leaf_fix(summary, path, leaf, bool(identity), rule, info.library)
        why = "A value of the arguments that is not an array " + (
            "is a new object at this call, alike the last one: " if identity else "changed: "
        )
        return _Cause(cause, why + "; ".join(texts) + f". {rule}", texts)
    if arrays:
        arrays = arrays[: limits.CHANGES_KEPT]
        return _Cause("types", "Argument types changed from the last compilation: " + "; ".join(arrays) + ".", arrays)
    return None


def _unseen_change(summary: FunctionCompiles, info: CallInfo) -> str:
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
            f"Python number only if it sets a shape or a loop count, and then let it take few values. "
            f"{_untried_through(library)}"
        )
    return (
        f"`{path}` ({value.type_name}) changed: {rule} Each new value compiles `{summary.name}` again; pass what "
        "changes between calls as an array, and keep the other values the same objects."
    )


def _untried_through(library: str) -> str:
    """Why "pass it as an array" is offered untried through a library's jit wrapper."""
    return (
        f"(A suggestion: not tried - {library}'s jit wrapper splits the arguments into traced and static parts "
        "itself, and jaxmagic does not trace your function again through it.)"
    )


def _unexplained_cause(summary, state, explanation, types, info, static: _Cause | None) -> _Cause:
    name = f"`{summary.name}`"
    if static is not None:
        return static
    if state.compiled_before > 0 and types == state.last_types:
        fields = _metadata_cause(summary, state, info)
        if fields is not None:
            return fields
    if explanation is None and types is not None and state.last_types is not None and types != state.last_types:
        array_parameters = [p for p in info.parameter_names if p not in info.static_argnames]
        changes = _leaf_changes(state.last_types, types, array_parameters)
        if _only_weak_type_differs(state.last_types, types):
            return _Cause(
                "weak_type",
                "A Python scalar (or an array made from one, such as jnp.full(4, 1.0)) and a typed JAX value are "
                "different argument types (weak typing; from the compile log): " + "; ".join(changes) + ".",
                changes,
            )
        return _Cause("types", "Argument types changed (from the compile log): " + "; ".join(changes) + ".", changes)
    if state.compiled_before == 0 and (
        explanation is None or explanation.kind != "unavailable" or not info.static_values
    ):
        return _Cause("first", f"First compilation of {name} in this cell.")
    if info.static_values and state.last_static is None:
        values = "; ".join(f"{k} = {v.text}" for k, v in info.static_values.items())
        return _Cause(
            "static",
            f"JAX could not say what differed; {name} has static arguments ({values}), and a new "
            "static value is the usual cause.",
        )
    if info.library:
        return _Cause("unexplained", _unseen_change(summary, info))
    if info.static_argnames:
        return _Cause(
            "unexplained",
            "JAX could not say what differed ('cache miss explanation unavailable'), and the "
            f"static arguments of {name} ({', '.join(info.static_argnames)}) kept their values.",
        )
    return _Cause(
        "unexplained",
        f"JAX could not say what differed ('cache miss explanation unavailable'); {name} has "
        "no static arguments, so a hashed value outside its argument list changed (a partial's or a "
        "wrapper's static value, or a closure of a function jitted anew).",
    )


def _static_changes(before: dict | None, now: dict[str, StaticValue]) -> tuple[list[str], list[str]]:
    """Static arguments whose value changed since the last compilation: (by value, same print but unequal)."""
    if not before:
        return [], []
    changed, identity = [], []
    for name, value in now.items():
        old = before.get(name)
        if old is None:
            continue
        if value.by_identity and (value.hashed != old.hashed or value.hashed is None):
            looks = f"equal-looking ({value.text})" if value.look == old.look else f"{old.text} -> {value.text}"
            identity.append(
                f"{name}: a new {value.type_name} (id {old.ident:#x} -> id {value.ident:#x}), {looks}, "
                "hashed by identity"
            )
        elif value.look != old.look:
            text = f"{old.text} -> {value.text}" if value.text != old.text else f"{value.text}, printed differently"
            changed.append(f"{name}: {text}")
        elif value.kind == "number" and value.text in ("nan", "-nan"):
            # a float NaN is unequal to itself, and hashed by identity since Python 3.10: each is a new key
            identity.append(
                f"{name}: nan (id {old.ident:#x} -> id {value.ident:#x}) - NaN never equals NaN, so a static NaN "
                "never matches an earlier call: pass it as a traced value, or a flag (None) instead"
            )
        elif value.hashed != old.hashed or value.hashed is None:
            identity.append(
                f"{name}: a new {value.type_name} (id {old.ident:#x} -> id {value.ident:#x}), equal-looking "
                f"({value.text}) but unequal: its __eq__/__hash__ do not compare by value"
            )
    return changed, identity


def _only_weak_type_differs(before: list[str], now: list[str]) -> bool:
    """True when the compile log's types differ only in being weakly typed ("f32[4] weak" vs "f32[4]")."""
    if len(before) != len(now) or before == now:
        return False
    return all(a.removesuffix(" weak") == b.removesuffix(" weak") for a, b in zip(before, now))


def _leaf_changes(before: list[str], now: list[str], parameter_names: list[str]) -> list[str]:
    if len(before) != len(now):
        return [f"{len(before)} -> {len(now)} array arguments"]
    if len(now) == len(parameter_names):  # one array per parameter: the leaves are the arguments
        names = parameter_names
    else:
        names = [f"argument leaf {i}" for i in range(len(now))]
    return [f"{n}: {a} -> {b}" for n, a, b in zip(names, before, now) if a != b][: limits.CHANGES_KEPT]
