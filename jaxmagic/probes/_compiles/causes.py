"""Why one compilation happened: the cause found from JAX's explanation, the argument types and static values.

``classify`` tries the named steps of ``STEPS`` in order (the surest evidence first); each cause comes
with its sentence (``Cause.why``) and the changes that show it. Its kind, title and general fix are
declared in ``cause.py``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from jaxmagic._jax.compile_log import (
    CacheMissExplanation,
    argument_passing_changes,
    context_differences,
    pytree_changes,
    signature_text,
)
from jaxmagic._jax.own_settings import CONTEXT_COUNT, is_own_difference
from jaxmagic.probes._compiles import model
from jaxmagic.probes._compiles.cause import Cause, only_weak_type_differs
from jaxmagic.probes._compiles.function_state import FunctionState
from jaxmagic.probes._compiles.identity_causes import (
    function_rebuilt,
    metadata_cause,
    rebuilt_cause,
    same_metadata_text,
)
from jaxmagic.probes._compiles.leaf_causes import leaf_cause, unseen_change
from jaxmagic.probes._compiles.model import FunctionCompiles
from jaxmagic.probes._compiles.stack import CallInfo, StaticValue


@dataclasses.dataclass(frozen=True)
class Compiling:
    """One compilation of a user's function as the steps of ``classify`` see it."""

    summary: FunctionCompiles
    state: FunctionState
    explanation: CacheMissExplanation | None  # JAX's, without jaxmagic's own settings, in the user's names
    types: list[str] | None
    info: CallInfo
    traced: bool  # traced again (not a cached trace compiled again)
    static: Cause | None  # a static argument that changed since the last compilation
    own: list[str]  # the settings JAX named, when every one of them is jaxmagic's own doing

    @property
    def first_in_block(self) -> bool:
        return self.summary.count == 0 and self.state.last_types is None


Step = Callable[[Compiling], "list[Cause] | None"]


def classify(
    summary: FunctionCompiles,
    state: FunctionState,
    explanation: CacheMissExplanation | None,
    types: list[str] | None,
    info: CallInfo,
    traced: bool,
    user_values: dict[str, str],
) -> list[Cause]:
    """Why one compilation happened: every cause seen, the main one first. The first of ``STEPS`` that
    answers says it; when none does, JAX could not say and jaxmagic tells what it can (``_unexplained``)."""
    if info.kind != "user":
        return [_not_users_function(summary, types, info)]
    call = Compiling(
        summary,
        state,
        _in_users_names(_without_own_context(explanation, user_values), info.user_paths),
        types,
        info,
        traced,
        _static_cause(summary, state, info),
        _own_differences(explanation, user_values),
    )
    for step in STEPS:
        causes = step(call)
        if causes is not None:
            return causes
    return [_unexplained(call)]


def _not_users_function(summary: FunctionCompiles, types: list[str] | None, info: CallInfo) -> Cause:
    shapes = signature_text(types) if types is not None else "these arguments"
    if info.kind == "library":
        return Cause("library", f"`{summary.name}`, a library's jitted function, compiled for {shapes}.")
    return Cause("eager", f"An eager operation compiled for {shapes}.")


def jaxmagic_setting(call: Compiling) -> list[Cause] | None:
    """Only jaxmagic's own cache-key settings differed, at the function's first compilation in the block."""
    # JAX names a context difference before any other, so only the function's first compilation
    # in the block is surely jaxmagic's doing; later ones are compared with the ones before.
    if call.explanation is None and call.own and call.first_in_block:
        return [_own_cause(call.summary, call.own, call.types)]
    return None


def users_leaves(call: Compiling) -> list[Cause] | None:
    """A library repacked the user's arguments for jit: JAX's explanation speaks of the library's
    structure; the user's own objects, compared leaf by leaf, say what changed."""
    explanation, state, summary = call.explanation, call.state, call.summary
    if not call.info.leaves or (explanation is not None and explanation.kind in ("never_seen", "context")):
        return None
    if not state.last_leaves:  # compiled before this block, under arguments not seen here
        return [Cause("first", f"First compilation of `{summary.name}` in this cell.")]
    leaf = leaf_cause(summary, state.last_leaves, call.info, state.changed_fields)
    return [leaf] if leaf is not None else None


def jax_explanation(call: Compiling) -> list[Cause] | None:
    """What JAX's cache-miss explanation names, with a changed static argument beside it."""
    if call.explanation is None:
        return None
    explained = _explained_cause(call.summary, call.state, call.explanation, call.info)
    if explained is None:  # "unavailable", "debug_info", "other": JAX could not name it; static values can
        return None
    static = call.static
    if explained.kind.named_alone:
        return [explained]
    same_types = call.types is not None and call.state.last_types is not None and call.types == call.state.last_types
    if static is not None and explained.kind.types and same_types:
        # JAX compares with the closest earlier key, which may be one with other types; against
        # the previous compilation only the static argument changed.
        return [static]
    return [explained] + ([static] if static is not None else [])


def function_object_rebuilt(call: Compiling) -> list[Cause] | None:
    """No explanation (switched off after many compilations, or none logged): the traced function is
    another object than at the last compilation, which is what JAX's "never seen function" says."""
    if call.explanation is None and function_rebuilt(call.state, call.info):
        return [rebuilt_cause(call.summary, call.state, call.info)]
    return None


def first_trace(call: Compiling) -> list[Cause] | None:
    """No explanation, traced, the function's first compilation in the block and no static change."""
    if call.explanation is None and call.traced and call.first_in_block and call.static is None:
        return [Cause("first", f"First compilation of `{call.summary.name}` in this cell.")]
    return None


def cached_trace(call: Compiling) -> list[Cause] | None:
    """Compiled again without tracing: the trace was reused (a transformed program is never traced)."""
    if call.explanation is not None or call.traced or call.state.compiled_before == 0 or call.info.transformed:
        return None
    return [
        Cause(
            "no_retrace",
            f"`{call.summary.name}` compiled again from its cached trace: different jit options, device, "
            "or an explicit .lower().compile().",
        )
    ]


# The ways a user's function's compilation is explained, tried in order: the first that answers says the
# cause (an earlier step is the surer evidence). A new cause is found by a step here, or inside one.
STEPS: tuple[Step, ...] = (
    jaxmagic_setting,
    users_leaves,
    jax_explanation,
    function_object_rebuilt,
    first_trace,
    cached_trace,
)


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


def _in_users_names(
    explanation: CacheMissExplanation | None, user_paths: dict[str, str]
) -> CacheMissExplanation | None:
    """The explanation with the leaves JAX names by a library's repacking (``dynamic_nodonate['rest'][13]``)
    named by the user's paths (``xb``; ``call_names``)."""
    if explanation is None or not user_paths:
        return explanation
    changes = [
        dataclasses.replace(c, argument=user_paths.get(c.argument, c.argument)) for c in explanation.type_changes
    ]
    details = [_renamed_detail(d, user_paths) for d in explanation.details]
    return dataclasses.replace(explanation, type_changes=changes, details=details)


def _renamed_detail(detail: str, user_paths: dict[str, str]) -> str:
    head, comma, rest = detail.partition(", ")
    if comma and head.startswith("at ") and head[3:] in user_paths:
        return f"at {user_paths[head[3:]]}, {rest}"
    return detail


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


def _own_cause(summary: FunctionCompiles, own: list[str], types: list[str] | None) -> Cause:
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
    return Cause("jaxmagic", why)


def _explained_cause(
    summary: FunctionCompiles, state: FunctionState, explanation: CacheMissExplanation, info: CallInfo
) -> Cause | None:
    """The cause JAX's explanation names, by its kind; None when JAX could not name one."""
    if explanation.kind == "never_seen":
        return _never_seen(summary, state, info)
    if explanation.kind == "types":
        return _types_changed(explanation)
    if explanation.kind == "pytree":
        return _structure_changed(summary, state, explanation, info)
    if explanation.kind == "context":
        changes = [d.text for d in context_differences(explanation.details)] or explanation.details
        return Cause("context", "A JAX setting that is part of the trace changed: " + "; ".join(changes) + ".", changes)
    return None


def _never_seen(summary: FunctionCompiles, state: FunctionState, info: CallInfo) -> Cause:
    """JAX never saw this function: its first compilation, a new function object, or JAX's caches emptied."""
    name = f"`{summary.name}`"
    earlier = state.last_function() if state.last_function is not None else None
    if state.compiled_before > 0 and earlier is not None and info.function is not None and earlier is info.function():
        # the very function object it traced before: not a new wrapper - JAX forgot it
        return Cause(
            "cache_cleared",
            f"`{summary.name}` compiled again although it is the same function: JAX's caches were emptied "
            "since its last compilation (jax.clear_caches(), or a library calling it).",
            ["JAX's caches emptied between the calls"],
        )
    if state.compiled_before > 0:
        return rebuilt_cause(summary, state, info)
    return Cause("first", f"First compilation of {name}.")


def _types_changed(explanation: CacheMissExplanation) -> Cause:
    changes = [c.text + ("" if c.what in ("type", "weak type") else f" ({c.what})") for c in explanation.type_changes]
    changes = changes or explanation.details
    if explanation.type_changes and all(c.what == "weak type" for c in explanation.type_changes):
        return Cause(
            "weak_type",
            "A weakly typed value (a Python scalar, or an array whose dtype came from one) and a "
            "typed one are different argument types (weak typing): " + "; ".join(changes) + ".",
            changes,
        )
    return Cause("types", "Argument types changed from the closest earlier call: " + "; ".join(changes) + ".", changes)


def _structure_changed(
    summary: FunctionCompiles, state: FunctionState, explanation: CacheMissExplanation, info: CallInfo
) -> Cause:
    """An argument's pytree differs: passed another way, a static field changed, or its structure."""
    passed = argument_passing_changes(explanation.details, info.parameter_names)
    if passed:
        changes = [
            f"{n}: passed by keyword in one call, positionally in the other"
            if how == "positionally"
            else f"{n}: passed in one call, left to its default in the other"
            for n, how in passed
        ]
        return Cause("passing", "The same argument was passed in two ways: " + "; ".join(changes) + ".", changes)
    if any("metadata" in d for d in explanation.details):
        fields = metadata_cause(summary, state, info)
        if fields is not None:
            return fields
        if any(same_metadata_text(d) for d in explanation.details):
            changes = pytree_changes(explanation.details, info.parameter_names)
            return Cause(
                "pytree_identity",
                "An argument's pytree metadata prints the same as at the earlier call but compares unequal: "
                "it holds an object compared by identity (which field could not be told from the "
                "arguments): " + "; ".join(changes) + ".",
                changes,
            )
    if info.library:  # the library's own structure (its private fields): not what the user can change
        return Cause("unexplained", unseen_change(summary, info) + " JAX's own words are in the compile log.")
    changes = pytree_changes(explanation.details, info.parameter_names)
    return Cause("pytree", "The structure of an argument changed: " + "; ".join(changes) + ".", changes)


def _static_cause(summary: FunctionCompiles, state: FunctionState, info: CallInfo) -> Cause | None:
    static_changes, identity_changes = _static_changes(state.last_static, info.static_values)
    if identity_changes:
        _name_identity_fix(summary, state.last_static or {}, info.static_values)
        return Cause(
            "static_identity",
            f"Static argument {'; '.join(identity_changes)}: each call passes a new object, and jit "
            "hashes it by identity, so none matches an earlier call.",
            identity_changes,
        )
    if static_changes:
        return Cause(
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


def _unexplained(call: Compiling) -> Cause:
    """JAX could not say: the cause from the static values, the argument types and the metadata seen."""
    summary, state, explanation, types, info, static = (
        call.summary,
        call.state,
        call.explanation,
        call.types,
        call.info,
        call.static,
    )
    name = f"`{summary.name}`"
    if static is not None:
        return static
    if state.compiled_before > 0 and types == state.last_types:
        fields = metadata_cause(summary, state, info)
        if fields is not None:
            return fields
    if explanation is None and types is not None and state.last_types is not None and types != state.last_types:
        array_parameters = [p for p in info.parameter_names if p not in info.static_argnames]
        changes = _leaf_changes(state.last_types, types, array_parameters)
        if _only_weak_type_differs(state.last_types, types):
            return Cause(
                "weak_type",
                "A Python scalar (or an array made from one, such as jnp.full(4, 1.0)) and a typed JAX value are "
                "different argument types (weak typing; from the compile log): " + "; ".join(changes) + ".",
                changes,
            )
        return Cause("types", "Argument types changed (from the compile log): " + "; ".join(changes) + ".", changes)
    if state.compiled_before == 0 and (
        explanation is None or explanation.kind != "unavailable" or not info.static_values
    ):
        return Cause("first", f"First compilation of {name} in this cell.")
    if info.static_values and state.last_static is None:
        values = "; ".join(f"{k} = {v.text}" for k, v in info.static_values.items())
        return Cause(
            "static",
            f"JAX could not say what differed; {name} has static arguments ({values}), and a new "
            "static value is the usual cause.",
        )
    if info.library:
        return Cause("unexplained", unseen_change(summary, info))
    if info.static_argnames:
        return Cause(
            "unexplained",
            "JAX could not say what differed ('cache miss explanation unavailable'), and the "
            f"static arguments of {name} ({', '.join(info.static_argnames)}) kept their values.",
        )
    return Cause(
        "unexplained",
        f"JAX could not say what differed ('cache miss explanation unavailable'); {name} has "
        "no static arguments, so a hashed value outside its argument list changed (a partial's or a "
        "wrapper's static value, or a closure of a function jitted anew).",
    )


def _static_changes(before: dict[str, StaticValue] | None, now: dict[str, StaticValue]) -> tuple[list[str], list[str]]:
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
    return len(before) == len(now) and only_weak_type_differs(list(zip(before, now)))


def _leaf_changes(before: list[str], now: list[str], parameter_names: list[str]) -> list[str]:
    if len(before) != len(now):
        return [f"{len(before)} -> {len(now)} array arguments"]
    if len(now) == len(parameter_names):  # one array per parameter: the leaves are the arguments
        names = parameter_names
    else:
        names = [f"argument leaf {i}" for i in range(len(now))]
    return [f"{n}: {a} -> {b}" for n, a, b in zip(names, before, now) if a != b][: model.CHANGES_KEPT]
