"""What the producer search found: the operation that made a NaN/inf (``NanProducer``), its inputs at the first
bad element (``OperandValue``), the loops and branches around it (``LoopPosition``) and the outcome of one search
(``ProducerSearch``). Data only: the search that fills them is ``producer``; the reports, fixes and causes read them.
"""

from __future__ import annotations

import dataclasses

from jaxmagic.probes._nans.fixes import added_epsilon, lost_constant
from jaxmagic.probes._nans.fixes.value_fixes import FixTrial
from jaxmagic.probes._nans.search import integer_overflow
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance


@dataclasses.dataclass
class LoopPosition:
    """One enclosing loop or branch of the producer: ``scan`` iteration 899, ``cond`` branch 1."""

    primitive: str  # "scan", "while" or "cond"
    index: int  # iteration (scan: position in xs, counted from 0 even for reverse=True) or branch
    line: SourceLine | None = None  # the user's line that made the loop

    @property
    def text(self) -> str:
        # counted from 0, as %jax_debug says it: "iteration 2" alone reads as the second (issue 61)
        return (
            f"branch {self.index} of `cond`" if self.primitive == "cond" else f"iteration {self.index} (counted from 0)"
        )


@dataclasses.dataclass
class OperandValue:
    """One input of the producer, at the first bad element."""

    role: str  # "denominator", "operand", "x", ...
    value: str  # "-1.0", or a summary "f32[3] in [-1.0, 2.0]" when no single element applies
    shape: list[int]
    dtype: str
    made_by: str = ""  # primitive that computed it ("reduce_sum"); "" for an input or constant
    constant: bool = False  # written into the program (a literal)
    # the primitives that computed made_by's own inputs ("" for an input or literal): `1 - sigmoid(z)`
    # is made_by "sub", made_from ["", "logistic"]
    made_from: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class NanProducer:
    """The first operation whose inputs were finite and whose output was not."""

    primitive: str  # "log", "div", ...
    value: str  # what it made: "nan" or "inf"
    line: SourceLine | None = None  # the user's line (for a library function: the line that called it)
    # the part of that line that made it, when the line holds more: `jnp.log(1 - p)` of
    # `return -jnp.mean(y * jnp.log(p) + (1 - y) * jnp.log(1 - p))` (from the columns JAX records)
    expression: str = ""
    library_function: str = ""  # "jnp.std" when the operation ran inside a JAX library function
    phase: str = "forward"  # "forward" or "backward"
    derivative: bool = False  # computed by JAX for a gradient (its line is the forward line it differentiates)
    written_inf: SourceLine | None = None  # the user's line that wrote the inf it got (a mask's -inf fill)
    written_inf_by: str = ""  # the library whose own code wrote that inf, in the call on that line (numpyro's)
    # the NaN is a constant written into the program that this operation passed on (`jnp.where(m, x, jnp.nan)`,
    # a library's NaN outside its domain): written, not computed
    written_nan: bool = False
    written_nan_by: str = ""  # the library whose own code wrote that NaN ("" when the user's line did)
    user_rule: bool = False  # written by the user's own custom_vjp / custom_jvp rule (its line is the rule's)
    loops: list[LoopPosition] = dataclasses.field(default_factory=list)  # outermost first
    calls: list[str] = dataclasses.field(default_factory=list)  # jitted functions it sat in, outermost first
    index: list[int] = dataclasses.field(default_factory=list)  # first bad element of its output
    operands: list[OperandValue] = dataclasses.field(default_factory=list)
    output_shape: list[int] = dataclasses.field(default_factory=list)
    bad_count: int = 0  # non-finite elements of its output
    name_stack: str = ""
    nan_maker: str = ""  # it made inf; this primitive then turned the inf into NaN ("mul")
    nan_maker_values: str = ""  # what that primitive got at its first NaN: "inf * 0.0"
    nan_maker_line: SourceLine | None = None
    nan_maker_library: str = ""  # the library function the NaN maker ran in ("jax.nn.log_softmax")
    nan_maker_provenance: Provenance | None = None  # where the NaN maker ran (its line, function, transformations)
    opaque: bool = False  # an equation the search could not look inside (its body is where the value was made)
    discarded_by: str = ""  # the NaN never reached the result: "jnp.where" dropped it
    discarded_line: SourceLine | None = None
    provenance: Provenance | None = None  # made_at (= line), function, transformations, iteration, library function
    neg_inf_rows: str = ""  # a max-reduction on its line saw rows that were all -inf: "1 of 3 rows (axis 1)"
    jitter: str = ""  # cholesky of a matrix not positive definite: the smallest diagonal jitter that let it factor
    # a constant added to its zero operand that the low-precision dtype holds as 0 (`+ 1e-8` in float16)
    lost_constant: lost_constant.LostConstant | None = None
    # a positive constant added to its input that did not lift a negative value (`rsqrt(var + 1e-5)`, var < 0)
    added_epsilon: added_epsilon.AddedEpsilon | None = None
    # the fixes of the operation tried on its recorded inputs, then on the whole program (probes/_nans/fixes/value_fixes.py)
    fix_trials: list[FixTrial] = dataclasses.field(default_factory=list)
    # for an operation of JAX's derivative rule: the user's operation whose derivative it is ("sqrt") and the
    # value that operation got there ("0.0"), where the fixes a user can write are tried (primal_fixes.py)
    primal: str = ""
    primal_value: str = ""
    output_dtype: str = ""  # the dtype of the value it made ("float16": a sum converted back overflowed it)
    # an integer operation on the way to its inputs that wrapped around (`256 ** k` in int32 is 0 at k = 4)
    integer_overflow: integer_overflow.IntegerOverflow | None = None

    @property
    def forward_line(self) -> SourceLine | None:
        """For a gradient operation, the forward line whose derivative it computes."""
        return self.line if self.derivative or self.phase == "backward" else None

    @property
    def where_in_loops(self) -> str:
        return ", ".join(loop.text for loop in self.loops)

    @property
    def description(self) -> str:
        """``"`log` got -1.0 at index [2], iteration 2"``; ``"`div`: 0.0/0.0 at index [0] ..."``."""
        at = f" at index {self.index}" if self.index else ""
        loops = f", {self.where_in_loops}" if self.loops else ""
        values = [op for op in self.operands if not op.constant] or self.operands
        if self.primitive == "div" and len(self.operands) == 2:
            num, den = self.operands
            text = f"`div`: {num.value}/{den.value}{at}{loops}; the denominator"
            text += f" (from `{den.made_by}`)" if den.made_by else ""
            return text + f" was {den.value}"
        if len(values) == 1:
            return f"`{self.primitive}` got {values[0].value}{at}{loops}"
        got = ", ".join(f"{op.role} {op.value}" for op in self.operands)
        return f"`{self.primitive}` got {got}{at}{loops}"


@dataclasses.dataclass
class ProducerSearch:
    """The outcome of one producer search."""

    producer: NanProducer | None = None
    searched: str = ""  # the expression whose program was evaluated
    stopped_at: list[str] = dataclasses.field(default_factory=list)  # primitives it could not look inside
    result_finite: bool = False  # the program's result held no NaN/inf (the NaN was discarded)
    failure: str = ""  # why no search ran: "tracing failed: ..."
    equations: int = 0  # equations evaluated one by one
    given_inf: bool = False  # its inputs held inf and no NaN: the producer made NaN from inputs without NaN
    written_inf: SourceLine | None = None  # the line that wrote an inf into a value (a mask's -inf), taken as given
    written_inf_by: str = ""  # the library whose code wrote it in the call on that line ("" when the line did)
    forward_check: str = ""  # how a producer under jvp was found to be a forward value (nans.probe._check_forward)
    put_back: str = ""  # tracing the call again wrote into the user's objects, and they were put back (kept_state)
