"""The fixes of a report: the kind's table written with your names (the argument to make static,
the traced value on your line), fitted to the failing line's code, the one matching your line first."""

from __future__ import annotations

import keyword

from jaxmagic.probes._support.fixes.fitters import fit
from jaxmagic.probes._support.fixes.fix import Fix
from jaxmagic.probes._support.fixes.line_code import Resolve, read_line
from jaxmagic.probes.explain.kinds import ErrorKind
from jaxmagic.probes.explain.report import TracerErrorReport


def fixes_for(kind: ErrorKind, report: TracerErrorReport, resolve: Resolve = lambda name: None) -> list[Fix]:
    """The kind's fixes that fit your line, with your names filled in, the best one first.

    ``resolve`` gives the object a dotted name on the failing line stands for (see ``resolver``).
    """
    # The argument to name in a fix: one the value depends on; for static_argnames
    # preferably the ones that arrived as Python scalars (weakly typed tracers), as
    # settings such as a limit or a count usually do - all of them: a value computed from
    # two settings (int(T / dt)) needs both static.
    candidates = report.depends_on or [t.name for t in report.traced_names]
    weak = {report.origin_arguments.get(t.name, t.name) for t in report.traced_names if t.weak_type}
    settings = [c for c in candidates if c in weak]
    arg = settings[0] if settings else (candidates[0] if candidates else "n")
    static = ", ".join(repr(name) for name in settings or [arg]) + ("," if len(settings) < 2 else "")
    fixes = [Fix(f.use.replace("('{arg}',)", f"({static})").replace("{arg}", arg), f.when) for f in kind.fixes]
    packed = [name for name in settings or [arg] if not name.isidentifier()]
    if packed:  # args[1] of a def f(*args): static_argnames takes parameter names only (JAX rejects others)
        fixes = [
            Fix(
                f"static_argnums=(<position of {packed[0]}>,)",
                f"`{packed[0]}` is an element of a *args parameter: make it static by its position among the "
                "call's arguments (static_argnames takes parameter names only)",
            )
            if f.use.startswith("static_argnames")
            else f
            for f in fixes
        ]
    # {value}: the traced name on your failing line (x in x.item()); a fix never shows a name your code lacks.
    value = report.traced_names[0].name if report.traced_names else ""
    fixes = [
        Fix(f.use.replace("{value}", value), f.when)
        if value or "{value}" not in f.use
        else Fix("stay in JAX: compute with the array itself instead of a Python number (.astype for a dtype)", f.when)
        for f in fixes
    ]
    # static_argnames belongs to the function given to jax.jit (not a loop body it calls), and only
    # names one of its arguments: without such an argument the fix is left as a pattern.
    jitted = report.jitted_function if report.jitted_transformation == "jit" else ""
    function = jitted or report.traced_function
    if jitted and jitted != report.traced_function and not report.origin_arguments:
        fixes = [f for f in fixes if not f.use.startswith("static_argnames")] + [
            Fix(
                f"jax.jit({jitted}, static_argnames=(...))",
                f"the value comes from an argument of {jitted} that is a setting; jaxmagic could not tell which "
                "argument it comes from",
            )
        ]
        function = ""
    if function.isidentifier() and not keyword.iskeyword(function):
        fixes = [
            Fix(f"jax.jit({function}, {f.use})" if f.use.startswith("static_arg") else f.use, f.when) for f in fixes
        ]
    line = report.failing_line.code if report.failing_line else ""
    failing = report.failing_line
    code = read_line(line, failing.filename, failing.lineno) if failing else None
    code = code or read_line(report.failing_lambda)
    fixes = fit(kind.key, fixes, code, report.traced_names, resolve)
    # a line read as code was fitted above; one that was not (part of a longer statement) is matched as text
    preferred = _preferred_fix(kind.key, line) if code is None else ""
    if preferred:
        fixes.sort(key=lambda f: 0 if preferred in f.use else 1)
    return fixes


def _preferred_fix(kind: str, line: str) -> str:
    """The fix that matches what your line does, as a substring of Fix.use ("" to keep the table's order)."""
    stripped = line.strip()
    if kind == "bool" and stripped.startswith("while "):
        return "lax.while_loop"
    if kind == "int":
        if "range(" in stripped:
            return "fori_loop"
        if "[" in stripped:
            return "jnp.asarray"
    if kind == "concrete":
        if "nonzero" in stripped or "unique" in stripped or "argwhere" in stripped:
            return "size=k"
        if "arange" in stripped or "zeros" in stripped or "ones" in stripped:
            return "static_argnames"
        if "float(" in stripped or "int(" in stripped or ".item()" in stripped:
            return "stay in JAX"
    return ""
