"""The fixes of a report: the kind's table written with your names (the argument to make static,
the traced value on your line), fitted to the failing line's code, the one matching your line first."""

from __future__ import annotations

import dataclasses
import keyword
import re

from jaxmagic.probes._explain.kinds import ErrorKind
from jaxmagic.probes._explain.line_fixes.fitters import fit
from jaxmagic.probes._explain.report import TracerErrorReport
from jaxmagic.probes._support.fixes.fix import Fix
from jaxmagic.probes._support.fixes.line_code import Resolve, read_line


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
    parts = [name for name in settings or [arg] if not name.isidentifier()]
    if parts:  # static_argnames takes parameter names only (JAX rejects others): a part of one needs its own fix
        fixes = [static_fix_of_part(parts[0]) if f.use.startswith("static_argnames") else f for f in fixes]
    # {value}: the traced name on your failing line (x in x.item()); a fix never shows a name your code lacks.
    value = report.traced_names[0].name if report.traced_names else ""
    fixes = [
        dataclasses.replace(f, use=f.use.replace("{value}", value))
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
            dataclasses.replace(f, use=f"jax.jit({function}, {f.use})") if f.use.startswith("static_arg") else f
            for f in fixes
        ]
    line = report.failing_line.code if report.failing_line else ""
    failing = report.failing_line
    code = read_line(line, failing.filename, failing.lineno) if failing else None
    code = code or read_line(report.failing_lambda)
    paths = [name for name in report.depends_on if not name.isidentifier()]
    fixes = fit(kind.key, fixes, code, report.traced_names, resolve, paths=paths)
    # a line read as code was fitted above; one that was not (part of a longer statement) is matched as text
    preferred = _preferred_fix(kind.key, line) if code is None else ""
    if preferred:
        fixes.sort(key=lambda f: 0 if preferred in f.use else 1)
    return fixes


# The mark of a static fix that adds a parameter to the user's function: it cannot be tried on the function as it is.
NEW_PARAMETER = "suggestion: not tried (it adds a parameter to your function)"

# How JAX names an element of a *args parameter (args[1]): a position among the call's arguments.
_POSITIONAL_ELEMENT = re.compile(r"^\w+\[\d+\]$")


def static_fix_of_part(part: str) -> Fix:
    """The static fix for a traced part of a parameter, as JAX names it: ``args[1]`` (an element of a
    *args parameter: static by its position) or ``d['num']`` / ``cfg.steps`` (one entry of a container
    argument: jit makes whole arguments static, never one entry - jax-ml/jax#6853)."""
    if _POSITIONAL_ELEMENT.match(part):
        return Fix(
            f"static_argnums=(<position of {part}>,)",
            f"`{part}` is an element of a *args parameter: make it static by its position among the "
            "call's arguments (static_argnames takes parameter names only)",
        )
    root = re.split(r"[\[.]", part, maxsplit=1)[0]
    words = [w for w in re.findall(r"[A-Za-z_]\w*", part[len(root) :]) if not keyword.iskeyword(w)]
    own = words[-1] if words else f"{root}_part"
    return Fix(
        f"static_argnames=('{own}',)",
        f"`{part}` is one entry of the argument `{root}`, and jit makes whole arguments static, never one "
        f"entry of one: pass it as an argument of its own (`{own}`) and make that static - one compilation "
        "per value",
        NEW_PARAMETER,
    )


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
