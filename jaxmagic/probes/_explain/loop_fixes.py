"""The fix for a value carried by a bare loop (``lax.scan``, ``lax.fori_loop``, ``lax.while_loop``; nothing
jitted) that must be concrete: keep it out of the carry, a Python value the body closes over - tried by
tracing the body with it so.

A loop traces its body once with an abstract carry, so a size kept in the carry (``n`` of
``total, n = c``; ``jnp.zeros(n)``) is never concrete, and no ``static_argnums`` helps: there is no jit
(jax-ml/jax#23637: a tracer error raised "for scan" in the body). The fix holds when the body traces with
that leaf a Python constant (the value the loop starts it at) and returns it unchanged; a value the body
changes at each step cannot be a constant.
"""

from __future__ import annotations

from jaxmagic._jax.loop_call import loop_call
from jaxmagic._jax.transform_stack import Frames, Transformation
from jaxmagic.probes._explain.report import TracerErrorReport
from jaxmagic.probes._support.fixes.fix import Fix
from jaxmagic.probes._support.fixes.traced_trial import carried_leaf, trace_body_with_constant

LOOPS = ("scan", "fori_loop", "while_loop")
_RAN = " (jaxmagic traced your loop body once more to try it; its output while tracing was not shown)"


def carried_value_fix(report: TracerErrorReport, inside: list[Transformation], frames: Frames) -> Fix | None:
    """The tried "keep it out of the carry" fix when the failing value is (made from) an element of a bare
    loop's carry; None when it is not, or when a jit is on the stack (its static arguments are the fix)."""
    if any(t.name == "jit" for t in inside) or not inside or inside[-1].name not in LOOPS:
        return None
    loop = inside[-1]
    body = loop.function.rsplit(".", 1)[-1]
    if body != report.traced_function.rsplit(".", 1)[-1]:
        return None
    found = loop_call(frames, loop.name, body)
    position = found.carry_position if found is not None else (1 if loop.name == "fori_loop" else 0)
    if len(loop.parameters) <= position:
        return None
    carry = loop.parameters[position]
    argument = next((d for d in report.depends_on if d == carry or d.startswith((f"{carry}[", f"{carry}."))), "")
    if not argument:
        return None
    path = argument[len(carry) :]
    on_line = next((t.name for t in report.traced_names if report.origin_arguments.get(t.name) == argument), "")
    on_line = on_line or _name_bound_to(report, frames, body, carry, path)
    shown = f"`{on_line}` (`{argument}`)" if on_line and on_line != argument else f"`{argument}`"
    when = _WHEN.format(loop=loop.name, body=body)
    if found is None:
        return Fix(
            f"{shown} kept out of the carry: a Python value `{body}` closes over",
            when,
            "suggestion: not tried (the loop's arguments were not found on the stack)",
        )
    leaf = carried_leaf(found.init, path)
    if leaf is None:
        return None
    index, start = leaf
    trial, unchanged = trace_body_with_constant(found.step_body, found.init, found.step, index)
    del found
    use = f"{shown} kept out of the carry: a Python value `{body}` closes over ({on_line + ' ' if on_line else ''}= {start!r})"
    how = f"tracing `{body}` with `{argument}` as the Python value {start!r} the loop starts it at"
    if trial.outcome != "traces":
        checked = f"checked: still fails - {how} raised {trial.detail}" + (f" at {trial.at}" if trial.at else "")
    elif not unchanged:
        checked = (
            f"checked: still fails - {how} traces, but `{body}` returns a new value for it at each step, so it "
            "cannot be a constant: compute on a fixed (largest) size and mask instead"
        )
    else:
        checked = f"checked: {how} traces, and `{body}` returns it unchanged"
    return Fix(use, when, checked + _RAN)


def _name_bound_to(report: TracerErrorReport, frames: Frames, body: str, carry: str, path: str) -> str:
    """The traced name on the failing line bound to the carry's leaf at ``path`` in the body's frame (``n`` of
    ``total, n = c`` for ``c[1]``); "" when none is."""
    for frame, _ in reversed(frames):
        if frame.f_code.co_name != body or carry not in frame.f_locals:
            continue
        scope = frame.f_locals
        found = carried_leaf(scope[carry], path)
        if found is None:
            return ""
        leaf = found[1]
        return next((t.name for t in report.traced_names if scope.get(t.name) is leaf), "")
    return ""


_WHEN = (
    "nothing is jitted here: `lax.{loop}` traces `{body}` once with an abstract carry, so a size kept in the "
    "carry is never concrete. A value that does not change between steps needs no carry: define it outside "
    "`{body}` and read it there; as a Python number it stays concrete"
)
