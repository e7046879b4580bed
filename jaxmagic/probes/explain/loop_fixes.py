"""The fix for a value carried by a bare ``lax.scan`` (nothing jitted) that must be concrete: keep it out
of the carry, a Python value the body closes over - tried by tracing the body with it so.

A scan traces its body once with an abstract carry, so a size kept in the carry (``n`` of
``total, n = c``; ``jnp.zeros(n)``) is never concrete, and no ``static_argnums`` helps: there is no jit.
The fix holds when the body traces with that leaf a Python constant (the value the scan starts it at)
and returns it unchanged; a value the body changes at each step cannot be a constant.
"""

from __future__ import annotations

from jaxmagic._jax.scan_call import scan_call
from jaxmagic._jax.transform_stack import Transformation
from jaxmagic.probes._support.fixes.fix import Fix
from jaxmagic.probes._support.fixes.traced_trial import carried_leaf, trace_body_with_constant
from jaxmagic.probes.explain.report import TracerErrorReport

_RAN = " (jaxmagic traced your scan body once more to try it; its output while tracing was not shown)"


def carried_value_fix(report: TracerErrorReport, inside: list[Transformation], frames: list) -> Fix | None:
    """The tried "keep it out of the carry" fix when the failing value is (made from) an element of a bare
    scan's carry; None when it is not, or when a jit is on the stack (its static arguments are the fix)."""
    if any(t.name == "jit" for t in inside) or not inside or inside[-1].name != "scan":
        return None
    scan = inside[-1]
    if not scan.parameters or scan.function.rsplit(".", 1)[-1] != report.traced_function.rsplit(".", 1)[-1]:
        return None
    carry = scan.parameters[0]
    argument = next((d for d in report.depends_on if d == carry or d.startswith((f"{carry}[", f"{carry}."))), "")
    if not argument:
        return None
    on_line = next((t.name for t in report.traced_names if report.origin_arguments.get(t.name) == argument), "")
    body = scan.function.rsplit(".", 1)[-1]
    on_line = on_line or _name_bound_to(report, frames, body, carry, argument[len(carry) :])
    shown = f"`{on_line}` (`{argument}`)" if on_line and on_line != argument else f"`{argument}`"
    call = scan_call(frames, body)
    if call is None:
        return Fix(
            f"{shown} kept out of the carry: a Python value `{body}` closes over",
            _WHEN.format(body=body, value="its value"),
            "suggestion: not tried (the scan's arguments were not found on the stack)",
        )
    function, init, x_avals = call
    leaf = carried_leaf(init, argument[len(carry) :])
    if leaf is None:
        del function, init, x_avals, call
        return None
    position, start = leaf
    trial, unchanged = trace_body_with_constant(function, init, x_avals, position)
    del function, init, x_avals, call
    use = f"{shown} kept out of the carry: a Python value `{body}` closes over ({on_line + ' ' if on_line else ''}= {start!r})"
    how = f"tracing `{body}` with `{argument}` as the Python value {start!r} the scan starts it at"
    if trial.outcome != "traces":
        checked = f"checked: still fails - {how} raised {trial.detail}" + (f" at {trial.at}" if trial.at else "")
    elif not unchanged:
        checked = (
            f"checked: still fails - {how} traces, but `{body}` returns a new value for it at each step, so it "
            "cannot be a constant: compute on a fixed (largest) size and mask instead"
        )
    else:
        checked = f"checked: {how} traces, and `{body}` returns it unchanged"
    return Fix(use, _WHEN.format(body=body, value=repr(start)), checked + _RAN)


def _name_bound_to(report: TracerErrorReport, frames: list, body: str, carry: str, path: str) -> str:
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
    "nothing is jitted here: `lax.scan` traces `{body}` once with an abstract carry, so a size kept in the carry "
    "is never concrete. A value that does not change between steps needs no carry: define it outside `{body}` "
    "(= {value}) and read it there, as a Python number it stays concrete"
)
