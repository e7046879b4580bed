"""The fix for a static field of a pytree argument whose value changes per call - "make it an array (a
data field)" - tried by tracing the function with that field an array, before it is offered.

A ``flax.struct.field(pytree_node=False)``, an ``eqx.field(static=True)`` or a ``register_dataclass`` meta
field is pytree metadata: part of jit's cache key, so each new value compiles again (jax-ml/jax#33043: a
``register_dataclass`` class whose static ``idx`` compiles ``area`` again for each new instance;
patrick-kidger/equinox#154: what a static field is, and why a number there is part of the structure). Making it a data field is right when it only feeds arithmetic and wrong
when it sets a shape, a count or a loop length, which must stay static. The trial traces the function
once, after the block, with the last compiling call's arguments (arrays as their shapes and dtypes) and
that field holding a traced scalar, as ``jnp.float32(lr)`` would give it.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from jaxmagic.probes._compiles.cause import PYTREE_STATIC, STATIC
from jaxmagic.probes._compiles.fixes import why_it_stays_static
from jaxmagic.probes._compiles.model import FunctionCompiles
from jaxmagic.probes._compiles.static_trial import TRIAL_SECONDS
from jaxmagic.probes._support.fixes.traced_trial import decided_in_python, trace_with, traced_scalar

NUMBER_TYPES = ("int", "float", "bool")  # a static field of these types can be made an array
_STEP = re.compile(r"\.(?P<attr>\w+)|\[(?P<index>\d+)\]|\[(?P<key>'[^']*'|\"[^\"]*\")\]")


def try_field_fix(
    summary: FunctionCompiles,
    function: Any,
    args: tuple[object, ...],
    kwargs: dict[str, object],
    positions: dict[str, int],
    fields: dict[str, tuple[str, str]],
) -> None:
    """Trace ``function`` with the changing number fields (``fields``: path -> (type name, "Owner.field"))
    made arrays; the outcome words the fix (``summary.field_fixes["pytree_static"]``, or ``["static"]`` for
    a number argument a library's jit wrapper keeps static: ``step(x, lr)`` under eqx.filter_jit)."""
    if not fields or _fix_key(fields) not in summary.field_fixes:
        return
    path, (type_name, _) = next(iter(fields.items()))
    one_trace = summary.trace_seconds / max(summary.count, 1)
    if one_trace > TRIAL_SECONDS:  # a trial costs one more trace: only where that is cheap
        return say_field_untried(summary, fields, f"one trace of `{summary.name}` took {one_trace:.1f} s")
    if function is None:
        return say_field_untried(summary, fields, f"the function `{summary.name}` no longer exists after the cell")
    root, steps = _parse(path)
    if root is None:
        return say_field_untried(summary, fields, f"the path `{path}` could not be followed")
    if root not in kwargs and positions.get(root, len(args)) >= len(args):
        return say_field_untried(summary, fields, f"where the call passed `{root}` could not be told")
    value = traced_scalar(True if type_name == "bool" else 1.0 if type_name == "float" else 1)

    def place(
        given_args: tuple[object, ...], given_kwargs: dict[str, object], tracers: tuple[object, ...]
    ) -> tuple[tuple[object, ...], dict[str, object]]:
        if root in given_kwargs:
            return given_args, {**given_kwargs, root: _replaced(given_kwargs[root], steps, tracers[0])}
        at = positions[root]
        new = list(given_args)
        new[at] = _replaced(new[at], steps, tracers[0])
        return tuple(new), given_kwargs

    trial = trace_with(function, args, kwargs, extra=(value,), place=place)
    dtype = {"bool": "bool_", "float": "float32"}.get(type_name, "int32")
    kind = "int" if type_name == "int" else "bool" if type_name == "bool" else "number"
    change = f"`{path}` a traced {dtype.rstrip('_')} scalar" + (" (a data field)" if steps else "")
    summary.field_fix_trial = trial.sentence(summary.name, change, {path: kind})
    summary.field_fix_error = trial.detail if trial.outcome == "fails" else ""
    summary.field_fix_works = None if trial.outcome == "not tried" else trial.outcome == "traces"
    summary.traced_again_to_try = summary.traced_again_to_try or trial.traced_again
    _word_fix(summary, fields)


def say_field_untried(summary: FunctionCompiles, fields: dict[str, tuple[str, str]], why: str) -> None:
    """The static-field fix is offered untried, saying why."""
    if fields and _fix_key(fields) in summary.field_fixes:
        summary.field_fix_trial = f"not tried ({why})"
        _word_fix(summary, fields)


def _fix_key(fields: dict[str, tuple[str, str]]) -> str:
    """The cause whose fix the trial words: a field of an argument ("model.n_iter"), or a whole argument
    ("lr", a number a library's jit wrapper keeps static)."""
    path = next(iter(fields))
    return PYTREE_STATIC.key if "." in path or "[" in path else STATIC.key


def _word_fix(summary: FunctionCompiles, fields: dict[str, tuple[str, str]]) -> None:
    """The fix for the static field, as its trial found it."""
    key = _fix_key(fields)
    fix = summary.field_fixes[key]
    ran = (
        f" (jaxmagic traced `{summary.name}` once more after the cell to try it; its output while tracing was "
        "not shown)"
        if summary.traced_again_to_try and summary.field_fix_works is not None
        else ""
    )
    if summary.field_fix_works is True:
        summary.field_fixes[key] = f"{fix} Checked: {summary.field_fix_trial}{ran}."
    elif summary.field_fix_works is False:
        path, (_, owned) = next(iter(fields.items()))
        summary.field_fixes[key] = (
            f"Keep `{owned}` {'a Python number (static)' if key == 'static' else 'static'}: making it an array does not trace ({summary.field_fix_trial}). "
            f"{why_it_stays_static(decided_in_python(summary.field_fix_error))[:-1]}{ran}."
        )
    else:
        summary.field_fixes[key] = f"{fix} (a suggestion: {summary.field_fix_trial})"


def _parse(path: str) -> tuple[str | None, list[tuple[str, Any]]]:
    """``"state.opt[1].lr"`` -> ("state", [("attr", "opt"), ("index", 1), ("attr", "lr")]); (None, []) when it
    cannot be read (a path through a node jaxmagic named by position, "model/3")."""
    root = re.match(r"\w+", path)
    if root is None:
        return None, []
    steps, at = [], root.end()
    while at < len(path):
        step = _STEP.match(path, at)
        if step is None:
            return None, []
        if step["attr"]:
            steps.append(("attr", step["attr"]))
        elif step["index"]:
            steps.append(("index", int(step["index"])))
        else:
            steps.append(("key", step["key"][1:-1]))
        at = step.end()
    return root.group(), steps if steps and steps[-1][0] == "attr" else []


def _replaced(node: Any, steps: list[tuple[str, Any]], value: Any) -> Any:
    """A copy of ``node`` with the attribute at the end of ``steps`` set to ``value`` (the nodes on the way
    copied too, so the user's objects are left as they are). A frozen dataclass (flax.struct, an Equinox
    Module) is set with ``object.__setattr__`` on its copy, as its own ``__init__`` would."""
    if not steps:
        return value
    (how, name), rest = steps[0], steps[1:]
    if how == "attr":
        new = copy.copy(node)
        object.__setattr__(new, name, _replaced(getattr(node, name), rest, value))
        return new
    if how == "key":
        return {**node, name: _replaced(node[name], rest, value)}
    items = list(node)
    items[name] = _replaced(items[name], rest, value)
    return type(node)(items) if isinstance(node, list) else tuple(items) if type(node) is tuple else type(node)(*items)
