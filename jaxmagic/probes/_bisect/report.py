"""The bisection report: the three runs, the verdict and its wording, what the runs receive, ``document()``."""

from __future__ import annotations

import dataclasses
import math

from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, SourceLine, Status, act, failed
from jaxmagic.report.document import Block, Document, Facts, Paragraph, Section, SourceLines, Table
from jaxmagic.report.provenance import Provenance, provenance_blocks
from jaxmagic.report.wording import format_bytes

FULL_PRECISION = 'jax.default_matmul_precision("highest")'  # what ``matmul_precision.py`` runs the off runs under
VERDICTS = {
    "ok": "jit, eager and the reference agree",
    "precision": "jit and eager are both close to the reference but not equal to it: float32 precision",
    "compilation": "jit wrong, eager right: the compilation layer",
    "algorithm": "jit and eager are both wrong: the algorithm or the data",
    "matmul_precision": (
        "off the reference at this backend's default matmul precision only (float32 products in fewer bits); "
        "right at full float32 precision"
    ),
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
    "matmul_precision": (
        f"Ask for full float32 products where these numbers matter: `with {FULL_PRECISION}:` around the "
        "call, `precision=jax.lax.Precision.HIGHEST` on the `jnp.dot`/`jnp.matmul` that needs it, or "
        "`jax.config.update('jax_default_matmul_precision', 'highest')` for the whole program (slower)."
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

STAGES = {
    "pytree_order": "the pytree flattening order of a dict argument (jit iterates its keys sorted)",
    "custom_node": "a custom pytree node, rebuilt by its unflatten function under jit",
    "argument_dtypes": "the arguments' dtypes (jit turns Python numbers and NumPy arrays into JAX arrays)",
    "trace_time_python": "Python code in the function that runs once, when jit traces it",
    "nondeterministic": "the call itself: it gives new numbers at each run, jitted or not",
    "stale_trace": "a Python value read when jit traced the function (a global, a closed-over value, a static "
    "argument), changed since: jit reuses the program traced with the old value",
    "none": "not found before the program: what the runs receive does not explain the difference",
    "not_checked": "could not tell",
}
STAGES_SHORT = {
    "pytree_order": "the order jit gives a dict's keys (sorted)",
    "custom_node": "a custom pytree node, rebuilt under jit",
    "argument_dtypes": "the arguments' dtypes under jit",
    "trace_time_python": "Python code that runs only when jit traces",
    "nondeterministic": "the call itself, which gives new numbers at each run",
    "stale_trace": "a value jit read when it traced the function, changed since",
}


@dataclasses.dataclass
class ReorderedDict:
    """A dict in the arguments whose keys jit iterates in another order than the call gave them."""

    path: str  # "d", "params['encoder']"
    given_order: list[str]
    jit_order: list[str]
    # sorting this dict alone makes eager give jit's numbers (checked when several dicts are reordered)
    explains: bool | None = None


@dataclasses.dataclass
class BeforeProgram:
    """Whether a jit/eager difference is already there in what the runs receive, and where."""

    stage: str = "not_checked"  # a key of STAGES
    explains: bool = False  # True: this stage explains the difference; compilation is not the cause
    checked: str = ""  # "checked: ... -> outcome"
    line: SourceLine | None = None  # the user's line that depends on it (order, draw, counter)
    line_how: str = ""  # how the line was found
    provenance: Provenance | None = None
    fix: str = ""
    dicts: list[ReorderedDict] = dataclasses.field(default_factory=list)
    argument: str = ""  # the argument it concerns ("d", "lr")

    @property
    def stage_text(self) -> str:
        return STAGES.get(self.stage, self.stage)

    @property
    def stage_short(self) -> str:
        """The stage in a few words, for the headline."""
        return STAGES_SHORT.get(self.stage, self.stage_text)


@dataclasses.dataclass
class PrecisionRetry:
    """The off runs run again at full float32 matmul precision, and what they gave."""

    platform: str  # "tpu", "gpu": where the results live
    errors_before: dict[str, float]  # run name -> max relative error at the default precision
    errors_after: dict[str, float] = dataclasses.field(default_factory=dict)  # the same, at "highest"
    explains: bool = False  # every run that was off is within the tolerance at "highest"
    failure: str = ""  # why a run again could not be compared

    @property
    def checked(self) -> str:
        """What was run and what it gave, in one sentence."""
        names = " and ".join(self.errors_before)
        if self.failure:
            return f"Ran {names} again under `{FULL_PRECISION}`: {self.failure}."
        pairs = ", ".join(
            f"{name} {short_number(self.errors_after[name])} (was {short_number(self.errors_before[name])})"
            for name in self.errors_before
            if name in self.errors_after
        )
        return f"Ran {names} again under `{FULL_PRECISION}` (their Python ran again): max relative error {pairs}."


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
    shape: tuple[int, ...]
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
    # on a TPU/GPU, when a run was off the reference: the off runs again at full float32 matmul precision
    matmul_precision: PrecisionRetry | None = None

    def concerns(self) -> list[Concern]:
        if self.verdict == "failed":
            return [failed(self.verdict_text)]
        return [] if self.verdict in ("ok", "agree", "precision") else [act(self.verdict_text)]

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
        measured = ""
        if self.reference_kind != "none" and self.jit and self.eager:
            measured = (
                f" (max relative error: jit {short_number(self.jit.max_rel_error)}, "
                f"eager {short_number(self.eager.max_rel_error)}; tolerance {short_number(self.rtol)})"
            )
        elif self.jit_vs_eager is not None:
            measured = f" (max relative difference {short_number(self.jit_vs_eager)}; {self.reference_note})"
        text = f"`{self.call}`: {self.verdict_text}{measured}."
        before = self.before_program
        if self.verdict == "before_program" and before is not None:
            # said short: the stage in full, its check and its fix are under "Before the program runs"
            text = f"`{self.call}`: jit and eager differ before the compiled program runs, in {before.stage_short}"
            if before.line is not None:
                text += f": `{before.line.code}` ({before.line.where})"
            text += "."
        elif before is not None and before.stage == "none":
            text += " What the runs receive was checked (dict order, dtypes, a new trace) and does not explain it."
        retry = self.matmul_precision
        if retry is not None and not retry.failure:
            errors = ", ".join(f"{name} {short_number(e)}" for name, e in retry.errors_after.items())
            text += f" Run again under `{FULL_PRECISION}` on this {retry.platform.upper()}: {errors}" + (
                " - within the tolerance." if retry.explains else " - still off: not the matmul precision."
            )
        if self.captured:
            names = ", ".join(f"`{c.name}`" for c in self.captured[:3])
            text += f" The jitted function captures {names} by closure (the section 1.4 trap)."
        return text

    def document(self) -> Document:
        fix = self.fix
        sections = [three_runs_section(self)]
        verdict: list[Block] = [Facts([("verdict", self.verdict_text)])]
        if self.next_step and self.next_step != fix:  # the fix is the document's own line
            verdict.append(Paragraph(self.next_step))
        sections.append(Section("Verdict", verdict))
        if self.matmul_precision is not None:
            sections.append(Section("Matmul precision", [Paragraph(self.matmul_precision.checked)]))
        if self.before_program is not None:
            sections.append(before_program_section(self.before_program, fix))
        if self.captured:
            sections.append(captured_section(self.captured))
        failed_lines = [r.error_line for r in (self.jit, self.eager, self.reference) if r and r.error_line]
        if failed_lines:
            sections.append(Section("Where a run failed", [SourceLines(failed_lines)]))
        return Document("%jax_bisect", self.status, self.summary, sections, fix=fix, nothing_to_do=self.unexplained())

    @property
    def fix(self) -> str:
        """What to do after the verdict: the fix of what the runs receive when that explains the difference,
        else the verdict's next step; "" when the runs agree or one failed (its error says what to do)."""
        if self.status is not Status.PROBLEM:
            return ""
        before = self.before_program
        if before is not None and before.explains and before.fix:
            return before.fix
        return self.next_step


def three_runs_section(report: BisectReport) -> Section:
    """ "Three runs": jit, eager and the reference, each with its error against the reference."""
    rows = [_run_row(run, report) for run in (report.jit, report.eager, report.reference) if run is not None]
    facts = [
        ("tolerance", f"relative {short_number(report.rtol)} (of the largest reference value of each leaf)"),
        ("reference", report.reference_note or report.reference_kind),
    ]
    if report.jit_vs_eager is not None:
        facts.append(("jit vs eager", f"max relative difference {short_number(report.jit_vs_eager)}"))
    return Section(
        "Three runs",
        [Table(["run", "how", "max abs error", "max rel error", "vs reference", "notes"], rows), Facts(facts)],
    )


def _run_row(run: RunResult, report: BisectReport) -> list[str]:
    if not run.ok:
        return [run.name, run.how, "failed", "-", "-", run.error]
    if run.name == "reference":
        return [run.name, run.how, "-", "-", "-", ", ".join(run.leaves[:3])]
    compared = report.reference_kind != "none"
    if compared and run.max_rel_error is not None:
        versus = "equal" if run.equal else ("close" if run.max_rel_error <= report.rtol else "WRONG")
    else:
        versus = "-"
    return [
        run.name,
        run.how,
        short_number(run.max_abs_error) if compared else "-",
        short_number(run.max_rel_error) if compared else "-",
        versus,
        (f"worst leaf {run.worst_leaf}" if run.worst_leaf else "") or ", ".join(run.leaves[:3]),
    ]


def before_program_section(before: BeforeProgram, fix: str) -> Section:
    """ "Before the program runs": what the runs receive (dict order, dtypes, a new trace) and whether it
    explains the difference; its fix unless it is ``fix``, the document's own line."""
    blocks: list[Block] = [
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
    if before.explains and before.fix and before.fix != fix:
        blocks.append(Paragraph(f"Fix: {before.fix}"))
    return Section("Before the program runs", blocks)


def captured_section(captured: list[CapturedArray]) -> Section:
    """ "Arrays captured by closure": arrays the jitted function holds as constants (the section 1.4 trap)."""
    rows = [
        [f"`{c.name}`", str(tuple(c.shape)), c.dtype, format_bytes(c.nbytes), c.line.where if c.line else "-"]
        for c in captured
    ]
    return Section(
        "Arrays captured by closure",
        [Table(["name", "shape", "dtype", "size", "first used at"], rows), Paragraph(CAPTURED_TRAP)],
    )


def short_number(x: float | None) -> str:
    """A number in three significant digits ("-" for None)."""
    if x is None:
        return "-"
    if x == 0:
        return "0"
    if math.isnan(x) or math.isinf(x):
        return str(x)
    return f"{x:.3g}"
