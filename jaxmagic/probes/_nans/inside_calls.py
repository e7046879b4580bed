"""``%%jax_nans --inside``: which compiled computations of a cell are evaluated op by op, and how.

JAX's checks read only what reaches the output of a compiled program. A cell runs compiled programs by
more paths than its own calls of jitted functions: an eager ``lax.cond``/``while_loop``/``scan`` runs its
bodies as one compiled program; ``vmap`` or ``grad`` of a jitted function runs the transformed program
compiled; and JAX evaluates the branches of a ``cond`` under ``vmap`` eagerly with its checks switched off
(``core.jaxpr_as_fun``). The observer here sees every outermost call of the cell (``jit_calls``) and
evaluates, op by op before it runs, the first call of each of the user's jitted functions and of each
control-flow operation on each line; an eager operation JAX ran with its checks off is looked at after it
ran. What it did not evaluate (later calls, JAX's own jitted library functions) is counted for the
report's scope (``scope.Scope``), never left out of it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator

import jax

from jaxmagic._jax import jaxpr_parts, jit_calls
from jaxmagic._jax.exclusive import AlreadyActive
from jaxmagic._jax.monitoring_tool import why_no_tool
from jaxmagic._jax.types import ClosedJaxpr, Params, Program, Value
from jaxmagic.probes._nans.call_sites import CallSiteCounts
from jaxmagic.probes._nans.fixes.rules import nan_fix
from jaxmagic.probes._nans.inside import InsideSearch, search_inside
from jaxmagic.probes._nans.report import NanReport
from jaxmagic.probes._nans.scope import FAILED, LATER, LIBRARY
from jaxmagic.probes._nans.search.host_values import any_bad
from jaxmagic.probes._nans.search.producer import quiet_evaluation
from jaxmagic.probes._support import attribution
from jaxmagic.report.wording import error_line
from jaxmagic.usercode.source import is_user_file


def inside_fix(found: InsideSearch) -> str:
    """The fix %%jax_nans offers for this producer, by the same rules (tried on the values where the search
    could, else said to be untried): an --inside finding is a NaN or inf like any other."""
    p = found.producer
    if p is None:
        return ""
    return nan_fix(NanReport(found=True, value=p.value, primitive=p.primitive, phase=p.phase, producer=p))


class FirstCalls(jit_calls.CallObserver):
    """Evaluates the first call of each compiled computation of the user's, op by op, before it runs."""

    def __init__(self, report: NanReport, counts: CallSiteCounts):
        self.report, self.counts = report, counts
        self.seen: set[tuple[str, object]] = set()
        self.unevaluated: dict[tuple[str, str], int] = {}  # why a compiled computation was run whole -> how many
        self.evaluated = 0
        self._unchecked_seen: set[tuple[str, object]] = set()  # eager operations looked at after they ran

    def _skip(self, reason: tuple[str, str]) -> None:
        self.unevaluated[reason] = self.unevaluated.get(reason, 0) + 1

    def before(self, name: str, is_jit: bool, args: tuple[Value, ...], params: Params) -> None:
        if is_jit:
            program = params.get("jaxpr")
            if program is None:
                return
            if name not in self.counts.jitted and not _users_program(program):
                self._skip(LIBRARY)  # jnp.linalg.norm run eagerly: JAX's own code, checked at its outputs
                return
            key: tuple[str, object] = ("jit", name)
        elif any(isinstance(v, jaxpr_parts.jaxpr_types()) for v in _param_values(params)):
            program, key = None, (name, _caller_line())  # an eager cond/while/scan: once per line
        else:
            return  # an eager operation: JAX checks its output
        if key in self.seen:
            self._skip(LATER)
            return
        self.seen.add(key)
        label = name if is_jit else f"lax.{name}" if name in ("cond", "scan") else name
        if program is None:
            program = _one_equation(params, args)
            if program is None:
                self._skip(FAILED)
                return
        self._evaluate(program, list(args), label, self.counts.jitted.get(name, 1) if is_jit else 1, is_jit)

    def after(self, name: str, is_jit: bool, args: tuple[Value, ...], params: Params, outputs: list[Value]) -> None:
        """An eager operation JAX ran with its checks off (inside ``core.jaxpr_as_fun``: the branches of a
        ``cond`` under ``vmap``) is looked at here, once per operation and line: JAX did not check it."""
        if is_jit or jax.config.jax_debug_nans or not outputs:
            return
        key = (name, _caller_line())
        if key in self._unchecked_seen or not any_bad(outputs) or any_bad(list(args)):
            return
        self._unchecked_seen.add(key)
        program = _one_equation(params, args)
        if program is not None:
            self._evaluate(program, list(args), name, 1, False, unchecked=True)

    def _evaluate(
        self, program: Program, args: list[Value], name: str, call: int, is_jit: bool, unchecked: bool = False
    ) -> None:
        try:
            found = search_inside(program, args, function=name, call=call)
            found.unchecked = unchecked
            found.reached_output = found.reached_output and not unchecked  # its output is one operation's
            started = attribution.started_by(sys._getframe())
            for made in (found.producer.provenance if found.producer else None, found.masked_provenance):
                if made is not None:
                    made.started_by = started
                    if is_jit and f"jit({name})" not in made.transforms:
                        made.transforms.insert(0, f"jit({name})")  # the program evaluated is this jit's body
            if found.producer is not None:
                found.fix = inside_fix(found)
        except Exception as error:  # never let the check break the user's call
            found = InsideSearch(function=name, failure=f"evaluating `{name}` op by op failed: {error_line(error)}")
        self.report.inside_searches.append(found)
        self._note(found, name)

    def _note(self, found: InsideSearch, name: str) -> None:
        notes = self.report.notes
        if found.failure:
            self._skip(FAILED)
            notes.append(found.failure)
            return
        self.evaluated += 1
        notes.append(
            f"--inside: call {found.call} of `{name}`{' (JAX ran it with its checks off)' if found.unchecked else ''} was evaluated op by op on its own arguments "
            f"({found.equations} operations, with the checks off)."
        )
        if found.budget_reached:
            notes.append(
                f"`{name}` has more operations than --inside evaluates one by one ({found.equations}); the "
                "sub-programs after that were run whole, and only their outputs were checked."
            )
        if found.stopped_at:
            notes.append(
                f"--inside could not look inside `{'`, `'.join(found.stopped_at)}` in `{name}`: only its outputs were checked."
            )


def _param_values(params: Params) -> list[object]:
    values = []
    for value in params.values():
        values += list(value) if isinstance(value, (tuple, list)) else [value]
    return values


def _users_program(program: Program) -> bool:
    """Whether a jitted call's program is a function of the user's (by the file JAX recorded it from)."""
    info = getattr(getattr(program, "jaxpr", program), "debug_info", None)
    filename = str(getattr(info, "func_filename", "") or "")
    return bool(filename) and is_user_file(filename)


def _caller_line() -> object:
    """The user's line that made the outermost call being observed (a key: one evaluation per line)."""
    line = attribution.started_by(sys._getframe())
    return (line.filename, line.lineno) if line is not None else None


def _one_equation(params: dict[str, object], args: tuple[Value, ...]) -> ClosedJaxpr | None:
    """The observed call (``cond``, ``while``, ``scan``, or an eager ``div``) as a program of one equation,
    traced by binding the same primitive with the same parameters (no user Python runs); None when it could
    not be traced. JAX keeps the source of the equation being evaluated as the current one, so the equation
    gets the user's line."""
    primitive = jit_calls.observed_primitive()
    if primitive is None:
        return None
    try:
        with quiet_evaluation():
            return jax.make_jaxpr(lambda *a: primitive.bind(*a, **params))(*args)
    except Exception:
        return None


@contextlib.contextmanager
def evaluating_inside(report: NanReport, counts: CallSiteCounts | None) -> Iterator[FirstCalls | None]:
    """The block with ``--inside``'s observer on; yields it (None when it could not observe)."""
    if counts is None:
        report.notes.append(
            f"--inside could not see your calls ({why_no_tool(calls=True)}): nothing was evaluated op by op."
        )
        yield None
        return
    with contextlib.ExitStack() as stack:
        observer = FirstCalls(report, counts)
        try:
            observed = stack.enter_context(jit_calls.observing_calls(observer))
        except AlreadyActive as error:  # another probe follows every call: the cell runs without --inside
            report.notes.append(f"--inside did not run: {error}")
            yield None
            return
        if not observed:
            report.notes.append("--inside could not observe jitted calls in this JAX: nothing was evaluated op by op.")
            yield None
            return
        yield observer
