"""Explaining a ``KeyReuseError``: which function got the key, which argument, your lines of the use and the first use."""

from __future__ import annotations

import re
import sys
from types import FrameType

import jax

from jaxmagic._jax import prng_checks
from jaxmagic._jax.types import Equation, Params
from jaxmagic.probes._keys.draws import handed_over
from jaxmagic.probes._keys.findings import KeyReuse
from jaxmagic.probes._keys.fixes import same_key_draws_fix, split_off_fix
from jaxmagic.probes._keys.jit_params import argument_name
from jaxmagic.probes._keys.wording import FIX
from jaxmagic.probes._support import attribution
from jaxmagic.probes._support.calls import call_names
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance
from jaxmagic.report.wording import message_of
from jaxmagic.usercode.source import (
    code_kind,
    first_library_function,
    innermost_user_frame,
    is_user_file,
    line_of,
    user_lines,
    user_lines_of_stack,
)

_PASSED = re.compile(r"Previously-consumed key passed to (?P<function>.+?) at index (?P<index>\d+)")
_IN_TRACE = re.compile(r"In (?P<function>[\w\-.]+), argument (?P<index>\d+) is already consumed")


def explain_key_reuse(
    error: BaseException,
    where: str = "",
    function: str = "",
    params: Params | None = None,
    args: tuple[object, ...] = (),
) -> KeyReuse:
    """The facts of a ``KeyReuseError``: who got the key, which argument, where it was used and first used;
    for a key a library consumed, the library and the user's line that handed the key over (``args``:
    the call's arguments, when the reuse was found at a call)."""
    message = message_of(error).strip().splitlines()[0] if message_of(error).strip() else ""
    reuse = KeyReuse(message=message, where=where or "call")
    passed, in_trace = _PASSED.search(message), _IN_TRACE.search(message)
    match = passed or in_trace
    if match:
        reuse.consumer = match.group("function")
        reuse.index = int(match.group("index"))
    if in_trace:
        reuse.where = "trace"
        reuse.function = function
    elif function and reuse.consumer in ("jit-compiled function", ""):
        reuse.consumer = function
    if params and reuse.index is not None:
        reuse.argument = argument_name(params, reuse.index)
        if reuse.where == "call" and 0 <= reuse.index < len(args):
            # a library's jit wrapper packed the user's arguments: JAX's name for the leaf is the library's
            through = call_names.user_call()
            reuse.argument = (through.name_of(args[reuse.index]) if through is not None else "") or reuse.argument
            del through
    cause = error.__cause__
    if cause is not None and type(cause).__name__ == "KeyReuseError":
        first = user_lines(cause.__traceback__, below_jaxmagic=False)
        reuse.first_used_at = first[-1] if first else None
    if cause is not None and type(cause).__name__ == "JaxStackTraceBeforeTransformation":
        inner = user_lines(cause.__traceback__, below_jaxmagic=False)  # the traced line that reused it
        reuse.reused_at = inner[-1] if inner else None
        called = first_library_function(cause.__traceback__)  # "uniform": what that line called
        if called and reuse.consumer in ("jit", "pjit", "closed_call", ""):
            reuse.consumer = f"jax.random.{called}" if _is_random_api(called) else called
    started = attribution.started_by(sys._getframe(1))
    equations = prng_checks.reuse_equations(error)
    # the jitted function JAX checked; none when JAX traced the program itself around an eager loop
    traced = function if prng_checks.checked_program_is_users(error) is not False else ""
    if equations and _in_loop_body(equations[-1], message):
        _explain_loop(reuse, equations, message, started, traced)
    if reuse.reused_at is None:
        lines = user_lines(error.__traceback__, below_jaxmagic=False) or user_lines_of_stack(sys._getframe(1))
        reuse.reused_at = lines[-1] if lines else None
    if reuse.where == "call" and reuse.index is not None and 0 <= reuse.index < len(args):
        reuse.library, reuse.handed_at = _handed_over(args[reuse.index])
        reuse.library_own = bool(reuse.library) and reuse.handed_at is None
    if reuse.provenance is None:
        reuse.provenance = _provenance(reuse, equations, started)
    if reuse.where == "trace" and prng_checks.checked_program_is_users(error) is False:
        # a program JAX traced around no function of yours: the user's own eager loop has its draw on
        # a line of yours; a library's (numpyro's sampling loop) has none
        made = reuse.provenance.made_at if reuse.provenance is not None else None
        reuse.library_own = made is None or not is_user_file(made.filename)
    if not reuse.fix:
        reuse.fix = _fix(reuse)
    return reuse


def _handed_over(key: object) -> tuple[str, SourceLine | None]:
    """(the library's public callable, the user's line that gave it ``key``) when the consuming jax.random
    call was made by a library's code (numpyro's seed handler); ("", None) when the user's code called it;
    (library, None) when no frame of the user's holds the key: the library made it itself."""
    frame: FrameType | None = sys._getframe(2)
    inner = None
    while frame is not None and code_kind(frame.f_code.co_filename) in ("jax", "jaxmagic", "python"):
        inner, frame = frame, frame.f_back
    if frame is None or code_kind(frame.f_code.co_filename) != "library":
        return "", None
    holder, library, _ = handed_over(innermost_user_frame(frame), key, inner, require_holder=True)
    if not library:
        return "", None
    return library, line_of(holder) if isinstance(holder, FrameType) else None


def _in_loop_body(eqn: Equation, message: str) -> bool:
    return eqn.primitive.name in ("scan", "while") and "when repeatedly executed" in message


def _jit_prefix(function: str, transforms: list[str]) -> list[str]:
    """The traced function's own ``jit(f)`` first: JAX checks the program inside it, not the call."""
    if function and not (transforms and transforms[0].startswith("jit")):
        return [f"jit({function})", *transforms]
    return transforms


def _explain_loop(
    reuse: KeyReuse, equations: list[Equation], message: str, started: SourceLine | None, traced: str
) -> None:
    """A key reused from one pass of a loop to the next: the line in the body that draws with it."""
    loop_eqn = equations[-1]
    reuse.where = "trace"
    reuse.loop = "scan body" if loop_eqn.primitive.name == "scan" else "while loop"  # as attribution names them
    loop = attribution.of_equation(loop_eqn, equations[:-1], started)
    reuse.loop_call = loop.made_at
    if reuse.loop_call is None:  # an eager loop: JAX traced it itself, and the loop call is on the stack
        lines = user_lines_of_stack(sys._getframe(2))
        reuse.loop_call = lines[-1] if lines else None
    found = prng_checks.loop_reuse_culprit(loop_eqn, message)
    if found is None:
        reuse.provenance = Provenance(
            made_at=None,
            function=loop.function,
            transforms=_jit_prefix(traced, loop.transforms),
            started_by=started,
            unknown="JAX names only the loop, and the draw inside its body that consumes the reused key "
            "could not be found in the traced program",
        )
        reuse.reused_at = loop.made_at
        return
    culprit, calls, program = found
    provenance = attribution.of_equation(culprit, [*equations, *calls], started)
    provenance.transforms = _jit_prefix(traced, provenance.transforms)
    reuse.provenance = provenance
    reuse.reused_at = provenance.made_at
    reuse.function = provenance.function
    if provenance.library_function:
        reuse.consumer = provenance.library_function
    reuse.index = None
    fix = split_off_fix(provenance.made_at)
    if fix is not None:
        tried = prng_checks.passes_with_sibling(loop_eqn, program, culprit)
        if tried:
            checked = f"checked: with `{fix.split_off}` in that draw, JAX's key-reuse check of the traced loop passes"
        elif prng_checks.split_sibling_unused(program, culprit):
            checked = f"checked: in the traced loop body the key split off as `{fix.split_off}` is never used"
        else:
            checked = f"checked against your source only: `{fix.split_off}` is never read in `{provenance.function}`"
        reuse.fix = f"{fix.text} ({checked})."
    else:
        reuse.fix = (
            "Carry a fresh key through the loop: split the carried key at every pass, "
            "`key, sub = jax.random.split(key)`, draw with `sub` and return `key` in the carry; or derive "
            "one key per pass with `jax.random.fold_in(key, i)` from the loop index."
        )


def _provenance(reuse: KeyReuse, equations: list[Equation], started: SourceLine | None) -> Provenance:
    """Where the reused key was drawn with: the equation JAX's check was at, else the line of the use."""
    if reuse.where == "trace" and equations:
        provenance = attribution.of_equation(equations[-1], equations[:-1], started)
        provenance.transforms = _jit_prefix(reuse.function, provenance.transforms)
        if provenance.made_at is not None:
            return provenance
    return attribution.of_source_line(
        reuse.reused_at, started, _jit_prefix(reuse.function, []) if reuse.where == "trace" else []
    )


def _fix(reuse: KeyReuse) -> str:
    """The fix for this code: draw with the key split off for it, when that is the shape; else the general one."""
    for line in (reuse.first_used_at, reuse.reused_at):
        fix = split_off_fix(line)
        if fix is not None:
            return f"{fix.text} (a suggestion, checked against your source: `{fix.split_off}` is never read in `{line.function if line else ''}`)."
    if reuse.where == "trace" and reuse.consumer.startswith("jax.random."):
        draws = same_key_draws_fix(reuse.reused_at, reuse.consumer)
        if draws is not None:
            return draws.text + "."
    return FIX


def _is_random_api(name: str) -> bool:
    return callable(getattr(jax.random, name, None))
