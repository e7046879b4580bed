"""Find the operation that produced a NaN/inf: the producer search.

JAX's ``debug_nans`` names the outermost primitive whose output held the NaN:
``scan`` for a NaN made inside a scan body, ``jit`` for a nested function.
This search goes to the operation itself. It runs only after a NaN/inf was
seen (nothing here costs anything on a clean cell):

1. trace the failing call with its real argument values (``jax.make_jaxpr``;
   for a gradient call the program holds the backward pass too);
2. evaluate that program equation by equation (``jaxmagic._jax.jaxpr_eval``),
   opening a control-flow or call equation only when its inputs are finite and
   its outputs are not - a loop iteration by iteration, with the body compiled
   and only the failing iteration evaluated op by op;
3. the **producer** is the first equation whose inputs are all finite and
   whose output is not. Its line, its loop iterations, the first bad element
   and the input values there are what the report shows. When it made inf and
   a NaN is sought, the equation that turned the inf into NaN is named too;
   when the program's result is finite after all, the NaN lived only in a
   discarded branch of ``where``/``select``.

Constants written into the program (``Literal``s, e.g. the ``nan`` jnp.var
returns for too few samples) do not count as non-finite inputs.

The search is two passes at most: first for an operation that made a NaN from
finite inputs; when there is none (an inf came first: the gradient of ``sqrt``
or ``norm`` at 0, ``log(0)``), for the first that made any non-finite value.
The second pass starts where the first met its first non-finite value and
reads the values the first one computed (``jaxpr_eval``'s checkpoints), so a
training step is evaluated once, not twice. Compiling the program, or prefixes
of it to bisect, was measured slower than this walk on CPU
(``benchmarks/bench_nan_producer.py``: one compile of a 1.5k-equation step costs
more than the whole search).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import linecache
import os
import weakref

import numpy as np

from jaxmagic._jax import compat, jit_calls
from jaxmagic._jax.jaxpr_eval import Listener, Walk
from jaxmagic.probes._support import attribution
from jaxmagic.probes._support.nan.nonfinite import is_inexact
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance
from jaxmagic.report.source import is_user_file, source_line
from jaxmagic.report.wording import error_line, short_dtype

# Operand names of binary primitives, for "the denominator was 0.0".
_OPERAND_NAMES = {
    "div": ("numerator", "denominator"),
    "rem": ("dividend", "divisor"),
    "pow": ("base", "exponent"),
    "sub": ("left", "right"),
    "add": ("left", "right"),
    "mul": ("left", "right"),
    "atan2": ("y", "x"),
}

_SELECTS = ("select_n", "_where", "where", "select")


@dataclasses.dataclass
class LoopPosition:
    """One enclosing loop or branch of the producer: ``scan`` iteration 899, ``cond`` branch 1."""

    primitive: str  # "scan", "while" or "cond"
    index: int  # iteration (scan: position in xs, counted from 0 even for reverse=True) or branch
    line: SourceLine | None = None  # the user's line that made the loop

    @property
    def text(self) -> str:
        return f"branch {self.index} of `cond`" if self.primitive == "cond" else f"iteration {self.index}"


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


# -- reading values ------------------------------------------------------------------


def _host(value):
    if isinstance(value, compat_tracer_types()):
        return None
    try:
        array = np.asarray(value)
    except Exception:
        return None
    if not is_inexact(array.dtype):
        return None
    return array


def compat_tracer_types():
    import jax

    return (jax.core.Tracer,)


def _bad_mask(value, want_nan: bool):
    array = _host(value)
    if array is None:
        return None
    mask = np.isnan(array) if want_nan else ~np.isfinite(array)
    return mask if mask.any() else None


def _any_bad(values, want_nan: bool = False) -> bool:
    return any(_bad_mask(v, want_nan) is not None for v in values)


def _only_infinities(values) -> bool:
    """Some of ``values`` hold inf, none holds NaN."""
    return _any_bad(values) and not _any_bad(values, want_nan=True)


def _number(x) -> str:
    if isinstance(x, np.floating):
        return str(x)  # the shortest text that reads back as this float32/float64
    if isinstance(x, float):
        return repr(x)
    if isinstance(x, (np.complexfloating, complex)):
        return repr(complex(x))
    if isinstance(x, (np.bool_, bool)):
        return str(bool(x))
    return str(x.item() if hasattr(x, "item") else x)


JITTERS = (1e-6, 1e-5, 1e-4, 1e-3, 1e-2)  # tried in turn, times the mean of the diagonal


def _definiteness(matrices, index: tuple, eqn) -> tuple[str, str]:
    """What a Cholesky factorization got, at the first bad element's matrix: ``"a 4x4 matrix whose smallest
    eigenvalue is -1.2e-08 (not positive definite)"``, and the smallest jitter (a multiple of the mean
    of its diagonal, added to every matrix's diagonal) with which the program's own equation ``eqn``
    factors the input to finite values ("" if none did)."""
    matrix = matrices[tuple(index[:-2])] if matrices.ndim > 2 and len(index) >= 2 else matrices
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or not np.isfinite(matrix).all():
        return compat_short(matrices), ""
    n = matrix.shape[0]
    symmetric = np.tril(matrix) + np.tril(matrix, -1).T  # what jnp.linalg.cholesky factors: the lower triangle
    smallest = np.linalg.eigvalsh(symmetric.astype(np.float64))[0]
    text = f"a {n}x{n} matrix whose smallest eigenvalue is {smallest:.3g}" + (
        " (not positive definite)" if smallest <= 0 else ""
    )
    scale = float(np.mean(np.abs(np.diag(symmetric)))) or 1.0
    for jitter in JITTERS:
        try:
            jittered = (matrices + jitter * scale * np.eye(n)).astype(matrices.dtype)
            if not _any_bad(compat.bind_equation(eqn, [jittered])):
                return text, f"{jitter * scale:.0e}"
        except Exception:
            return text, ""
    return text, ""


def _operand_at(value, out_shape: tuple, index: tuple) -> str:
    array = np.asarray(value)
    try:
        if array.size == 1:
            return _number(array.reshape(())[()])
        return _number(np.broadcast_to(array, out_shape)[index])
    except Exception:
        pass
    if (is_inexact(array.dtype) or np.issubdtype(array.dtype, np.number)) and array.size:
        finite = array[np.isfinite(array)] if is_inexact(array.dtype) else array
        spread = f" in [{_number(finite.min())}, {_number(finite.max())}]" if finite.size else " all non-finite"
        zeros = int(np.count_nonzero(array == 0))
        return f"{compat_short(array)}{spread}" + (f", {zeros} zero(s)" if zeros else "")
    return compat_short(array)


def compat_short(array) -> str:

    return f"{short_dtype(str(array.dtype))}[{','.join(map(str, array.shape))}]"


# -- where an equation came from -----------------------------------------------------


_attributed: dict = {}  # id(traceback) -> the traceback JAX attributed it to, during a search

# The same, kept with each traced program (``Jaxpr``) for its own equations, as long as it lives: JAX
# caches a program first traced inside a search (under ``compat.tracing_where_traced``), and a later
# search of the same function reads it from that cache, with the tracebacks the first search gave it.
_kept_attributions: dict[int, tuple[weakref.ref, dict]] = {}  # id(jaxpr) -> (it, its table)


def _programs_in(program) -> list:
    """``program``'s ``Jaxpr`` and every sub-program's, at any depth."""
    found, todo = [], [compat.closed_parts(program)[0]]
    while todo:
        jaxpr = todo.pop()
        found.append(jaxpr)
        for eqn in jaxpr.eqns:
            todo.extend(getattr(sub, "jaxpr", sub) for sub in compat.sub_jaxprs(eqn))
    return found


def _attributions_of(program, attributed: dict) -> dict:
    """The attributions of ``program``'s equations: those this trace made (``attributed``) and those
    kept from an earlier search's trace of a sub-program JAX has cached since. This trace's are kept
    with each of its jaxprs, for the tracebacks its equations hold (held by them: their ids stay theirs
    while the jaxpr lives) and those the tracebacks were attributed to in turn (held by the table)."""
    found: dict = {}
    for jaxpr in _programs_in(program):
        kept = _kept_attributions.get(id(jaxpr))
        if kept is None or kept[0]() is not jaxpr:
            table = {}
            for eqn in jaxpr.eqns:
                traceback = getattr(eqn.source_info, "traceback", None)
                while id(traceback) in attributed and id(traceback) not in table:
                    table[id(traceback)] = traceback = attributed[id(traceback)]
            if not table:
                continue
            key = id(jaxpr)
            kept = _kept_attributions[key] = (
                weakref.ref(jaxpr, lambda _, key=key: _kept_attributions.pop(key, None)),
                table,
            )
        found.update(kept[1])
    return found


def _user_line(eqn, path=()) -> SourceLine | None:
    """The innermost user frame that made ``eqn``; inside a nested jit JAX records only the frames
    below the jit, so the enclosing equations of ``path`` are asked in turn (innermost first)."""
    for made in (eqn, *(p.eqn for p in reversed(path))):
        line = _line_of(made.source_info.traceback)
        if line is not None:
            return line
    return None


def _in_users_derivative_rule(eqn) -> bool:
    """Whether ``eqn`` was written by the user's own derivative rule (a ``custom_vjp`` backward function,
    a ``custom_jvp`` rule): JAX's custom-derivative machinery called the innermost user frame that made it,
    so it is code of the user's, not JAX's derivative of it."""
    frames = compat.traceback_frames(eqn.source_info.traceback)  # innermost first
    for position, (filename, _, _) in enumerate(frames):
        if is_user_file(filename):
            caller = frames[position + 1][0] if position + 1 < len(frames) else ""
            return caller.replace("\\", "/").endswith("jax/_src/custom_derivatives.py")
    return False


def _expression_of(eqn, line: SourceLine | None, path=()) -> str:
    """The part of ``line`` whose evaluation made ``eqn`` (``jnp.log(1 - p)``), read from the columns
    JAX records with each frame - following a backward equation to the forward one it was attributed
    to; "" when that is the whole line, spans lines, or is not recorded."""
    if line is None:
        return ""
    tracebacks = []
    for made in (eqn, *(p.eqn for p in reversed(path))):
        traceback = made.source_info.traceback
        while traceback is not None and id(traceback) not in {id(t) for t in tracebacks}:
            tracebacks.append(traceback)
            traceback = _attributed.get(id(traceback))
    for traceback in tracebacks:
        for frame in compat.user_frames(traceback):
            if (frame.file_name, frame.start_line) != (
                line.filename,
                line.lineno,
            ) or frame.end_line != frame.start_line:
                continue
            text = linecache.getline(line.filename, line.lineno).encode()
            part = text[frame.start_column : frame.end_column].decode(errors="replace").strip()
            return part if part and part != line.code.strip() else ""
    return ""


def _line_of(traceback) -> SourceLine | None:
    """The user's line of a traceback. A backward-pass equation is attributed to its forward line,
    except when the user's own code traced it during the backward pass: a ``custom_vjp`` rule."""
    frames = compat.traceback_frames(traceback)
    attributed = _attributed.get(id(traceback))
    for i, (filename, lineno, function) in enumerate(frames):
        if is_user_file(filename):
            caller = frames[i + 1][0] if i + 1 < len(frames) else ""
            if attributed is not None and not caller.endswith("custom_derivatives.py"):
                return _line_of(attributed)
            return source_line(filename, lineno, function.rsplit("<locals>.", 1)[-1])
    return _line_of(attributed) if attributed is not None else None


def public_name(function: str, filename: str = "") -> str:
    """``std`` -> ``jnp.std``: the public name a user would write, best effort."""
    import jax
    import jax.numpy as jnp

    name = function.split(".")[-1].lstrip("_")
    if "<" in name:
        return ""
    parts = filename.replace(os.sep, "/")
    spaces = [("jax.nn", jax.nn), ("jnp.linalg", jnp.linalg), ("jnp", jnp), ("jax.lax", jax.lax)]
    if "/nn/" in parts:
        spaces.insert(0, spaces.pop(0))
    elif "linalg" in parts:
        spaces.insert(0, spaces.pop(1))
    for prefix, space in spaces:
        if hasattr(space, name):
            return f"{prefix}.{name}"
    return name


# -- the listener ---------------------------------------------------------------------


class _Search(Listener):
    def __init__(self, want_nan: bool, strict: bool, given_inf: bool = False):
        self.want_nan = want_nan  # a NaN was caught (not only an inf)
        self.strict = strict  # the producer must make the NaN itself from finite inputs
        # The arguments held inf (no NaN) and a NaN was caught: their infinities are given, not made, so
        # the producer is the first operation whose inputs held no NaN and whose output did.
        self.given_inf = given_inf
        self.result = ProducerSearch()
        self.stage = "producer"  # then "nan_maker" (producer made inf), then "absorber"
        self._made_by: dict = {}
        self.neg_inf_rows: dict = {}  # (file, line) -> "1 of 3 rows (axis 1)": a max over entries all -inf
        self._constant: set = set()  # id(var) of values made only from constants passed into an opened call
        self._seeded: set = set()
        self._opened: set = set()  # equations looked inside: what they made is an inner equation's doing

    def _seed(self, path) -> None:
        """Inside an opened call, the parameters that got a constant (``jnp.where(m, s, -jnp.inf)``
        passes ``-inf`` into ``_where``'s program) are constants there too, and so is what is made of
        them alone: an inf written into the program is not a value some operation produced."""
        if not path or path[-1].kind != "call" or id(path[-1].eqn) in self._seeded:
            return
        outer = path[-1].eqn
        self._seeded.add(id(outer))
        subs = compat.sub_jaxprs(outer)
        if len(subs) != 1:
            return
        jaxpr, _ = compat.closed_parts(subs[0])
        for var, inner in zip(outer.invars, jaxpr.invars):
            if compat.is_literal(var) or id(var) in self._constant:
                self._constant.add(id(inner))

    def _free(self, eqn, inputs, path):
        """The inputs that are neither constants written into the program nor made of such alone."""
        self._seed(path)
        if len(inputs) != len(eqn.invars):
            return inputs
        return [v for var, v in zip(eqn.invars, inputs) if not compat.is_literal(var) and id(var) not in self._constant]

    def _note_constants(self, eqn, path) -> None:
        self._seed(path)
        held = [compat.is_literal(var) or id(var) in self._constant for var in eqn.invars]
        if held and all(held) and any(not compat.is_literal(var) for var in eqn.invars):
            self._constant.update(id(var) for var in eqn.outvars)

    def look_inside(self, eqn, inputs, outputs, path) -> bool:
        if self.stage == "producer":
            wanted = not _any_bad(self._free(eqn, inputs, path), want_nan=self.given_inf) and _any_bad(
                outputs, want_nan=self.strict
            )
        elif self.stage == "nan_maker":
            wanted = not _any_bad(inputs, want_nan=True) and _any_bad(outputs, want_nan=True)
        else:
            wanted = False
        if wanted:
            self._opened.add(id(eqn))
        return wanted

    def cannot_open(self, eqn, path) -> None:
        self.result.stopped_at.append(eqn.primitive.name)
        self._opened.discard(id(eqn))

    step_flags = True

    @property
    def step_flag_key(self):
        return (self.stage, self.strict, self.given_inf)

    @staticmethod
    def step_flag(key, inputs, outputs):
        """``look_inside`` for a loop iteration, traced: found by one compiled run of the loop."""
        import jax.numpy as jnp

        stage, strict, given_inf = key

        def bad(values, nan_only):
            flags = [
                jnp.any(jnp.isnan(v) if nan_only else ~jnp.isfinite(v))
                for v in values
                if jnp.issubdtype(v.dtype, jnp.inexact)
            ]
            return jnp.any(jnp.stack(flags)) if flags else jnp.array(False)

        if stage == "producer":
            return ~bad(inputs, given_inf) & bad(outputs, strict)
        if stage == "nan_maker":
            return ~bad(inputs, True) & bad(outputs, True)
        return jnp.array(False)

    def checkpoint(self, eqn, outputs) -> bool:
        """The strict pass (a NaN from finite inputs) keeps its values before the first non-finite one
        on each level it goes down through: when it finds no producer, the second pass starts there.
        Nothing before that point is opened or recorded differently in the two passes."""
        return self.strict and _any_bad(outputs)

    def state(self):
        return (
            dict(self._made_by),
            dict(self.neg_inf_rows),
            set(self._constant),
            set(self._seeded),
            set(self._opened),
            self.result.equations,
            list(self.result.stopped_at),
        )

    def restore(self, state) -> None:
        made_by, neg_inf_rows, constant, seeded, opened, equations, stopped_at = state
        self._made_by, self.neg_inf_rows = dict(made_by), dict(neg_inf_rows)
        self._constant, self._seeded, self._opened = set(constant), set(seeded), set(opened)
        self.result.equations, self.result.stopped_at = equations, list(stopped_at)

    def visit(self, eqn, inputs, outputs, path) -> bool:
        """Record the producer, then the NaN maker, then (top level only) what discarded the NaN.

        An equation that was opened and held the producer has moved the stage
        on before it is visited itself, so at each stage the first equation that
        fits is the innermost one.
        """
        self.result.equations += 1
        for var in eqn.outvars:
            self._made_by[id(var)] = eqn
        _note_neg_inf_rows(self.neg_inf_rows, eqn, inputs, path)
        self._note_constants(eqn, path)
        if id(eqn) in self._opened and self.stage != "absorber":
            return False  # looked inside and found no operation of the kind sought: this pass has none
        if self.stage == "producer":
            if _any_bad(self._free(eqn, inputs, path), want_nan=self.given_inf) or not _any_bad(
                outputs, want_nan=self.strict
            ):
                return False
            if eqn.outvars and all(id(var) in self._constant for var in eqn.outvars):
                return False  # made of constants passed into the call alone: the operation using it is the producer
            self.result.producer = self._producer(eqn, inputs, outputs, path)
            if self.want_nan and not _any_bad(outputs, want_nan=True):
                self.stage = "nan_maker"  # it made inf: go on to the operation that makes NaN of it
                return False
            self.stage = "absorber"
            return True
        if self.stage == "nan_maker":
            if _any_bad(inputs, want_nan=True) or not _any_bad(outputs, want_nan=True):
                return False
            self._nan_maker(eqn, inputs, outputs, path)
            self.stage = "absorber"
            return True
        producer = self.result.producer
        if not path and producer is not None and not producer.discarded_by:
            if _any_bad(self._free(eqn, inputs, path)) and not _any_bad(outputs):
                name = str(eqn.params.get("name", eqn.primitive.name))
                producer.discarded_line = line = _user_line(eqn)
                producer.discarded_by = "jnp.where" if name in _SELECTS else public_name(name) or name
                if name in _SELECTS and line is not None and "lax.cond(" in line.code:
                    producer.discarded_by = "lax.cond"  # vmap turns a cond on a batched predicate into a select
        return False

    def _nan_maker(self, eqn, inputs, outputs, path) -> None:
        producer = self.result.producer
        bad = [m for m in (_bad_mask(o, True) for o in outputs) if m is not None]
        mask = bad[0]
        index = tuple(int(i) for i in np.argwhere(mask)[0]) if mask.ndim else ()
        values = [_operand_at(v, mask.shape, index) for v in inputs if _readable(v)]
        symbol = {"mul": " * ", "sub": " - ", "add": " + ", "div": " / "}.get(eqn.primitive.name)
        joined = symbol.join(values) if symbol and len(values) == 2 else ", ".join(values)
        producer.nan_maker, producer.nan_maker_values = eqn.primitive.name, joined
        producer.nan_maker_line = _user_line(eqn, path)
        library = next(
            (
                public_name(*compat.called_function(p.eqn))
                for p in path
                if p.kind == "call"
                and compat.called_function(p.eqn)[1]
                and not is_user_file(compat.called_function(p.eqn)[1])
            ),
            "",
        )
        loops = [
            LoopPosition(p.kind, int(p.index), _user_line(p.eqn, path))
            for p in path
            if p.kind in ("scan", "while", "cond")
        ]
        made = _provenance(eqn, path, producer.nan_maker_line, loops)
        producer.nan_maker_library = library or made.library_function
        made.library_function = producer.nan_maker_library
        producer.nan_maker_provenance = made
        if "transpose" in _stack(eqn, path):
            producer.phase = "backward"

    def _maker_name(self, var) -> str:
        maker = self._made_by.get(id(var))
        return maker.primitive.name if maker is not None else ""

    def _producer(self, eqn, inputs, outputs, path) -> NanProducer:
        # The first element of the kind sought: a NaN when the producer must make one (beside it, an inf
        # passed through from an input - a masked -inf - is no value it made).
        bad = [(i, m) for i, m in ((i, _bad_mask(o, self.strict)) for i, o in enumerate(outputs)) if m is not None]
        which, mask = bad[0]
        out = np.asarray(outputs[which])
        index = tuple(int(i) for i in np.argwhere(mask)[0]) if mask.ndim else ()
        made = "nan" if np.isnan(out[index] if index else out).any() else "inf"
        names = _OPERAND_NAMES.get(eqn.primitive.name, ())
        operands = []
        for k, (var, value) in enumerate(zip(eqn.invars, inputs)):
            if not _readable(value):
                continue
            array = np.asarray(value)
            maker = self._made_by.get(id(var))
            operands.append(
                OperandValue(
                    role=names[k] if k < len(names) else ("x" if len(inputs) == 1 else f"operand {k}"),
                    value=_operand_at(array, out.shape, index),
                    shape=list(array.shape),
                    dtype=str(array.dtype),
                    made_by=maker.primitive.name if maker is not None else "",
                    constant=compat.is_literal(var),
                    made_from=[self._maker_name(v) for v in maker.invars] if maker is not None else [],
                )
            )
        stack = _stack(eqn, path)
        loops, calls, library = [], [], ""
        for position in path:
            if position.kind in ("scan", "while", "cond"):
                loops.append(LoopPosition(position.kind, int(position.index), _user_line(position.eqn, path)))
                continue
            function, filename = compat.called_function(position.eqn)
            if filename and not is_user_file(filename):
                library = library or public_name(function, filename)
            elif "name" in position.eqn.params:
                calls.append(str(position.eqn.params["name"]))
        line = _user_line(eqn, path)
        in_rule = _in_users_derivative_rule(eqn)
        provenance = _provenance(eqn, path, line, loops)
        library = library or provenance.library_function
        provenance.library_function = library
        jitter = ""
        if eqn.primitive.name == "cholesky" and operands and _readable(inputs[0]):
            operands[0].value, jitter = _definiteness(np.asarray(inputs[0]), index, eqn)
        return NanProducer(
            jitter=jitter,
            expression=_expression_of(eqn, line, path),
            primitive=eqn.primitive.name,
            value=made,
            line=line,
            provenance=provenance,
            library_function=library,
            phase="backward" if "transpose" in stack else "forward",
            derivative=("jvp" in stack or "transpose" in stack) and not in_rule,
            user_rule=in_rule,
            loops=loops,
            calls=calls,
            index=list(index),
            operands=operands,
            output_shape=list(out.shape),
            opaque=eqn.primitive.name in self.result.stopped_at,
            bad_count=int(np.count_nonzero(mask)),
            name_stack=stack,
        )


def _provenance(eqn, path, line: SourceLine | None, loops: list[LoopPosition]) -> Provenance:
    """Where the producer was made (``attribution.of_equation``), its line the one the search attributes
    (a backward-pass operation at its forward line) and the library function called there by public name."""
    provenance = attribution.of_equation(eqn, [p.eqn for p in path], position=", ".join(loop.text for loop in loops))
    own = provenance.made_at
    if line is not None and own is not None and (own.filename, own.lineno) != (line.filename, line.lineno):
        provenance.library_function = ""  # what another line (a loop's call) called is not this operation's
    attributed = _attributed.get(id(getattr(eqn.source_info, "traceback", None)))
    if attributed is not None and "transpose" in _stack(eqn, path):  # traced for the backward pass: the forward
        # line's frames name the library function (elsewhere the attributed frames are a loop's call, not a library's)
        provenance.library_function = attribution.library_called(attributed) or provenance.library_function
    if line is not None:
        provenance.made_at, provenance.function, provenance.unknown = line, line.function, ""
    inside_library = set()  # a library function's own jit (``jit(_std)``) is no transformation of the user's
    for position in path:
        function, filename = compat.called_function(position.eqn)
        if filename and not is_user_file(filename) and "name" in position.eqn.params:
            inside_library.add(f"jit({position.eqn.params['name']})")
    provenance.transforms = [t for t in provenance.transforms if t not in inside_library]
    return provenance


_MAX_OF_ROWS = ("logsumexp", "log_softmax", "softmax", "_softmax")


def _note_neg_inf_rows(found: dict, eqn, inputs, path) -> None:
    """A ``reduce_max`` (or a jitted logsumexp/log_softmax/softmax) whose input holds rows that are all
    -inf - a fully masked attention row: recorded by the user's line, for the fix."""
    axes = None
    if eqn.primitive.name == "reduce_max":
        axes = tuple(eqn.params.get("axes", ()))
    elif str(eqn.params.get("name", "")) in _MAX_OF_ROWS:
        inner = getattr(eqn.params.get("jaxpr"), "jaxpr", None)
        first = next((e for e in getattr(inner, "eqns", ()) if e.primitive.name == "reduce_max"), None)
        axes = tuple(first.params.get("axes", ())) if first is not None else None
    if axes is None or not inputs:
        return
    array = _host(inputs[0])
    if array is None or not array.ndim or not axes or not np.isneginf(array).any():
        return
    try:
        rows = np.all(np.isneginf(array), axis=axes)
    except Exception:
        return
    if rows.any():
        line = _user_line(eqn, path)
        if line is not None:
            found.setdefault(
                (line.filename, line.lineno),
                f"{int(rows.sum())} of {rows.size} rows (axis {', '.join(map(str, axes))})",
            )


def _stack(eqn, path) -> str:
    """The name stack from the top-level program down to ``eqn`` (a body's equations carry only their own part)."""
    return "/".join(filter(None, [*(compat.name_stack_text(p.eqn) for p in path), compat.name_stack_text(eqn)]))


def _non_literal(eqn, inputs):
    """The inputs that are not constants written into the program (a loop step's inputs are all kept)."""
    if len(inputs) != len(eqn.invars):
        return inputs
    return [value for var, value in zip(eqn.invars, inputs) if not compat.is_literal(var)]


def _readable(value) -> bool:
    try:
        np.asarray(value)
    except Exception:
        return False
    return not isinstance(value, compat_tracer_types())


# -- the search -------------------------------------------------------------------------


def search(
    function,
    args: list,
    kwargs: dict | None = None,
    *,
    source: str = "",
    want_nan: bool = True,
):
    """Trace ``function(*args, **kwargs)`` and evaluate it to find the producer. Never raises.

    Array leaves of the arguments are the program's inputs; everything else
    (functions, Python numbers, strings) is fixed at its value. ``want_nan``:
    a NaN was caught (False: only an inf), so an inf producer is followed to
    the operation that made the NaN. When a NaN was caught and the arguments (or
    the arrays the function closes over) hold inf but no NaN, those infinities are
    given: the producer is the first operation whose inputs held no NaN and whose
    output did (``ProducerSearch.given_inf``).
    """
    import jax

    result = ProducerSearch(searched=source)
    kwargs = dict(kwargs or {})
    leaves, tree = jax.tree_util.tree_flatten((list(args), kwargs))
    dynamic = [i for i, leaf in enumerate(leaves) if isinstance(leaf, (jax.Array, np.ndarray, np.generic))]
    if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves):
        result.failure = "its arguments are tracers (it runs inside a transformation)"
        return result

    def traced(*values):
        filled = list(leaves)
        for i, value in zip(dynamic, values):
            filled[i] = value
        call_args, call_kwargs = jax.tree_util.tree_unflatten(tree, filled)
        return function(*call_args, **call_kwargs)

    values = [leaves[i] for i in dynamic]
    quiet = _quiet_evaluation()
    try:
        with quiet:
            return _trace_and_walk(traced, values, result, want_nan)
    finally:
        _attributed.clear()


def _trace_and_walk(traced, values: list, result: ProducerSearch, want_nan: bool) -> ProducerSearch:
    import jax

    source = result.searched
    try:
        with compat.tracing_where_traced() as attributed:
            program = jax.make_jaxpr(traced)(*values)
            _attributed.update(_attributions_of(program, attributed))
    except Exception as error:
        result.failure = f"tracing {source or 'the call'} failed: {error_line(error)}"
        return result
    # Arrays the function closes over are constants of its program: infinities there are given too.
    given_inf = want_nan and _only_infinities([*compat.closed_parts(program)[1], *values])
    # First the operation that made a NaN from finite inputs; if every NaN came from an inf, the
    # first operation that made a non-finite value (and the one that turned it into NaN).
    # The second pass starts where the first met its first non-finite value (what comes before, it
    # would evaluate and record the same way).
    resume = None
    for strict in (True,) if given_inf else (True, False) if want_nan else (False,):
        listener = _Search(want_nan, strict, given_inf)
        walk = Walk(listener, resume)
        try:
            outputs = walk.run(program, values)
        except Exception as error:
            listener.result.failure = f"evaluating its program failed: {error_line(error)}"
            outputs = None
            break
        if listener.result.producer is not None:
            break
        resume = walk.checkpoints
    found = listener.result
    found.searched, found.given_inf = source, given_inf
    producer = found.producer
    if producer is not None:
        for line in (producer.line, producer.nan_maker_line):
            if line is not None and (line.filename, line.lineno) in listener.neg_inf_rows:
                producer.neg_inf_rows = listener.neg_inf_rows[(line.filename, line.lineno)]
                break
    found.result_finite = outputs is not None and not _any_bad(outputs)
    if found.producer is not None and not found.result_finite:
        found.producer.discarded_by, found.producer.discarded_line = "", None
    found.stopped_at = list(dict.fromkeys(found.stopped_at))
    return found


# -- every intermediate of one call (%%jax_nans --inside) -------------------------------------

MAX_INSIDE_EQUATIONS = 20_000  # equations evaluated op by op per call; past it, no sub-program is opened


@dataclasses.dataclass
class InsideSearch:
    """The first operation of one jitted call's program that made a non-finite value, even when a later
    operation masked it (``rsqrt(inf) = 0``, ``jnp.where``, ``jnp.nan_to_num``, ``jnp.clip``)."""

    function: str = ""  # the jitted function: "layer_norm"
    call: int = 1  # which of its calls in the cell was evaluated
    producer: NanProducer | None = None
    masked_by: str = ""  # "jax.lax.rsqrt", "jnp.where", "jnp.nan_to_num", ...: the first operation that got it and gave finite values
    masked_primitive: str = ""  # the equation's primitive (or its jitted function's name): "rsqrt", "select_n", "jit"
    masked_line: SourceLine | None = None
    masked_provenance: Provenance | None = None
    reached_output: bool = False  # the program's result held non-finite values
    equations: int = 0  # equations evaluated one by one
    stopped_at: list[str] = dataclasses.field(default_factory=list)  # primitives it could not look inside
    budget_reached: bool = False  # more than MAX_INSIDE_EQUATIONS: later sub-programs were run whole
    failure: str = ""  # why the evaluation failed


def _has_inexact(values) -> bool:
    return any(_host(v) is not None for v in values)


class _Inside(_Search):
    """Open every sub-program whose inputs are finite; the producer is the first equation that made a
    non-finite value from finite inputs, written-in constants aside (``jnp.where(m, s, -jnp.inf)``
    writes -inf, it does not make it; arithmetic of such a value that makes NaN does). Then the first
    equation that got a non-finite value (not a written one) and gave only finite float values: the mask."""

    step_flags = False  # masked values never show in a loop step's inputs or outputs: each step is opened

    def __init__(self, budget: int = MAX_INSIDE_EQUATIONS):
        super().__init__(want_nan=False, strict=False)
        self.budget = budget
        self.budget_reached = False
        self._written: set = set()  # id(var) of non-finite values made of written-in constants alone
        self.masked: tuple | None = None  # (eqn, path) of the masking equation

    def _tainted(self, eqn) -> list[bool]:
        self._seed_written(eqn)
        return [compat.is_literal(v) or id(v) in self._constant or id(v) in self._written for v in eqn.invars]

    def _seed_written(self, eqn) -> None:
        pass  # the parameters of an opened call are seeded from the call's operands in look_inside

    def look_inside(self, eqn, inputs, outputs, path) -> bool:
        if self.stage != "producer":
            return False
        if self.result.equations >= self.budget:
            self.budget_reached = True
            return False
        tainted = self._tainted(eqn) if len(inputs) == len(eqn.invars) else [False] * len(inputs)
        if _any_bad([v for v, t in zip(inputs, tainted) if not t]):
            return False  # a non-finite value came in: it was made before
        subs = compat.sub_jaxprs(eqn)
        if len(subs) == 1 and len(inputs) == len(eqn.invars):  # a call: its parameters carry the taint
            jaxpr, _ = compat.closed_parts(subs[0])
            for outer, inner, t in zip(eqn.invars, jaxpr.invars, tainted):
                if t and id(outer) in self._written:
                    self._written.add(id(inner))
        self._opened.add(id(eqn))
        return True

    def visit(self, eqn, inputs, outputs, path) -> bool:
        """Returning True inside an opened equation leaves it (and every loop iteration after): done
        when the mask is found, and when the budget is spent (the rest then runs compiled, whole)."""
        self.result.equations += 1
        for var in eqn.outvars:
            self._made_by[id(var)] = eqn
        _note_neg_inf_rows(self.neg_inf_rows, eqn, inputs, path)
        tainted = self._tainted(eqn) if len(inputs) == len(eqn.invars) else [False] * len(inputs)
        self._note_constants(eqn, path)
        if path and self.stage == "producer" and self.result.equations >= self.budget:
            self.budget_reached = True
            return True
        if self.stage == "producer":
            if id(eqn) in self._opened or not _any_bad(outputs):
                return False
            if _any_bad([v for v, t in zip(inputs, tainted) if not t]):
                return False  # came in through the call's arguments
            if _any_bad([v for v, t in zip(inputs, tainted) if t]):
                made_nan = _any_bad(outputs, want_nan=True) and not _any_bad(inputs, want_nan=True)
                if not made_nan:  # a written -inf passed on (max of a masked row, exp(-inf)): still written
                    self._written.update(id(var) for var in eqn.outvars)
                    return False
            self.result.producer = self._producer(eqn, inputs, outputs, path)
            self.stage = "absorber"
            return False
        if self.stage == "absorber" and self.masked is None and id(eqn) not in self._opened:
            real = [v for v, t in zip(inputs, tainted) if not t]
            if _any_bad(real) and _has_inexact(outputs) and not _any_bad(outputs):
                self.masked = (eqn, path)
                return bool(path)  # found inside a loop body or call: the later iterations need not be walked
        return False


def search_inside(program, args: list, *, function: str = "", call: int = 1, budget: int = MAX_INSIDE_EQUATIONS):
    """Evaluate a jitted call's traced program (``program``, a Jaxpr or ClosedJaxpr) on its flat
    arguments op by op; an ``InsideSearch``. Never raises; runs with NaN/inf checks off."""

    found = InsideSearch(function=function, call=call)
    listener = _Inside(budget)
    quiet = _quiet_evaluation()
    try:
        with quiet:
            outputs = Walk(listener).run(program, list(args))
    except Exception as error:
        found.failure = f"evaluating the program of `{function}` op by op failed: {error_line(error)}"
        outputs = None
    found.equations = listener.result.equations
    found.stopped_at = list(dict.fromkeys(listener.result.stopped_at))
    found.budget_reached = listener.budget_reached
    found.producer = listener.result.producer
    if found.producer is not None:
        found.reached_output = outputs is not None and _any_bad(outputs)
        if listener.masked is not None:
            eqn, path = listener.masked
            name = eqn.params.get("name") if compat.sub_jaxprs(eqn) else None
            if name is None:  # a primitive: by its own name ("rsqrt", "select_n", "clamp", "min")
                found.masked_primitive = found.masked_by = eqn.primitive.name
            else:  # a jitted library function by the name the user wrote ("jnp.where"); a function of the user's by its own
                found.masked_primitive = str(name)
                filename = compat.called_function(eqn)[1]
                if filename and is_user_file(filename):
                    found.masked_by = str(name)
                else:
                    found.masked_by = "jnp.where" if name in _SELECTS else public_name(str(name)) or str(name)
            found.masked_line = _user_line(eqn, path)
            found.masked_provenance = _provenance(eqn, path, found.masked_line, [])
    return found


def _quiet_evaluation() -> contextlib.ExitStack:
    """What evaluating a user's program op by op runs under: NaN/inf checks off (the search looks for
    them itself), its prints discarded, and our own call observation paused."""
    import jax

    quiet = contextlib.ExitStack()
    quiet.enter_context(jax.debug_nans(False))
    quiet.enter_context(jax.debug_infs(False))
    quiet.enter_context(contextlib.redirect_stdout(io.StringIO()))
    quiet.enter_context(jit_calls.paused())
    return quiet
