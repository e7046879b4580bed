"""Trying a static/traced fix by tracing the user's function with it, before the fix is offered.

"Pass it traced" (drop an argument from ``static_argnames`` and pass ``jnp.int32(n)``) is right for a
value that only feeds arithmetic and wrong for the count of ``jax.random.split(key, n)`` or a
``lax.scan(..., length=n)``: traced, the program does not trace. Which one it is shows by tracing the
function once with the argument traced: ``jax.eval_shape`` on abstract values of the call's arguments
(their shapes and dtypes, so nothing is computed or compiled), the other static values as given.

Tracing runs the user's Python function again (its trace-time side effects: a ``print`` while tracing,
a list appended to). Its output is kept out of the user's; a report that used a trial says plainly that
the function was traced again to try the fix (``TraceTrial.traced_again``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import re
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from jaxmagic.probes._support.rerun.kept_state import kept
from jaxmagic.report.wording import error_line
from jaxmagic.usercode.source import user_lines


@dataclasses.dataclass(frozen=True)
class TraceTrial:
    """The outcome of tracing a function with a fix applied."""

    outcome: str  # "traces", "fails" or "not tried"
    detail: str = ""  # the error's first line ("fails"), or why it was not tried
    at: str = ""  # the user's line where tracing failed: "`keys = jax.random.split(key, n)` (line 7)"
    traced_again: bool = False  # the user's function ran again (traced), for this trial
    code: str = ""  # that line's code alone: "keys = jax.random.split(key, n)"

    def sentence(self, function: str, change: str, names: dict[str, str] | None = None) -> str:
        """ "tried by tracing `f` with n traced: fails at `...`: TypeError: ..." (``change``: "n traced").
        ``names``: the values made traced, by name, with what they were ("int"): where the failing line uses
        one of them, the failure is worded plainly from the line instead of JAX's message (``plain``)."""
        tried = f"tried by tracing `{function}` with {change}"
        if self.outcome == "traces":
            return f"{tried}: it traces"
        if self.outcome == "fails":
            plain = self.plain(names or {})
            if plain:
                return f"{tried}: it fails - {plain}"
            where = f" at {self.at}" if self.at else ""
            return f"{tried}: it fails{where} - {self.detail}"
        return f"not tried ({self.detail})"

    def plain(self, names: dict[str, str]) -> str:
        """The failure in the user's words, from the line where tracing stopped: "`keys = jax.random.split(key,
        n)` (line 7) needs `n` as a Python int: a traced value cannot set a count, a shape or a loop length";
        "" when that line does not use one of ``names`` by name (JAX's own message says it then)."""
        if self.outcome != "fails" or not self.code:
            return ""
        used = [n for n in names if re.search(rf"(?<![\w.]){re.escape(n)}(?!\w)", self.code)]
        if not used:
            return ""
        if self.chooses_code:
            needs = " and ".join(f"`{n}` as a Python value" for n in used)
            return f"{self.at} needs {needs}: Python's `if`/`not`/`and`/`or` cannot decide on a traced value"
        needs = " and ".join(f"`{n}` as a Python {names[n]}" for n in used)
        return f"{self.at} needs {needs}: a traced value cannot set a count, a shape or a loop length"

    @property
    def chooses_code(self) -> bool:
        """The trial failed because Python decided on the traced value (``if``, ``not``, ``and``/``or``): the
        value chooses which code runs (a train/eval flag), it does not set a size."""
        return self.outcome == "fails" and decided_in_python(self.detail)


def decided_in_python(failure: str) -> bool:
    """A trial's failure (its ``detail``, "Type: message") was Python deciding on a traced value."""
    return failure.startswith("TracerBoolConversionError")


def abstract_value(value: Any) -> Any:
    """A ``jax.ShapeDtypeStruct`` of an array or a Python number (weak-typed, as jit traces one); the value
    itself for anything else (it stays as given)."""
    if isinstance(value, bool):
        return jax.ShapeDtypeStruct((), np.dtype(bool))
    if isinstance(value, (int, float, complex)):
        dtype = jax.dtypes.canonicalize_dtype(np.asarray(value).dtype)
        return jax.ShapeDtypeStruct((), dtype, weak_type=True)
    aval = getattr(value, "aval", None)
    if aval is not None and hasattr(aval, "shape") and hasattr(aval, "dtype"):
        return jax.ShapeDtypeStruct(aval.shape, aval.dtype, weak_type=bool(getattr(aval, "weak_type", False)))
    if isinstance(value, np.ndarray | np.generic):
        return jax.ShapeDtypeStruct(value.shape, jax.dtypes.canonicalize_dtype(value.dtype))
    return value


def abstract_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any], static_positions: set[int], static_names: set[str]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """(args, kwargs) with every leaf of a non-static argument an abstract value; static ones as given."""
    abstract_args = tuple(a if i in static_positions else jax.tree.map(abstract_value, a) for i, a in enumerate(args))
    abstract_kwargs = {k: v if k in static_names else jax.tree.map(abstract_value, v) for k, v in kwargs.items()}
    return abstract_args, abstract_kwargs


def abstract_arrays(
    args: tuple[object, ...], kwargs: dict[str, object]
) -> tuple[tuple[object, ...], dict[str, object]]:
    """(args, kwargs) with every array leaf an abstract value and every other value as given (a Python
    number stays a number: bound values a trial keeps static, as the program had them)."""

    def arrays_only(leaf: Any) -> Any:
        is_array = getattr(leaf, "aval", None) is not None or isinstance(leaf, np.ndarray)
        return abstract_value(leaf) if is_array else leaf

    return jax.tree.map(arrays_only, tuple(args)), jax.tree.map(arrays_only, dict(kwargs))


def traced_scalar(value: Any) -> Any:
    """The abstract value a fix "pass it as an array" gives a static Python number: ``jnp.int32(n)``'s
    ``int32[]`` for an int, ``float32[]`` for a float, ``bool[]`` for a bool; None for anything else."""
    if isinstance(value, bool):
        return jax.ShapeDtypeStruct((), np.dtype(bool))
    if isinstance(value, int):
        return jax.ShapeDtypeStruct((), np.dtype(np.int32))
    if isinstance(value, float):
        return jax.ShapeDtypeStruct((), np.dtype(np.float32))
    return None


def trace_with(
    fun: Callable[..., object],
    args: tuple[object, ...],
    kwargs: dict[str, object],
    extra: tuple[object, ...] = (),
    place: Callable[
        [tuple[object, ...], dict[str, object], tuple[object, ...]], tuple[tuple[object, ...], dict[str, object]]
    ]
    | None = None,
) -> TraceTrial:
    """Trace ``fun(*args, **kwargs)`` with ``jax.eval_shape``: every ``ShapeDtypeStruct`` leaf is a traced
    input, every other value is passed as given (a static argument). Nothing is compiled or computed;
    the function's own output while it is traced is not shown. ``extra``: more traced inputs (abstract
    values) that ``place(args, kwargs, tracers)`` puts where no pytree leaf is - a static field of an
    argument made an array, say - before ``fun`` is called."""
    is_abstract = lambda leaf: isinstance(leaf, jax.ShapeDtypeStruct)  # noqa: E731
    try:
        leaves, tree = jax.tree.flatten((args, kwargs), is_leaf=is_abstract)
    except Exception as failure:
        return TraceTrial("not tried", f"the call's arguments could not be read: {error_line(failure)}")
    holes = [i for i, leaf in enumerate(leaves) if is_abstract(leaf)]

    def call(*traced: object) -> object:
        filled = list(leaves)
        for i, value in zip(holes, traced):
            filled[i] = value
        given_args, given_kwargs = jax.tree.unflatten(tree, filled)
        if place is not None:
            try:
                given_args, given_kwargs = place(given_args, given_kwargs, traced[len(holes) :])
            except Exception as failure:  # jaxmagic could not apply the fix: not the user's code failing
                raise _NotApplied(error_line(failure)) from None
        return fun(*given_args, **given_kwargs)

    output = io.StringIO()
    try:
        # what the function reaches besides its arguments is the user's: a stateful library's jit
        # wrapper would write tracers into it (kept_state)
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output), kept(fun, leaves):
            jax.eval_shape(call, *[leaves[i] for i in holes], *extra)
    except _NotApplied as failure:
        return TraceTrial("not tried", f"jaxmagic could not apply it to the call's arguments: {failure}")
    except Exception as failure:
        lines = user_lines(failure.__traceback__, below_jaxmagic=True)
        code = lines[-1].code.split("  # ", 1)[0].rstrip() if lines and lines[-1].code else ""  # no comment
        at = f"`{code}` ({lines[-1].where})" if code else ""
        failure.__traceback__ = None  # the frames hold the trial's tracers
        return TraceTrial("fails", error_line(failure), at, traced_again=True, code=code)
    return TraceTrial("traces", traced_again=True)


class _NotApplied(Exception):
    """The fix could not be applied to the call's arguments (jaxmagic's part of a trial failed)."""


def carried_leaf(init: Any, path: str) -> tuple[int, Any] | None:
    """(position among the carry's leaves, initial value) of the carry leaf JAX names ``path`` relative to
    the carry (``[1]`` of "the argument c[1]"); None when no leaf has that path."""
    leaves, _ = jax.tree_util.tree_flatten_with_path(init)
    for position, (key_path, leaf) in enumerate(leaves):
        if jax.tree_util.keystr(key_path) == path:
            return position, leaf
    return None


def trace_body_with_constant(
    step_body: Callable[[Any, Any], Any], init: Any, step: Any, position: int
) -> tuple[TraceTrial, bool]:
    """Trace a loop body once (``step_body(carry, step)`` gives the new carry) with the carry leaf at
    ``position`` a Python constant (its initial value, as a closure would give it) and every other input
    abstract: (the trial, whether the body returns that leaf unchanged - the condition for keeping it out of
    the carry)."""
    leaves, tree = jax.tree.flatten(init)
    constant = leaves[position]
    abstract = [abstract_value(leaf) for leaf in leaves]
    one_step = jax.tree.map(lambda aval: jax.ShapeDtypeStruct(aval.shape, aval.dtype), step)
    unchanged = []

    def traced(carry_leaves: Sequence[Any], x: Any) -> None:
        filled = list(carry_leaves)
        filled[position] = constant
        out = jax.tree.leaves(step_body(jax.tree.unflatten(tree, filled), x))
        kept = out[position] if len(out) == len(leaves) else None
        same = kept is constant or (
            not isinstance(kept, jax.core.Tracer) and type(kept) is type(constant) and _equal(kept, constant)
        )
        unchanged.append(same)

    output = io.StringIO()
    try:
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            jax.eval_shape(traced, abstract, one_step)
    except Exception as failure:
        lines = user_lines(failure.__traceback__, below_jaxmagic=True)
        at = f"`{lines[-1].code}` ({lines[-1].where})" if lines and lines[-1].code else ""
        failure.__traceback__ = None
        return TraceTrial("fails", error_line(failure), at, traced_again=True), False
    return TraceTrial("traces", traced_again=True), bool(unchanged and unchanged[0])


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # an array's == is elementwise: only the same object counts
        return False
