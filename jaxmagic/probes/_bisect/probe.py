"""The bisection probe itself: the call run jitted, op by op and as a reference, and compared."""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import jax
import jax.numpy as jnp

if TYPE_CHECKING:
    from jax.stages import Wrapped

import numpy as np

from jaxmagic._jax import jit_internals, jittable
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic._jax.types import ClosedJaxpr, Jaxpr
from jaxmagic.probes._bisect.before_program import before_program
from jaxmagic.probes._bisect.bisected_call import python_function
from jaxmagic.probes._bisect.matmul_precision import (
    has_matrix_products,
    reduced_precision_platform,
    retry_at_full_precision,
)
from jaxmagic.probes._bisect.pytree_boundary import in_order_of
from jaxmagic.probes._bisect.report import BeforeProgram, BisectReport, CapturedArray, PrecisionRetry, RunResult
from jaxmagic.probes._hlo import captured_constants_of_call
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.probes._support.calls.library_wrappers import (
    copies_of_arrays,
    donates_arrays,
    is_library_jit,
    jitted_program,
    library_tracing,
)
from jaxmagic.report.wording import error_line
from jaxmagic.usercode.source import user_lines

DEFAULT_RTOL = {"float64": 1e-10, "float32": 1e-4, "bfloat16": 2e-2, "float16": 2e-2}
OFF_REFERENCE = ("algorithm", "compilation", "eager_differs")  # verdicts of a run off the reference
RANDOM_PRIMITIVES = (
    "random_bits",
    "random_wrap",
    "random_seed",
    "threefry2x32",
    "random_fold_in",
    "random_split",
    "rng_bit_generator",
    "rng_uniform",
)


def _is_static(value: Any) -> bool:
    """An argument jit cannot trace (a string, a function, None, ...): passed as a static argument."""
    if isinstance(value, (bool, int, float, complex, np.ndarray, np.generic, jax.Array)):
        return False
    leaves = jax.tree.leaves(value)
    return not leaves or not all(
        isinstance(leaf, (bool, int, float, complex, np.ndarray, np.generic, jax.Array)) for leaf in leaves
    )


def _jitted(fn: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]) -> tuple[Wrapped, str]:
    if jit_internals.is_jitted(fn):
        return fn, "the jitted function as given"
    if is_library_jit(fn):
        # a library's jit (eqx.filter_jit): it jits itself, as the user calls it. jax.jit around it would
        # pass a module holding functions as a static argument, and fail to hash it.
        return cast("Wrapped", fn), "the jitted function as given (a library's jit)"
    static = tuple(i for i, a in enumerate(args) if _is_static(a))
    static_names = tuple(k for k, v in kwargs.items() if _is_static(v))
    how = "jax.jit(f)"
    if static or static_names:
        how += f" with static arguments {', '.join([str(i) for i in static] + list(static_names))}"
    try:
        return _jit_again(fn, static, static_names), how
    except (TypeError, ValueError):  # the call does not fit the signature: let the run raise what a call would
        return jittable.jit(fn), "jax.jit(f)"


# fn -> {(static argnums, static argnames): its jit options (PjitInfo)}. A new jax.jit(fn) per run is
# served by JAX's C++ cache, but its trace - read for the captured arrays - is keyed by the jit
# options' identity and would be made again at every run (~0.3 ms). The options hold nothing fn does
# not hold itself (its signature), and the entry goes when fn does.
_jit_options: weakref.WeakKeyDictionary[Callable[..., object], dict[tuple[tuple[int, ...], tuple[str, ...]], Any]] = (
    weakref.WeakKeyDictionary()
)


def _jit_again(fn: Callable[..., object], static: tuple[int, ...], static_names: tuple[str, ...]) -> Wrapped:
    """``jax.jit(fn, static_argnums=..., static_argnames=...)``, with the jit options of the last run of ``fn``."""
    key = (static, static_names)
    try:
        known = _jit_options.setdefault(fn, {})
    except TypeError:  # not weakly referenceable (np.sum): jittable wraps it anew each time
        return jittable.jit(fn, static_argnums=static, static_argnames=static_names)
    info = known.get(key)
    if info is not None:
        jitted = jit_internals.compiled_call(fn, info)
        if jitted is not None:
            return jitted
    jitted = jittable.jit(fn, static_argnums=static, static_argnames=static_names)
    info = jit_internals.jit_options(jitted)
    if info is not None and len(known) < 8:
        known[key] = info
    return jitted


_Tree = TypeVar("_Tree")


def _leaves(tree: object) -> list[tuple[str, Any]]:
    return [(jax.tree_util.keystr(path) or "result", leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(tree)]


def _as64(leaf: object) -> np.ndarray:
    if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        leaf = jax.random.key_data(leaf)
    array = np.asarray(leaf)
    return array.astype(np.complex128 if np.iscomplexobj(array) else np.float64)


def _leaves64(tree: object) -> list[tuple[str, np.ndarray]]:
    """(path, float64 or complex128 NumPy copy) of each leaf: converted once per result, then compared."""
    return [(path, _as64(leaf)) for path, leaf in _leaves(tree)]


def _compare(
    run: RunResult,
    leaves: list[tuple[str, np.ndarray]],
    reference: list[tuple[str, np.ndarray]],
    symmetric: bool = False,
) -> None:
    """Fill ``run``'s errors (its result's ``_leaves64``) against ``reference``: relative to the largest
    reference value of each leaf (``symmetric``: to the larger of both, for two runs of which neither
    is known to be right)."""
    if len(leaves) != len(reference):
        raise ValueError(f"the {run.name} result has {len(leaves)} leaves, the reference {len(reference)}")
    worst_abs, worst_rel, worst_leaf, equal = 0.0, 0.0, "", True
    for (path, value), (_, ref) in zip(leaves, reference):
        if value.shape != ref.shape:
            raise ValueError(f"leaf {path}: the {run.name} result has shape {value.shape}, the reference {ref.shape}")
        diff = np.abs(value - ref)
        both_nan = np.isnan(value) & np.isnan(ref)
        diff = np.where(both_nan, 0.0, diff)
        diff = np.where(np.isnan(diff), np.inf, diff)
        abs_error = float(diff.max()) if diff.size else 0.0
        scale = float(np.nanmax(np.abs(ref))) if ref.size and not np.all(np.isnan(ref)) else 0.0
        if symmetric and value.size and not np.all(np.isnan(value)):
            scale = max(scale, float(np.nanmax(np.abs(value))))
        rel_error = abs_error / scale if scale > 0 else (0.0 if abs_error == 0 else math.inf)
        equal = equal and bool(np.array_equal(value, ref, equal_nan=True))
        if rel_error >= worst_rel:
            worst_rel, worst_leaf = rel_error, path
        worst_abs = max(worst_abs, abs_error)
    run.max_abs_error, run.max_rel_error, run.equal = worst_abs, worst_rel, equal
    run.worst_leaf = worst_leaf if len(leaves) > 1 else ""


def _describe(result: object) -> list[str]:
    return [f"{tuple(np.shape(leaf))} {getattr(leaf, 'dtype', type(leaf).__name__)}" for _, leaf in _leaves(result)]


def _run(run: RunResult, thunk: Callable[[], object], failed: dict[str, Exception]) -> object:
    try:
        result = thunk()
        jax.block_until_ready(result)
    except Exception as error:  # the call's own failure is a finding, not ours; kept for the magic to raise
        failed[run.name] = error
        run.ok = False
        run.error = error_line(error)
        lines = user_lines(error.__traceback__)
        run.error_line = lines[-1] if lines else None
        return None
    run.leaves = _describe(result)
    return result


def _upcast(value: _Tree) -> _Tree:
    def leaf(x: object) -> object:
        if isinstance(x, float):
            return x
        if isinstance(x, (jax.Array, np.ndarray, np.generic)) and jnp.issubdtype(x.dtype, jnp.floating):
            return jnp.asarray(np.asarray(x, dtype=np.float64))
        if isinstance(x, (jax.Array, np.ndarray, np.generic)) and jnp.issubdtype(x.dtype, jnp.complexfloating):
            return jnp.asarray(np.asarray(x, dtype=np.complex128))
        return x

    # jax.tree.map rebuilds dicts in sorted key order: keep the order the call gave (the eager run's)
    return in_order_of(value, jax.tree.map(leaf, value))


def _float64_blockers(fn: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]) -> str:
    """Why a float64 run of ``fn`` would not be a sound reference ("" when it would be)."""
    dynamic = [i for i, a in enumerate(args) if not _is_static(a)]
    dynamic_kw = {k: v for k, v in kwargs.items() if not _is_static(v)}

    def with_statics(dyn: Sequence[object], dyn_kw: dict[str, object]) -> object:
        full = list(args)
        for i, value in zip(dynamic, dyn):
            full[i] = value
        return fn(*full, **{**kwargs, **dyn_kw})

    try:
        closed = jax.make_jaxpr(with_statics)([args[i] for i in dynamic], dynamic_kw)
    except Exception as error:
        return f"tracing it in float64 failed ({type(error).__name__})"
    narrow, randoms = set(), set()

    def walk(jaxpr: Jaxpr) -> None:
        for eqn in jaxpr.eqns:
            if eqn.primitive.name in RANDOM_PRIMITIVES:
                randoms.add(eqn.primitive.name)
            for var in eqn.outvars:
                dtype = getattr(getattr(var, "aval", None), "dtype", None)
                if dtype is not None and jax.numpy.issubdtype(dtype, jax.numpy.floating) and dtype.itemsize < 8:
                    narrow.add(str(dtype))
            for value in eqn.params.values():
                for sub in value if isinstance(value, (list, tuple)) else [value]:
                    inner = getattr(sub, "jaxpr", None)
                    if inner is not None and hasattr(inner, "eqns"):
                        walk(inner)
                    elif hasattr(sub, "eqns"):
                        walk(sub)

    walk(closed.jaxpr)
    if randoms:
        return f"it draws random numbers ({', '.join(sorted(randoms))}), whose values depend on the dtype"
    if narrow:
        return f"it computes in {', '.join(sorted(narrow))} even with float64 inputs (an explicit cast)"
    return ""


def _captured(
    jitted: Wrapped,
    fn: Callable[..., object],
    args: tuple[object, ...],
    kwargs: dict[str, object],
    namespace: dict[str, object] | None,
) -> list[CapturedArray]:
    """The arrays the program holds as constants. ``jitted`` already ran with these arguments, so its
    trace comes from JAX's cache: only the constants are looked at, not a whole %jax_hlo report."""

    try:
        constants = captured_constants_of_call(jitted, args, kwargs, fn=fn, namespace=namespace)
    except Exception:
        return []
    return [
        CapturedArray(c.name or "(an array made inside the function)", tuple(c.shape), c.dtype, c.nbytes, c.line)
        for c in constants
    ]


def bisect(
    fn: Callable[..., object],
    *args: Any,
    ref: Any = None,
    rtol: float | None = None,
    call_text: str = "",
    namespace: dict[str, object] | None = None,
    **kwargs: Any,
) -> BisectReport:
    """``bisect_of_call(fn, args, kwargs, ...)`` for people: the call's own keywords may not be
    named like this function's options here (use :func:`bisect_of_call` then)."""
    return bisect_of_call(fn, args, kwargs, ref=ref, rtol=rtol, call_text=call_text, namespace=namespace)


def bisect_of_call(
    fn: Callable[..., object],
    args: tuple[object, ...] | list[object] = (),
    kwargs: dict[str, object] | None = None,
    **options: Any,
) -> BisectReport:
    """Run ``fn(*args, **kwargs)`` jitted, op by op and as a reference; say which layer is wrong.

    ``options`` are :func:`run_call`'s. ``ref``: the expected result (a pytree
    of arrays, e.g. a NumPy float64 computation); without it a float64
    op-by-op run is the reference when that is sound. ``rtol``: the relative
    tolerance (default by the result's dtype: 1e-4 for float32). ``namespace``
    names captured globals. Never raises for the call's own errors: a failed
    run is reported (use :func:`run_call` to also get the exception).
    """
    return run_call(fn, args, kwargs, **options)[0]


def run_call(
    fn: Callable[..., object],
    args: tuple[object, ...] | list[object] = (),
    kwargs: dict[str, object] | None = None,
    *,
    ref: Any = None,
    rtol: float | None = None,
    call_text: str = "",
    namespace: dict[str, object] | None = None,
) -> tuple[BisectReport, Exception | None]:
    """Like :func:`bisect_of_call`, also returning the exception of the call as written (None if it ran).

    That is the jit run's exception when ``fn`` is jitted, else the op-by-op
    run's: the error the user's own ``fn(*args, **kwargs)`` would raise. A run
    that fails only in the other way (a tracer error under jit of a plain
    function) is a finding of the report, not the user's error.
    """
    args, kwargs = tuple(args), dict(kwargs or {})
    if ref is not None:
        _check_reference(ref)
    failed: dict[str, Exception] = {}
    report = BisectReport(call=call_text or f"{getattr(fn, '__name__', 'f')}(...)")
    jitted, how = _jitted(fn, args, kwargs)
    donates = donates_arrays(jitted, args, kwargs)  # then each jit run gets copies: the user's arrays outlive it
    if donates:
        how += ", on copies of the arrays it donates"
    with preserved_jax_state(("jax_enable_x64", "jax_disable_jit")):
        report.jit = RunResult("jit", how)

        def run_jit() -> object:
            return jitted(*copies_of_arrays(args), **copies_of_arrays(kwargs)) if donates else jitted(*args, **kwargs)

        jit_result = _run(report.jit, run_jit, failed)
        report.eager = RunResult("eager", "op by op under jax.disable_jit()")

        def eager() -> object:
            with jax.disable_jit():
                return fn(*args, **kwargs)

        eager_result = _run(report.eager, eager, failed)
        reference = None
        if ref is not None:
            report.reference_kind = "given"
            report.reference_note = "given (--ref)"
            report.reference = RunResult("reference", "given")
            reference = ref
            report.reference.leaves = _describe(ref)
        else:
            with jax.enable_x64(True):
                up_args, up_kwargs = _upcast(args), _upcast(kwargs)
                blocker = _float64_blockers(fn, up_args, up_kwargs)
                if blocker:
                    report.reference_kind = "none"
                    report.reference_note = f"no float64 reference: {blocker}"
                else:
                    report.reference_kind = "float64"
                    report.reference = RunResult("reference", "float64: op by op, inputs upcast, jax.enable_x64")
                    report.reference_note = (
                        "the same function op by op in float64 (inputs upcast, "
                        "jax.enable_x64); every value of the computation is float64"
                    )

                    def reference_run() -> object:
                        with jax.disable_jit():
                            return fn(*up_args, **up_kwargs)

                    reference = _run(report.reference, reference_run, failed)
                del up_args, up_kwargs
        sample = jit_result if jit_result is not None else eager_result
        dtypes = [str(getattr(leaf, "dtype", "float32")) for _, leaf in _leaves(sample)] if sample is not None else []
        report.rtol = rtol if rtol is not None else max((DEFAULT_RTOL.get(d, 1e-4) for d in dtypes), default=1e-4)
        _judge(report, jit_result, eager_result, reference)
        if report.verdict in OFF_REFERENCE and sample is not None:
            report.matmul_precision = _matmul_precision(report, jitted, args, kwargs, run_jit, eager, sample, reference)
            if report.matmul_precision is not None and report.matmul_precision.explains:
                report.verdict = "matmul_precision"
        if report.verdict not in ("failed", "matmul_precision") and (report.jit_vs_eager or 0.0) > report.rtol:
            report.before_program = _before_program(report, fn, jitted, args, kwargs, run_jit, jit_result, eager_result)
            if report.before_program.explains:
                report.verdict = "before_program"
        del jit_result, eager_result, reference, sample
    report.captured = _captured(jitted, fn, args, kwargs, namespace)
    return report, failed.get("jit" if jit_internals.is_jitted(fn) else "eager")


def _matmul_precision(
    report: BisectReport,
    jitted: Wrapped,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    run_jit: Callable[[], object],
    run_eager: Callable[[], object],
    sample: object,
    reference: object,
) -> PrecisionRetry | None:
    """Where float32 matmuls default to less than float32 (a TPU, a GPU), the runs that were off the
    reference run again at full precision (``matmul_precision.py``); None on a CPU or for a program with no
    matrix product."""
    platform = reduced_precision_platform(sample)
    if not platform or not _multiplies_matrices(jitted, args, kwargs):
        return None
    off = {
        run.name: run.max_rel_error
        for run in (report.jit, report.eager)
        if run is not None and run.max_rel_error is not None and run.max_rel_error > report.rtol
    }
    calls = {"jit": run_jit, "eager": run_eager}
    reference_leaves = _leaves64(reference)

    def error_of(result: object) -> float:
        again = RunResult("again", "")
        _compare(again, _leaves64(result), reference_leaves)
        return again.max_rel_error if again.max_rel_error is not None else math.inf

    return retry_at_full_precision(platform, off, {name: calls[name] for name in off}, error_of, report.rtol)


def _multiplies_matrices(jitted: Wrapped, args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    """Whether the jitted program has a matrix product; True when its trace cannot be had (then the retry
    itself tells). The trace is JAX's cached one of the run: the user's Python does not run again."""
    try:  # a library's jit (eqx.filter_jit) opened: its jax.jit, with the arguments it gave it
        program, given, given_kw = jitted_program(jitted, args, kwargs)
        with library_tracing(program):
            return has_matrix_products(program.trace(*given, **given_kw).jaxpr)
    except Exception:
        return True


def _before_program(
    report: BisectReport,
    fn: Callable[..., Any],
    jitted: Wrapped,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    run_jit: Callable[[], object],
    jit_result: object,
    eager_result: object,
) -> BeforeProgram:
    """Is the jit/eager difference already in what the runs receive? Re-runs the eager call (see
    ``before_program.py``); never raises."""

    def run_eager(new_args: tuple[Any, ...], new_kwargs: dict[str, Any]) -> object:
        with jax.disable_jit():
            result = fn(*new_args, **new_kwargs)
        jax.block_until_ready(result)
        return result

    def run_jit_again() -> object:
        result = run_jit()
        jax.block_until_ready(result)
        return result

    def fresh_jit() -> tuple[object, ClosedJaxpr | None, ClosedJaxpr | None]:
        inner = python_function(fn)

        # a new function object: nothing of JAX's caches fits it
        def fresh(*fresh_args: object, **fresh_kwargs: object) -> object:
            return inner(*fresh_args, **fresh_kwargs)

        static = tuple(i for i, a in enumerate(args) if _is_static(a))
        static_names = tuple(k for k, v in kwargs.items() if _is_static(v))
        again = jittable.jit(fresh, static_argnums=static, static_argnames=static_names)
        result = again(*args, **kwargs)
        jax.block_until_ready(result)
        try:
            programs = again.trace(*args, **kwargs).jaxpr, jitted.trace(*args, **kwargs).jaxpr
        except Exception:
            programs = None, None
        return (result, *programs)

    def distance(a: object, b: object) -> float:
        probe = RunResult("jit", "")
        try:
            _compare(probe, _leaves64(a), _leaves64(b), symmetric=True)
        except ValueError:
            return math.inf
        return probe.max_rel_error if probe.max_rel_error is not None else math.inf

    try:
        return before_program(
            fn,
            args,
            kwargs,
            is_static=_is_static,
            run_eager=run_eager,
            run_jit=run_jit_again,
            eager_result=eager_result,
            jit_result=jit_result,
            distance=distance,
            rtol=report.rtol,
            fresh_jit=fresh_jit,
        )
    except Exception as error:  # a check of ours must not hide the runs' verdict
        return BeforeProgram(checked=f"could not check what the runs receive, because {error_line(error)}")


def _check_reference(ref: object) -> None:
    """ProbeArgumentError unless ``ref`` is numbers: an array, a scalar or a pytree of them."""
    leaves = jax.tree.leaves(ref)
    numeric = (bool, int, float, complex, np.ndarray, np.generic, jax.Array)
    wrong = next((leaf for leaf in leaves if not isinstance(leaf, numeric)), None)
    if not leaves or wrong is not None:
        kind = type(wrong if wrong is not None else ref).__name__
        raise ProbeArgumentError("ref", f"takes the expected result (an array or a pytree of arrays), got a {kind}")
    for leaf in leaves:
        if isinstance(leaf, (np.ndarray, np.generic)) and leaf.dtype.kind not in "biufc":
            raise ProbeArgumentError("ref", f"takes numbers, got an array of {leaf.dtype}")


def _judge(report: BisectReport, jit_result: object, eager_result: object, reference: object) -> None:
    jit, eager = report.jit, report.eager
    assert jit is not None and eager is not None  # run_call runs both before judging
    runs = [r for r in (jit, eager, report.reference) if r is not None]
    if any(not r.ok for r in runs):
        report.verdict = "failed"
        return
    jit_leaves, eager_leaves = _leaves64(jit_result), _leaves64(eager_result)
    if reference is not None:
        ref_leaves = _leaves64(reference)
        for run, leaves in ((jit, jit_leaves), (eager, eager_leaves)):
            try:
                _compare(run, leaves, ref_leaves)
            except ValueError as problem:
                run.ok, run.error = False, f"does not match the reference: {problem}"
                report.verdict = "failed"
                return
    probe = RunResult("jit", "")
    try:
        _compare(probe, jit_leaves, eager_leaves, symmetric=True)
        jit_vs_eager = probe.max_rel_error if probe.max_rel_error is not None else math.inf
    except ValueError:
        jit_vs_eager = math.inf
    report.jit_vs_eager = jit_vs_eager
    if reference is None:
        report.verdict = "agree" if jit_vs_eager <= report.rtol else "jit_differs"
        return
    jit_error, eager_error = jit.max_rel_error, eager.max_rel_error
    assert jit_error is not None and eager_error is not None  # _compare filled them in
    jit_ok = jit_error <= report.rtol
    eager_ok = eager_error <= report.rtol
    if jit_ok and eager_ok:
        report.verdict = "ok" if (jit_error == 0 or jit.equal) and (eager_error == 0 or eager.equal) else "precision"
    elif eager_ok:
        report.verdict = "compilation"
    elif jit_ok:
        report.verdict = "eager_differs"
    else:
        report.verdict = "algorithm"
