"""Fixes fitted to the failing line: which of a kind's standard fixes the line's code can take,
written with the line's own names and expressions.

The explainer's table (``explain.kinds.KINDS``) says what usually fixes a kind of tracer error. The line
that raised says which of those apply: a fix never names an operation the line does not do
(``jnp.nonzero(..., size=k)`` only where the line calls ``nonzero``; no ``jnp.where`` for an
``assert``), and where the line shows what to write, the fix is written from it::

    print("loss", float(loss))          ->  jax.debug.print("loss {}", loss)
    assert jnp.all(x > 0), "negative"   ->  checkify.check(jnp.all(x > 0), "negative")
    np.sin(x) * 2                       ->  jnp.sin(x) * 2         (the twin exists in jax.numpy)
    scipy.special.erfcx(np.asarray(x))  ->  jax.scipy.special.erfcx(jnp.asarray(x))
    x[i:i + k]                          ->  lax.dynamic_slice_in_dim(x, i, k, axis=0)
    activations[i](h)                   ->  lax.switch(i, activations, h)
    for _ in range(n):                  ->  lax.fori_loop(0, n, body, init)
    if x > limit: return limit; return x  ->  jnp.where(x > limit, limit, x)
    print(f"loss {float(loss):.3f}")    ->  jax.debug.print("loss {:.3f}", loss)
    math.exp(-x)                        ->  jnp.exp(-x)

The line's text is read, and the statements around an ``if`` for its two branches; for a library
call, the module its function comes from, looked up through module attributes only. A line that
is part of a longer statement is not parsed (a one-line lambda's body is: see
``explain.frames.lambda_body``) and the table's fixes are left as they are. A fix written wholly from
the code (``from_line``) can be tried on the line's values (``trial``); one with a
placeholder (``body_fn``, ``size=k``) is a suggestion.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from jaxmagic.probes._explain.line_fixes.control_flow import fit_bool, fit_int
from jaxmagic.probes._explain.line_fixes.conversions import fit_array, fit_concrete
from jaxmagic.probes._explain.line_fixes.indexing import fit_bool_index, fit_shape, fit_slice
from jaxmagic.probes._support.fixes.fix import Fix
from jaxmagic.probes._support.fixes.line_code import LineCode, Resolve, Traced


def fit(
    kind: str,
    fixes: Sequence[Fix],
    line: LineCode | None,
    traced: Sequence[Traced],
    resolve: Resolve = lambda name: None,
    paths: Sequence[str] = (),
) -> list[Fix]:
    """The fixes of ``kind`` that apply to ``line``, written with its code, best first.

    ``traced`` are the names on the line bound to tracers; ``paths`` the traced leaves of arguments
    that are containers, as JAX names them (``d['num']``: ``d`` itself is a dict, no tracer); ``resolve``
    gives (the object, the name of the module it was found in) for a dotted name on the line (None when
    unknown), to tell a NumPy or SciPy function from another library's.
    """
    if line is None:
        return list(fixes)
    names = {t.name for t in traced} | set(paths)
    fitting = _FITTERS.get(kind)
    return list(fixes) if fitting is None else fitting(list(fixes), line, names, traced, resolve)


Fitter = Callable[[list[Fix], LineCode, set[str], Sequence[Traced], Resolve], list[Fix]]

_FITTERS: dict[str, Fitter] = {
    "bool_index": fit_bool_index,
    "bool": fit_bool,
    "int": fit_int,
    "array": fit_array,
    "concrete": fit_concrete,
    "shape": fit_shape,
    "slice": fit_slice,
}
