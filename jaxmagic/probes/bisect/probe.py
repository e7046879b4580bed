"""Bisection probe: is a wrong number the compiler's fault, the algorithm's, or float32's?

Usage without IPython::

    report = jaxmagic.probes.bisect(closure_version, X, ref=ref64)
    report.verdict          # "compilation", "algorithm", "precision", "before_program", "ok", "jit_differs", ...
    report.before_program   # when jit and eager disagree: stage, checked, line, fix
    report.jit.max_abs_error, report.eager.max_abs_error
    report.captured         # arrays the jitted function closes over (the chapter's section 1.4 trap)

Chapter section 1.4: when a result looks wrong without any error, compute the
same function three times - jitted, op by op under ``jax.disable_jit()``, and
in float64 - and compare:

* jit wrong, eager right: the compilation layer (fusion, constant folding, a
  backend bug) - look at the program with ``%jax_hlo``;
* both wrong: the algorithm or the data;
* both close to the reference but not equal: float32 precision.

The reference is ``ref`` when given (a value, e.g. a NumPy float64 result).
Otherwise the probe makes one when it can do so soundly: the same function,
op by op, with every floating-point input upcast to float64 under
``jax.enable_x64`` - and only if tracing it that way shows every
floating-point value of the computation in float64 (no cast back to float32)
and no random numbers (whose bits depend on the dtype). If not, the report
says why and compares jit with eager only.

Before a jit/eager difference is called the compiler's, the probe checks
what each run *receives* (``bisect/pytree_boundary.py``; verdict
``"before_program"``, details in ``report.before_program``), in this order:

* the eager call run again: if it does not repeat its numbers, Python code in
  the body (``np.random``, ``time.time()``, a counter) makes new values at each
  call, and under jit it ran once, at trace time;
* the arguments flattened and rebuilt as jit does (a dict by sorted keys, a
  custom node by its unflatten), each reordered dict alone too: if eager then
  gives jit's numbers, the function depends on the order; the line is the first
  operation whose operands change with the order (two traces compared by their
  ``source_info``) and the line iterating the dict (the function's source);
* Python numbers and NumPy arrays converted to JAX arrays as jit converts them;
* a new trace (jit of a new function object): if it gives eager's numbers, the
  program jit ran was traced when a global, a closed-over value or a static
  argument was different.

Each says ``checked: ...`` with its outcome; a check that does not explain the
difference says so and the verdict stays.

The function is called three times (jit, eager, reference); when jit and eager
disagree, up to about eight times more for the checks above. The report holds
the errors and shapes, not the results.
"""

from __future__ import annotations

import dataclasses
import math
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from jaxmagic._jax import compat, jittable
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.probes._support.report_base import Report
from jaxmagic.probes.bisect.pytree_boundary import (  # noqa: F401 (ReorderedDict: the type of BeforeProgram.dicts)
    BeforeProgram,
    ReorderedDict,
    before_program,
    in_order_of,
    python_function,
)
from jaxmagic.probes.hlo import captured_constants_of_call
from jaxmagic.report import SourceLine, Status
from jaxmagic.report.document import Document, Facts, Paragraph, Section, SourceLines, Table
from jaxmagic.report.provenance import provenance_blocks
from jaxmagic.report.source import user_lines
from jaxmagic.report.wording import error_line, format_bytes

DEFAULT_RTOL = {"float64": 1e-10, "float32": 1e-4, "bfloat16": 2e-2, "float16": 2e-2}
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

VERDICTS = {
    "ok": "jit, eager and the reference agree",
    "precision": "jit and eager are both close to the reference but not equal to it: float32 precision",
    "compilation": "jit wrong, eager right: the compilation layer",
    "algorithm": "jit and eager are both wrong: the algorithm or the data",
    "eager_differs": "eager wrong, jit right",
    "agree": "jit and eager agree (no reference to check them against)",
    "jit_differs": "jit and eager disagree (no reference to say which is right)",
    "before_program": (
        "the difference is made before the compiled program runs (in what the runs receive, or in Python), "
        "not by compilation"
    ),
    "failed": "a run failed",
}
NEXT_STEPS = {
    "ok": "Nothing to bisect: the call gives the reference's numbers within the tolerance.",
    "precision": (
        "Both runs miss the float64 reference by float32 rounding only. If that matters, reorder the "
        "computation (sum small terms first, use log-sum-exp, avoid subtracting close numbers) or compute "
        "the sensitive part in float64 (jax.enable_x64)."
    ),
    "compilation": (
        "The same operations give the right numbers one by one and wrong numbers compiled: look at the "
        "compiled program (%jax_hlo on the same call: constants, fusions), at constants captured by "
        "closure (pass arrays as arguments) and at XLA flags; then shrink the function while the "
        "difference stays."
    ),
    "algorithm": (
        "Compilation is not the cause: the eager run is as wrong. Check the formula and the data "
        "against the reference step by step (print intermediate values with %%jax_print)."
    ),
    "eager_differs": (
        "Unusual: the op-by-op run is the one that is off. Compare intermediate values op by op "
        "(reduction order and precision of eager ops can differ from the fused program's)."
    ),
    "agree": (
        "Give a reference (--ref a float64 NumPy result) to tell float32 precision from an algorithm "
        "error; jaxmagic could not build a float64 run itself (see why above)."
    ),
    "jit_differs": (
        "The compiled and the op-by-op run disagree: one of them is wrong, most often the compiled one. "
        "Give a float64 reference (--ref) to be sure, then look at the program with %jax_hlo."
    ),
    "before_program": (
        "Compilation is not the cause: the jitted function is handed something else than the eager one, or "
        "its Python code ran at another time (see 'Before the program runs'). Change the line named there; "
        "then run %jax_bisect again."
    ),
    "failed": "See the error of the run that failed.",
}
CAPTURED_TRAP = (
    "The jitted function closes over arrays, which become constants of the compiled program. On the chapter's "
    "platform (jaxlib 0.12.0.1, macOS on Apple Silicon, CPU) the pattern `W @ x` then a sum with a captured `W` "
    "was miscompiled silently: jit wrong, eager right. Pass arrays as arguments instead; it also keeps them out "
    "of the jit cache."
)


@dataclasses.dataclass
class RunResult:
    """One way of running the call: its worst error against the reference (or against eager)."""

    name: str  # "jit", "eager", "reference"
    how: str  # how it was run, in words
    ok: bool = True
    error: str = ""  # "ValueError: ..." when the run failed
    error_line: SourceLine | None = None
    max_abs_error: float | None = None  # worst |run - reference| over all leaves (None: not compared)
    max_rel_error: float | None = None  # that error relative to max |reference| of its leaf
    worst_leaf: str = ""  # key path of the leaf with the largest relative error
    equal: bool = False  # bit-for-bit equal to the reference after conversion to float64
    leaves: list[str] = dataclasses.field(default_factory=list)  # "(50,) float32" per output leaf


@dataclasses.dataclass
class CapturedArray:
    name: str
    shape: tuple
    dtype: str
    nbytes: int
    line: SourceLine | None = None


@dataclasses.dataclass
class BisectReport(Report):
    """What ``%jax_bisect`` found."""

    kind = "jax_bisect"

    call: str = ""
    rtol: float = 0.0
    reference_kind: str = ""  # "given", "float64", "none"
    reference_note: str = ""  # why there is no automatic reference, or how it was made
    jit: RunResult | None = None
    eager: RunResult | None = None
    reference: RunResult | None = None
    jit_vs_eager: float | None = None  # max relative difference between the two runs
    verdict: str = ""  # a key of VERDICTS
    captured: list[CapturedArray] = dataclasses.field(default_factory=list)
    # when jit and eager disagree: whether what the runs receive already differs (dict order, dtypes, trace time)
    before_program: BeforeProgram | None = None

    @property
    def status(self) -> Status:
        if self.verdict == "failed":
            return Status.ERROR
        return Status.OK if self.verdict in ("ok", "agree", "precision") else Status.PROBLEM

    @property
    def verdict_text(self) -> str:
        return VERDICTS.get(self.verdict, self.verdict)

    @property
    def next_step(self) -> str:
        return NEXT_STEPS.get(self.verdict, "")

    @property
    def summary(self) -> str:
        if self.verdict == "failed":
            failed = next(r for r in (self.jit, self.eager, self.reference) if r is not None and not r.ok)
            return f"The {failed.name} run of `{self.call}` failed: {failed.error}"
        text = f"`{self.call}`: {self.verdict_text}"
        if self.reference_kind != "none" and self.jit and self.eager:
            text += (
                f" (max relative error: jit {_number(self.jit.max_rel_error)}, "
                f"eager {_number(self.eager.max_rel_error)}; tolerance {_number(self.rtol)})"
            )
        elif self.jit_vs_eager is not None:
            text += f" (max relative difference {_number(self.jit_vs_eager)}; {self.reference_note})"
        text += "."
        before = self.before_program
        if self.verdict == "before_program" and before is not None:
            text += f" The difference is already in {before.stage_text}"
            if before.line is not None:
                text += f": `{before.line.code}` ({before.line.where})"
            text += "."
        elif before is not None and before.stage == "none":
            text += " What the runs receive was checked (dict order, dtypes, a new trace) and does not explain it."
        if self.verdict == "compilation":
            text += " Look at the program with %jax_hlo."
        if self.captured:
            names = ", ".join(f"`{c.name}`" for c in self.captured[:3])
            text += f" The jitted function captures {names} by closure (the section 1.4 trap)."
        return text

    def document(self):

        sections = []
        rows = []
        for run in (self.jit, self.eager, self.reference):
            if run is None:
                continue
            if not run.ok:
                rows.append([run.name, run.how, "failed", "-", "-", run.error])
                continue
            if run.name == "reference":
                rows.append([run.name, run.how, "-", "-", "-", ", ".join(run.leaves[:3])])
                continue
            compared = self.reference_kind != "none"
            rows.append(
                [
                    run.name,
                    run.how,
                    _number(run.max_abs_error) if compared else "-",
                    _number(run.max_rel_error) if compared else "-",
                    ("equal" if run.equal else ("close" if run.max_rel_error <= self.rtol else "WRONG"))
                    if compared and run.max_rel_error is not None
                    else "-",
                    (f"worst leaf {run.worst_leaf}" if run.worst_leaf else "") or ", ".join(run.leaves[:3]),
                ]
            )
        sections.append(
            Section(
                "Three runs",
                [
                    Table(["run", "how", "max abs error", "max rel error", "vs reference", "notes"], rows),
                    Facts(
                        [
                            (
                                "tolerance",
                                f"relative {_number(self.rtol)} (of the largest reference value of each leaf)",
                            ),
                            ("reference", self.reference_note or self.reference_kind),
                        ]
                        + (
                            [("jit vs eager", f"max relative difference {_number(self.jit_vs_eager)}")]
                            if self.jit_vs_eager is not None
                            else []
                        )
                    ),
                ],
            )
        )
        sections.append(Section("Verdict", [Facts([("verdict", self.verdict_text)]), Paragraph(self.next_step)]))
        before = self.before_program
        if before is not None:
            blocks: list = [
                Facts([("stage", before.stage_text), ("explains the difference", "yes" if before.explains else "no")]),
                Paragraph(before.checked),
            ]
            if before.explains and before.provenance is not None:
                blocks += provenance_blocks(before.provenance, "the difference")
                if before.line_how:
                    blocks.append(Paragraph(f"Why this line: {before.line_how}."))
            if before.dicts:
                blocks.append(
                    Table(
                        ["dict", "keys as given", "keys as jit gives them"],
                        [[f"`{d.path}`", ", ".join(d.given_order), ", ".join(d.jit_order)] for d in before.dicts],
                    )
                )
            if before.explains and before.fix:
                blocks.append(Paragraph(f"Fix: {before.fix}"))
            sections.append(Section("Before the program runs", blocks))
        if self.captured:
            rows = [
                [f"`{c.name}`", str(tuple(c.shape)), c.dtype, format_bytes(c.nbytes), c.line.where if c.line else "-"]
                for c in self.captured
            ]
            sections.append(
                Section(
                    "Arrays captured by closure",
                    [Table(["name", "shape", "dtype", "size", "first used at"], rows), Paragraph(CAPTURED_TRAP)],
                )
            )
        failed_lines = [r.error_line for r in (self.jit, self.eager, self.reference) if r and r.error_line]
        if failed_lines:
            sections.append(Section("Where a run failed", [SourceLines(failed_lines)]))
        return Document("%jax_bisect", self.status, self.summary, sections)


def _number(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0:
        return "0"
    if math.isnan(x) or math.isinf(x):
        return str(x)
    return f"{x:.3g}"


# -- the probe ------------------------------------------------------------------


def _is_static(value: Any) -> bool:
    """An argument jit cannot trace (a string, a function, None, ...): passed as a static argument."""
    import jax

    if isinstance(value, (bool, int, float, complex, np.ndarray, np.generic, jax.Array)):
        return False
    leaves = jax.tree.leaves(value)
    return not leaves or not all(
        isinstance(leaf, (bool, int, float, complex, np.ndarray, np.generic, jax.Array)) for leaf in leaves
    )


def _jitted(fn: Callable, args: tuple, kwargs: dict) -> tuple[Callable, str]:

    if compat.is_jitted(fn):
        return fn, "the jitted function as given"
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
_jit_options: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _jit_again(fn: Callable, static: tuple, static_names: tuple) -> Callable:
    """``jax.jit(fn, static_argnums=..., static_argnames=...)``, with the jit options of the last run of ``fn``."""
    key = (static, static_names)
    try:
        known = _jit_options.setdefault(fn, {})
    except TypeError:  # not weakly referenceable (np.sum): jittable wraps it anew each time
        return jittable.jit(fn, static_argnums=static, static_argnames=static_names)
    info = known.get(key)
    if info is not None:
        jitted = compat.compiled_call(fn, info)
        if jitted is not None:
            return jitted
    jitted = jittable.jit(fn, static_argnums=static, static_argnames=static_names)
    info = compat.jit_options(jitted)
    if info is not None and len(known) < 8:
        known[key] = info
    return jitted


def _leaves(tree) -> list[tuple[str, Any]]:
    import jax

    return [(jax.tree_util.keystr(path) or "result", leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(tree)]


def _as64(leaf) -> np.ndarray:
    import jax

    if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        leaf = jax.random.key_data(leaf)
    array = np.asarray(leaf)
    return array.astype(np.complex128 if np.iscomplexobj(array) else np.float64)


def _leaves64(tree) -> list[tuple[str, np.ndarray]]:
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


def _describe(result) -> list[str]:
    return [f"{tuple(np.shape(leaf))} {getattr(leaf, 'dtype', type(leaf).__name__)}" for _, leaf in _leaves(result)]


def _run(run: RunResult, thunk: Callable[[], Any], failed: dict[str, Exception]):
    import jax

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


def _upcast(value):
    import jax
    import jax.numpy as jnp

    def leaf(x):
        if isinstance(x, float):
            return x
        if isinstance(x, (jax.Array, np.ndarray, np.generic)) and jnp.issubdtype(x.dtype, jnp.floating):
            return jnp.asarray(np.asarray(x, dtype=np.float64))
        if isinstance(x, (jax.Array, np.ndarray, np.generic)) and jnp.issubdtype(x.dtype, jnp.complexfloating):
            return jnp.asarray(np.asarray(x, dtype=np.complex128))
        return x

    # jax.tree.map rebuilds dicts in sorted key order: keep the order the call gave (the eager run's)
    return in_order_of(value, jax.tree.map(leaf, value))


def _float64_blockers(fn: Callable, args: tuple, kwargs: dict) -> str:
    """Why a float64 run of ``fn`` would not be a sound reference ("" when it would be)."""
    import jax

    dynamic = [i for i, a in enumerate(args) if not _is_static(a)]
    dynamic_kw = {k: v for k, v in kwargs.items() if not _is_static(v)}

    def with_statics(dyn, dyn_kw):
        full = list(args)
        for i, value in zip(dynamic, dyn):
            full[i] = value
        return fn(*full, **{**kwargs, **dyn_kw})

    try:
        closed = jax.make_jaxpr(with_statics)([args[i] for i in dynamic], dynamic_kw)
    except Exception as error:
        return f"tracing it in float64 failed ({type(error).__name__})"
    narrow, randoms = set(), set()

    def walk(jaxpr):
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


def _captured(jitted: Callable, fn: Callable, args: tuple, kwargs: dict, namespace: dict | None) -> list[CapturedArray]:
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
    fn: Callable,
    *args: Any,
    ref: Any = None,
    rtol: float | None = None,
    call_text: str = "",
    namespace: dict | None = None,
    **kwargs: Any,
) -> BisectReport:
    """``bisect_of_call(fn, args, kwargs, ...)`` for people: the call's own keywords may not be
    named like this function's options here (use :func:`bisect_of_call` then)."""
    return bisect_of_call(fn, args, kwargs, ref=ref, rtol=rtol, call_text=call_text, namespace=namespace)


def bisect_of_call(fn: Callable, args: tuple | list = (), kwargs: dict | None = None, **options: Any) -> BisectReport:
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
    fn: Callable,
    args: tuple | list = (),
    kwargs: dict | None = None,
    *,
    ref: Any = None,
    rtol: float | None = None,
    call_text: str = "",
    namespace: dict | None = None,
) -> tuple[BisectReport, Exception | None]:
    """Like :func:`bisect_of_call`, also returning the exception of the call as written (None if it ran).

    That is the jit run's exception when ``fn`` is jitted, else the op-by-op
    run's: the error the user's own ``fn(*args, **kwargs)`` would raise. A run
    that fails only in the other way (a tracer error under jit of a plain
    function) is a finding of the report, not the user's error.
    """
    import jax

    args, kwargs = tuple(args), dict(kwargs or {})
    if ref is not None:
        _check_reference(ref)
    failed: dict[str, Exception] = {}
    report = BisectReport(call=call_text or f"{getattr(fn, '__name__', 'f')}(...)")
    jitted, how = _jitted(fn, args, kwargs)
    with preserved_jax_state(("jax_enable_x64", "jax_disable_jit")):
        report.jit = RunResult("jit", how)
        jit_result = _run(report.jit, lambda: jitted(*args, **kwargs), failed)
        report.eager = RunResult("eager", "op by op under jax.disable_jit()")

        def eager():
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

                    def reference_run():
                        with jax.disable_jit():
                            return fn(*up_args, **up_kwargs)

                    reference = _run(report.reference, reference_run, failed)
                del up_args, up_kwargs
        sample = jit_result if jit_result is not None else eager_result
        dtypes = [str(getattr(leaf, "dtype", "float32")) for _, leaf in _leaves(sample)] if sample is not None else []
        report.rtol = rtol if rtol is not None else max((DEFAULT_RTOL.get(d, 1e-4) for d in dtypes), default=1e-4)
        _judge(report, jit_result, eager_result, reference)
        if report.verdict != "failed" and (report.jit_vs_eager or 0.0) > report.rtol:
            report.before_program = _before_program(report, fn, jitted, args, kwargs, jit_result, eager_result)
            if report.before_program.explains:
                report.verdict = "before_program"
        del jit_result, eager_result, reference, sample
    report.captured = _captured(jitted, fn, args, kwargs, namespace)
    return report, failed.get("jit" if compat.is_jitted(fn) else "eager")


def _before_program(report, fn, jitted, args, kwargs, jit_result, eager_result) -> BeforeProgram:
    """Is the jit/eager difference already in what the runs receive? Re-runs the eager call (see
    ``pytree_boundary.before_program``); never raises."""
    import jax

    def run_eager(new_args, new_kwargs):
        with jax.disable_jit():
            result = fn(*new_args, **new_kwargs)
        jax.block_until_ready(result)
        return result

    def run_jit():
        result = jitted(*args, **kwargs)
        jax.block_until_ready(result)
        return result

    def fresh_jit():
        inner = python_function(fn)

        def fresh(*fresh_args, **fresh_kwargs):  # a new function object: nothing of JAX's caches fits it
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

    def distance(a, b) -> float:
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
            run_jit=run_jit,
            eager_result=eager_result,
            jit_result=jit_result,
            distance=distance,
            rtol=report.rtol,
            fresh_jit=fresh_jit,
        )
    except Exception as error:  # a check of ours must not hide the runs' verdict
        return BeforeProgram(checked=f"could not check what the runs receive, because {error_line(error)}")


def _check_reference(ref) -> None:
    """ProbeArgumentError unless ``ref`` is numbers: an array, a scalar or a pytree of them."""
    import jax

    leaves = jax.tree.leaves(ref)
    numeric = (bool, int, float, complex, np.ndarray, np.generic, jax.Array)
    wrong = next((leaf for leaf in leaves if not isinstance(leaf, numeric)), None)
    if not leaves or wrong is not None:
        kind = type(wrong if wrong is not None else ref).__name__
        raise ProbeArgumentError("ref", f"takes the expected result (an array or a pytree of arrays), got a {kind}")
    for leaf in leaves:
        if isinstance(leaf, (np.ndarray, np.generic)) and leaf.dtype.kind not in "biufc":
            raise ProbeArgumentError("ref", f"takes numbers, got an array of {leaf.dtype}")


def _judge(report: BisectReport, jit_result, eager_result, reference) -> None:
    runs = [r for r in (report.jit, report.eager, report.reference) if r is not None]
    if any(not r.ok for r in runs):
        report.verdict = "failed"
        return
    jit_leaves, eager_leaves = _leaves64(jit_result), _leaves64(eager_result)
    if reference is not None:
        ref_leaves = _leaves64(reference)
        for run, leaves in ((report.jit, jit_leaves), (report.eager, eager_leaves)):
            try:
                _compare(run, leaves, ref_leaves)
            except ValueError as problem:
                run.ok, run.error = False, f"does not match the reference: {problem}"
                report.verdict = "failed"
                return
    probe = RunResult("jit", "")
    try:
        _compare(probe, jit_leaves, eager_leaves, symmetric=True)
        report.jit_vs_eager = probe.max_rel_error
    except ValueError:
        report.jit_vs_eager = math.inf
    if reference is None:
        report.verdict = "agree" if report.jit_vs_eager <= report.rtol else "jit_differs"
        return
    jit_ok = report.jit.max_rel_error <= report.rtol
    eager_ok = report.eager.max_rel_error <= report.rtol
    if jit_ok and eager_ok:
        report.verdict = (
            "ok"
            if (report.jit.max_rel_error == 0 or report.jit.equal)
            and (report.eager.max_rel_error == 0 or report.eager.equal)
            else "precision"
        )
    elif eager_ok:
        report.verdict = "compilation"
    elif jit_ok:
        report.verdict = "eager_differs"
    else:
        report.verdict = "algorithm"
