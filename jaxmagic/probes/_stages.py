"""Stages probe: where the time of one jitted call goes - trace, lower, compile, first run, steady run.

Usage without IPython::

    report = jaxmagic.probes.stages(deep, ws, x, runs=20)
    report.compile_seconds, report.steady_run_seconds, report.cost["flops"]

The call is taken apart with JAX's ahead-of-time API (``jit(f).trace(...)``,
``.lower()``, ``.compile()``) and each stage is timed on its own; runs are timed
with ``block_until_ready``, because JAX dispatches asynchronously and an
unblocked timing measures only the dispatch (chapter section 5.5). The
compiled program's ``memory_analysis()`` and ``cost_analysis()`` come along.

A function that already ran is in JAX's caches, and timing it again would
measure cache look-ups. So the stages are timed on a fresh copy of the Python
function (same code, globals, closure and jit options): a cold first call, as
the first call of a new process would pay it, with the user's own function and
caches untouched. Arguments may be ``jax.ShapeDtypeStruct``; then nothing runs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import time
import types
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import jax
from jax import monitoring

from jaxmagic._jax import jit_internals, jittable, runtime
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic.probes._support.arguments import ProbeArgumentError
from jaxmagic.probes._support.calls.library_wrappers import (
    donates_arrays,
    is_library_jit,
    jitted_program,
    library_tracing,
)
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, failed
from jaxmagic.report.document import Document, Facts, Paragraph, Section, Table
from jaxmagic.report.wording import error_line, format_bytes, short_dtype

if TYPE_CHECKING:
    from jax.stages import Compiled, Traced, Wrapped

DEFAULT_RUNS = 20

EVENT_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
EVENT_TRACE = "/jax/core/compile/jaxpr_trace_duration"

MEMORY_FIELDS = (
    ("argument_size_in_bytes", "arguments"),
    ("output_size_in_bytes", "outputs"),
    ("alias_size_in_bytes", "outputs aliasing arguments (donation)"),
    ("temp_size_in_bytes", "temporaries"),
    ("generated_code_size_in_bytes", "generated code"),
    ("peak_memory_in_bytes", "peak"),
)
COST_FIELDS = (("flops", "flops"), ("transcendentals", "transcendentals"), ("bytes accessed", "bytes accessed"))


@dataclasses.dataclass
class StagesReport(Report):
    """Times of the stages of one jitted call, and the compiled program's memory and cost figures."""

    kind = "jax_stages"

    call: str = ""
    function: str = ""
    jitted_here: bool = False  # the function was not jitted: jaxmagic applied jax.jit
    fresh_copy: bool = False  # timed on a fresh copy of the function (cold caches)
    trace_seconds: float | None = None
    lower_seconds: float | None = None
    compile_seconds: float | None = None
    xla_compile_seconds: float | None = None  # the backend compile alone, from jax.monitoring
    cached_stages: list[str] = dataclasses.field(default_factory=list)  # stages served from a cache
    first_run_seconds: float | None = None
    steady_run_seconds: float | None = None  # median of `runs`
    steady_run_min_seconds: float | None = None
    runs: int = 0
    abstract_arguments: bool = False  # ShapeDtypeStruct arguments: compiled, not run
    run_withheld: str = ""  # why the compiled program was not run (it would delete donated arrays of the user's)
    argument_types: list[str] = dataclasses.field(default_factory=list)
    output_types: list[str] = dataclasses.field(default_factory=list)
    memory: dict[str, int] = dataclasses.field(default_factory=dict)
    cost: dict[str, float] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)
    failed_stage: str = ""  # "trace", "lower", "compile", "run"
    failure: str = ""  # "TypeError: ..."

    def concerns(self) -> list[Concern]:
        return [failed(self.failure)] if self.failure else []

    @property
    def first_call_seconds(self) -> float | None:
        """What the first call costs: trace + lower + compile + first run."""
        parts = [self.trace_seconds, self.lower_seconds, self.compile_seconds, self.first_run_seconds]
        known = [p for p in parts if p is not None]
        return sum(known) if len(known) == len(parts) else None

    @property
    def runs_to_pay_for_compiling(self) -> float | None:
        """How many steady runs cost as much as tracing, lowering and compiling once."""
        trace, lower, compile_ = self.trace_seconds, self.lower_seconds, self.compile_seconds
        if trace is None or lower is None or compile_ is None or not self.steady_run_seconds:
            return None
        return (trace + lower + compile_) / self.steady_run_seconds

    @property
    def summary(self) -> str:
        if self.failure:
            return f"{self.call}: the {self.failed_stage} stage failed with {self.failure}"
        parts = [
            f"trace {_time(self.trace_seconds)}",
            f"lower {_time(self.lower_seconds)}",
            f"compile {_time(self.compile_seconds)}",
        ]
        text = f"`{self.call}`: " + ", ".join(parts)
        if self.abstract_arguments:
            return text + " (abstract arguments: compiled, not run)."
        if self.run_withheld:
            return text + f" ({self.run_withheld})."
        text += (
            f"; first run {_time(self.first_run_seconds)}, then {_time(self.steady_run_seconds)} per run "
            f"(median of {self.runs})"
        )
        ratio = self.runs_to_pay_for_compiling
        if ratio is not None and ratio >= 2:
            text += f" - compiling costs as much as {ratio:,.0f} runs"
        return text + "."

    def document(self) -> Document:

        sections = []
        if self.trace_seconds is not None:
            first = self.first_call_seconds
            rows = []
            for stage, seconds, what in (
                ("trace", self.trace_seconds, "Python runs once with tracers: the jaxpr"),
                ("lower", self.lower_seconds, "jaxpr -> StableHLO (MLIR)"),
                (
                    "compile",
                    self.compile_seconds,
                    "XLA optimises and builds the executable"
                    + (f" (backend compile {_time(self.xla_compile_seconds)})" if self.xla_compile_seconds else ""),
                ),
                (
                    "first run",
                    self.first_run_seconds,
                    "first execution (one-time set-up of the executable), waiting for the result",
                ),
                (
                    "steady run",
                    self.steady_run_seconds,
                    f"median of {self.runs} blocked runs (fastest {_time(self.steady_run_min_seconds)})"
                    if self.runs
                    else "",
                ),
            ):
                if seconds is None:
                    continue
                share = f"{100 * seconds / first:.0f}%" if first and stage != "steady run" else ""
                rows.append([stage, _time(seconds), share, what])
            sections.append(Section("Stages", [Table(["stage", "time", "of first call", "what happens"], rows)]))
            blocks = []
            ratio = self.runs_to_pay_for_compiling
            if ratio is not None:
                blocks.append(
                    Paragraph(
                        f"Tracing, lowering and compiling once cost as much as {ratio:,.0f} steady runs. That is paid "
                        "again on every recompilation, so if this call is slow in a loop, check with %%jax_compiles "
                        "that it compiles only once."
                    )
                )
            if self.cached_stages:
                blocks.append(
                    Paragraph(f"Served from JAX's caches, not measured cold: {', '.join(self.cached_stages)}.")
                )
            blocks.extend(Paragraph(note) for note in self.notes)
            if blocks:
                sections.append(Section("Reading the numbers", blocks))
        if self.memory:
            pairs = [(label, _bytes(self.memory[key])) for key, label in MEMORY_FIELDS if key in self.memory]
            sections.append(Section("Memory (compiled.memory_analysis())", [Facts(pairs)]))
        if self.cost:
            pairs = [(label, f"{self.cost[key]:,.0f}") for key, label in COST_FIELDS if key in self.cost]
            if self.cost.get("flops") and self.cost.get("bytes accessed"):
                pairs.append(("flops per byte", f"{self.cost['flops'] / self.cost['bytes accessed']:.2f}"))
            sections.append(Section("Cost (compiled.cost_analysis())", [Facts(pairs)]))
        facts = [("call", self.call), ("arguments", _grouped(self.argument_types) or "-")]
        if self.output_types:
            facts.append(("outputs", _grouped(self.output_types)))
        how = "jax.jit applied by jaxmagic" if self.jitted_here else "your jitted function"
        if self.fresh_copy:
            how += ", timed on a fresh copy (cold caches; yours untouched)"
        facts.append(("timed", how))
        sections.append(Section("Call", [Facts(facts)]))
        if self.failure:
            sections.insert(0, Section("Failed", [Paragraph(f"The {self.failed_stage} stage raised {self.failure}")]))
        return Document("%jax_stages", self.status, self.summary, sections, nothing_to_do=self.unexplained())


def _grouped(types: list[str]) -> str:
    """``["f32[3]", "f32[3]", "i32[]"]`` -> ``"f32[3] x2, i32[]"``: repeated neighbours counted."""
    groups: list[list[Any]] = []  # [type, times in a row]: changed in place
    for t in types:
        if groups and groups[-1][0] == t:
            groups[-1][1] += 1
        else:
            groups.append([t, 1])
    return ", ".join(t if n == 1 else f"{t} x{n}" for t, n in groups)


def _time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1:
        return f"{seconds * 1e3:.2f} ms" if seconds < 0.01 else f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def _bytes(n: int) -> str:
    """The size in binary units, with the exact count beside it once it reaches a KiB."""
    return f"{format_bytes(n)} ({n:,} B)" if n >= 1024 else format_bytes(n)


def _short(aval: object) -> str:
    shape = ",".join(str(d) for d in getattr(aval, "shape", ()))
    return f"{short_dtype(str(getattr(aval, 'dtype', '?')))}[{shape}]"


# -- the probe ------------------------------------------------------------------


def stages(
    fn: Callable[..., object], *args: Any, runs: int = DEFAULT_RUNS, call_text: str = "", **kwargs: Any
) -> StagesReport:
    """Trace, lower, compile and run ``fn(*args, **kwargs)``, timing each stage separately.

    ``fn`` may be jitted or not (then it is jitted here). With ``jax.ShapeDtypeStruct``
    arguments only the first three stages run. The result holds no array.
    """
    return stages_of_call(fn, args, kwargs, runs=runs, call_text=call_text)


def stages_of_call(
    fn: Callable[..., object],
    args: tuple[object, ...] | list[object] = (),
    kwargs: dict[str, object] | None = None,
    **options: Any,
) -> StagesReport:
    """``stages`` with the call's arguments given as a sequence and a dict (any keyword names allowed).

    ``options`` are :func:`run_call`'s. Never raises for the call's own
    exception: the report's ``failure`` says what happened (use
    :func:`run_call` to also get the exception).
    """
    return run_call(fn, args, kwargs, **options)[0]


def run_call(
    fn: Callable[..., object],
    args: tuple[object, ...] | list[object] = (),
    kwargs: dict[str, object] | None = None,
    *,
    runs: int = DEFAULT_RUNS,
    call_text: str = "",
) -> tuple[StagesReport, Exception | None]:
    """Like :func:`stages_of_call`, also returning the exception of the stage that failed (None if none).

    The magic shows the report, then raises it.
    """
    if runs < 1:
        raise ProbeArgumentError("runs", f"must be 1 or more, got {runs}")
    args, kwargs = tuple(args), dict(kwargs or {})  # stages_of_call(fn, args) passes kwargs=None
    name = getattr(fn, "__name__", type(fn).__name__)
    report = StagesReport(call=call_text or f"{name}(...)", function=name)
    if is_library_jit(fn):  # nnx.jit, eqx.filter_jit: the jax.jit inside, with the arguments it is given
        try:
            fn, args, kwargs = jitted_program(fn, args, kwargs)
        except Exception as failure:  # the wrapper's own repacking of the arguments failed, as the call would
            report.failed_stage, report.failure = "trace", error_line(failure)
            return report, failure
        report.notes.append(
            f"`{name}` is a library's jit: its own jax.jit was timed, given the arguments the library gives it "
            "(its repacking of yours), not the library's Python around it."
        )
    is_jitted = jit_internals.is_jitted(fn)
    report.jitted_here = not is_jitted
    jitted, static_positions, static_names = _fresh_jitted(fn, is_jitted, report, (args, kwargs))
    report.abstract_arguments = any(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in jax.tree.leaves((args, kwargs)))

    error = None
    with preserved_jax_state(()), _compile_events() as events:
        stage = "trace"
        try:
            start = time.perf_counter()
            with library_tracing(fn):
                traced = jitted.trace(*args, **kwargs)
            report.trace_seconds = time.perf_counter() - start
            stage = "lower"
            start = time.perf_counter()
            lowered = traced.lower()
            report.lower_seconds = time.perf_counter() - start
            stage = "compile"
            events.clear()
            start = time.perf_counter()
            compiled = lowered.compile()
            report.compile_seconds = time.perf_counter() - start
            report.xla_compile_seconds = events.get(EVENT_BACKEND_COMPILE)
            if report.xla_compile_seconds is None:
                report.cached_stages.append("compile (this program was compiled before in this process)")
            _describe(report, traced, compiled)
            del traced, lowered
            if not report.abstract_arguments and not report.run_withheld:
                stage = "run"
                dynamic_args = [a for i, a in enumerate(args) if i not in static_positions]
                dynamic_kwargs = {k: v for k, v in kwargs.items() if k not in static_names}
                _time_runs(report, compiled, dynamic_args, dynamic_kwargs, runs)
        except Exception as failure:  # the user's call failing: reported, and handed back
            report.failed_stage = stage
            report.failure = error_line(failure)
            error = failure
    if report.trace_seconds is not None and events.traced is False:
        report.cached_stages.insert(0, "trace")
    return report, error


def _fresh_jitted(
    fn: Callable[..., Any],
    is_jitted: bool,
    report: StagesReport,
    call: tuple[tuple[object, ...], dict[str, object]],
) -> tuple[Wrapped, tuple[int, ...], tuple[str, ...]]:
    """A jitted fresh copy of the Python function, with the same jit options; else the function as is.

    Returns (jitted callable, static argument positions, static argument names).
    """
    original = getattr(fn, "__wrapped__", None) if is_jitted else fn
    info = jit_internals.jit_options(fn) if is_jitted else None
    static_positions = tuple(getattr(info, "static_argnums", ()) or ())
    static_names = tuple(getattr(info, "static_argnames", ()) or ())
    donates = is_jitted and donates_arrays(
        fn, *call
    )  # eqx.filter_jit's jit names its first argument: empty unless asked
    copy: Any = _copy_function(original)
    plain = info is not None and _plain_jit_options(info)
    if is_jitted and not plain:
        copy = None
    elif copy is None and donates and callable(original):
        copy = original  # a callable object (nnx.jit's function): jitted anew, without donation, as a copy is
    if copy is None and donates:  # its runs would delete the arrays the call donates: the user's
        report.run_withheld = (
            "not run: the function donates arguments and its jit could not be made again without donation, "
            "so running it would delete your arrays"
        )
    if copy is None:
        report.notes.append(
            "The function could not be copied (not a plain Python function, or jit options such "
            "as shardings that are not copied), so its own jit was timed; stages it had done "
            "before come from JAX's caches."
        )
        return (fn if jit_internals.is_jitted(fn) else jittable.jit(fn)), static_positions, static_names
    report.fresh_copy = True
    options: dict[str, Any] = {}
    if info is not None:
        options = {
            "static_argnums": static_positions or None,
            "static_argnames": static_names or None,
            "keep_unused": info.keep_unused,
        }
        if donates:
            report.notes.append(
                "Buffer donation is left off in the timed copy, so repeated runs can reuse your "
                "arrays (with donation the first run would invalidate them)."
            )
    return jax.jit(copy, **options), static_positions, static_names


def _plain_jit_options(info: object) -> bool:
    leaves = (
        *getattr(info, "out_shardings_leaves", ()),
        *getattr(info, "in_layouts_leaves", ()),
        *getattr(info, "out_layouts_leaves", ()),
    )
    return (
        not getattr(info, "user_specified_in_shardings", True)
        and all(leaf is None or type(leaf).__name__ == "UnspecifiedValue" for leaf in leaves)
        and getattr(info, "device", None) is None
        and getattr(info, "backend", None) is None
        and not getattr(info, "compiler_options_kvs", ())
    )


def _copy_function(fn: object) -> types.FunctionType | None:
    if not isinstance(fn, types.FunctionType):
        return None
    copy = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    copy.__qualname__ = fn.__qualname__
    copy.__module__ = fn.__module__
    copy.__doc__ = fn.__doc__
    return copy


def _describe(report: StagesReport, traced: Traced, compiled: Compiled) -> None:
    with contextlib.suppress(Exception):
        report.argument_types = [_short(a) for a in traced.jaxpr.in_avals]
    with contextlib.suppress(Exception):
        report.output_types = [_short(leaf) for leaf in jax.tree.leaves(compiled.out_info)]
    with contextlib.suppress(Exception):
        memory = compiled.memory_analysis()
        for key, _ in MEMORY_FIELDS:
            value = getattr(memory, key, None)
            if isinstance(value, int) and (value or key != "peak_memory_in_bytes"):
                report.memory[key] = value
    with contextlib.suppress(Exception):
        cost = compiled.cost_analysis()
        if isinstance(cost, (list, tuple)):  # older JAX: one dict per program
            cost = cost[0] if cost else {}
        for key, _ in COST_FIELDS:
            if cost and key in cost:  # None: this backend has no cost analysis
                report.cost[key] = float(cost[key])


def _time_runs(
    report: StagesReport, compiled: Compiled, args: Sequence[Any], kwargs: dict[str, object], runs: int
) -> None:
    start = time.perf_counter()
    out = compiled(*args, **kwargs)
    jax.block_until_ready(out)
    report.first_run_seconds = time.perf_counter() - start
    del out
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        out = compiled(*args, **kwargs)
        jax.block_until_ready(out)
        times.append(time.perf_counter() - start)
        del out
    report.runs = runs
    report.steady_run_seconds = statistics.median(times)
    report.steady_run_min_seconds = min(times)


class _Events(dict[str, float]):
    traced: bool | None = None


@contextlib.contextmanager
def _compile_events() -> Iterator[_Events]:
    """The durations of the compile events in the block, by event name (the last one of each)."""
    events = _Events()
    events.traced = False

    def listener(event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event == EVENT_TRACE:
            events.traced = True
        events[event] = duration_secs

    monitoring.register_event_duration_secs_listener(listener)
    try:
        yield events
    finally:
        runtime.unregister_duration_listener(listener)
