"""Key probe: PRNG keys used twice, the keys each jitted function received, and legacy uint32 keys.

Usage without IPython::

    with jaxmagic.probes.keys() as report:          # raises jax.errors.KeyReuseError at a reused key
        train(step_fn, params, X, Y, 5)
    report.reuse.consumer, report.reuse.reused_at, report.reuse.first_used_at
    report.flow("train_step").distinct, report.flow("train_step").calls

Chapter section 9.3: a dropout key that never advances (``split(key)[0]`` on
the same ``key`` every step) raises nothing and gives every step the same
mask. Three views on it, all for the block only:

* ``jax.debug_key_reuse(True)``: a typed key (``jax.random.key``) consumed
  twice raises ``KeyReuseError``. JAX's message says which function got it and
  at which index; the probe adds the argument's name, your line of the second
  use and of the first one (JAX keeps it on the key), and the fix.
* The keys that reached each of your jitted functions (the chapter's
  ``key_data`` spy, without changing your code): at every call of a jitted
  function the probe reads the raw data of each typed-key argument - reading
  consumes nothing and changes no result - and counts the distinct keys per
  function. "train_step got the same key in all 5 calls" shows up even where
  nothing raises (a key rebuilt from the same seed every step).
* Legacy raw keys (``jax.random.PRNGKey``, uint32 arrays) are invisible to the
  checker, so they are followed by their key data: a jitted function of yours
  whose program wraps an argument as a key (``random_wrap``) has that
  argument's data counted like a typed key's.
* Every eager jax.random call (typed or legacy key) is followed the same way:
  the key's data and the call's other arguments, per line of yours. The same
  key data with the same arguments at one line in N of N calls draws the same
  numbers N times (``perm = jax.random.permutation(key, n)`` every epoch with
  ``key`` never advanced).

``record=True`` (used by ``%%jax_doctor``) reports reused keys instead of
raising, and lets the block run as it would without the checker.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import re
import sys
import threading
import traceback
from collections.abc import Iterator

from jaxmagic._jax import compat, jit_calls
from jaxmagic._jax.own_settings import note_own_value
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic.probes._support.nan_watch import user_frame
from jaxmagic.report import Report, SourceLine, Status
from jaxmagic.report.source import first_library_function, is_user_file, source_line
from jaxmagic.report.wording import ended, message_of

CONFIG_NAMES = ("jax_debug_key_reuse",)
FIX = (
    "Split before every use and carry the new key forward: `key, sub = jax.random.split(key)`, then use "
    "`sub` and keep `key` for the next step. Or derive one key per step from a base key with "
    "`jax.random.fold_in(key, step)`."
)
LEGACY_NOTE = (
    "`jax.random.PRNGKey` makes a raw uint32 array. JAX's key-reuse checker cannot follow such keys; "
    "jaxmagic followed them by their key data. Creating keys with `jax.random.key(seed)` lets JAX "
    "itself raise at a reuse."
)
# jax.random functions that read a key without drawing from it
_NOT_DRAWING = frozenset({"key_data", "key_impl"})
MAX_DRAW_LINES = 200  # lines followed per block
MAX_FLOW_VALUES = 1000  # distinct key fingerprints kept per argument

_PASSED = re.compile(r"Previously-consumed key passed to (?P<function>.+?) at index (?P<index>\d+)")
_IN_TRACE = re.compile(r"In (?P<function>[\w\-.]+), argument (?P<index>\d+) is already consumed")


@dataclasses.dataclass
class KeyReuse:
    """One KeyReuseError: a typed key consumed a second time."""

    message: str  # JAX's first line
    consumer: str = ""  # what got the consumed key: "random_split", "train_step", "random_bits"
    index: int | None = None  # the argument index JAX gives
    argument: str = ""  # its name, when known ("key")
    where: str = "call"  # "call": at run time, between calls; "trace": inside one traced function
    function: str = ""  # for "trace": the function being traced
    reused_at: SourceLine | None = None
    first_used_at: SourceLine | None = None
    count: int = 1  # record mode: how many times this same reuse happened

    @property
    def same_line(self) -> bool:
        return bool(
            self.reused_at
            and self.first_used_at
            and (self.reused_at.filename, self.reused_at.lineno)
            == (self.first_used_at.filename, self.first_used_at.lineno)
        )

    @property
    def explanation(self) -> str:
        what = f"`{self.consumer}`" + (
            f" (argument {self.index}" + (f", `{self.argument}`" if self.argument else "") + ")"
            if self.index is not None
            else ""
        )
        if self.where == "trace":
            inside = f" inside `{self.function}`" if self.function else ""
            return (
                f"{what}{inside} is given a key that an earlier operation of the same function already "
                "consumed: both draw from the same random stream, so their random numbers are correlated "
                "(identical, for the same shape)."
            )
        text = f"{what} was given a key that had already been consumed"
        if self.same_line:
            return text + (
                " - on the same line, in an earlier pass of a loop: the loop uses the same key every "
                "time and never replaces it, so every step gets the same random numbers."
            )
        if self.first_used_at:
            return (
                text + f" by your line {self.first_used_at.label or self.first_used_at.filename}, line "
                f"{self.first_used_at.lineno}: the two uses get the same random numbers."
            )
        return text + ": the two uses get the same random numbers."


@dataclasses.dataclass
class KeyFlow:
    """The typed keys one argument of one of your jitted functions received."""

    function: str
    argument: str  # "key", or "argument 3"
    calls: int = 0
    distinct: int = 0
    first_call: SourceLine | None = None
    repeated_key: str = ""  # the data of the key seen most often, e.g. "[1797259609 2579123966]"
    repeated_times: int = 0
    legacy: bool = False  # a raw uint32 key (jax.random.PRNGKey), found as the program wraps it into a key

    @property
    def repeated(self) -> bool:
        return self.calls > 1 and self.distinct < self.calls


@dataclasses.dataclass
class RepeatedDraw:
    """One eager jax.random call of one line of yours, followed by the data of the keys it was given."""

    api: str  # "permutation", "normal", "split"
    line: SourceLine | None
    legacy: bool = False  # given raw uint32 keys (jax.random.PRNGKey)
    calls: int = 0
    distinct: int = 0  # distinct (key data, other arguments)
    repeated_key: str = ""
    repeated_times: int = 0

    @property
    def repeated(self) -> bool:
        return self.calls > 1 and self.distinct < self.calls

    @property
    def text(self) -> str:
        kind = "legacy uint32 key" if self.legacy else "key"
        where = f" at {self.line.where}" if self.line else ""
        return (
            f"`jax.random.{self.api}`{where} got the same {kind} data (and the same other arguments) "
            f"in {self.repeated_times} of its {self.calls} calls"
        )


@dataclasses.dataclass
class LegacyKeyUse:
    api: str  # the jax.random function given a raw key: "normal"
    line: SourceLine | None = None
    count: int = 0


@dataclasses.dataclass
class KeyReport(Report):
    """What ``%%jax_keys`` found."""

    kind = "jax_keys"

    reuse: list[KeyReuse] = dataclasses.field(default_factory=list)
    flows: list[KeyFlow] = dataclasses.field(default_factory=list)
    legacy: list[LegacyKeyUse] = dataclasses.field(default_factory=list)
    draws: list[RepeatedDraw] = dataclasses.field(default_factory=list)  # eager jax.random calls, per line
    recorded: bool = False  # reuse was recorded, not raised
    calls_checked: bool = True  # False: only traced functions were checked, not each call
    followed: bool = True  # False: this JAX gave no way to see calls (no key counts)
    other_error: str = ""

    def flow(self, function: str) -> KeyFlow | None:
        """The key flow of ``function`` (the first argument that carries keys)."""
        return next((f for f in self.flows if f.function == function), None)

    @property
    def repeated_flows(self) -> list[KeyFlow]:
        return [f for f in self.flows if f.repeated]

    @property
    def repeated_draws(self) -> list[RepeatedDraw]:
        """Eager draws with repeated key data, except those a recorded reuse already names (same line)."""
        named = {(r.reused_at.filename, r.reused_at.lineno) for r in self.reuse if r.reused_at}
        return [
            d
            for d in self.draws
            if d.repeated and not (d.line and (d.line.filename, d.line.lineno) in named and not d.legacy)
        ]

    @property
    def status(self) -> Status:
        if self.reuse or self.repeated_flows or self.repeated_draws:
            return Status.PROBLEM
        return Status.ERROR if self.other_error else Status.OK

    @property
    def summary(self) -> str:
        parts = []
        if self.reuse:
            r = self.reuse[0]
            at = f" at {r.reused_at.where}" if r.reused_at else ""
            parts.append(
                f"Key reused: `{r.consumer}` got an already consumed key{at}"
                + (" (every pass of the loop uses the same key)" if r.same_line else "")
                + "."
            )
        for f in self.repeated_flows[:2]:
            kind = " legacy uint32" if f.legacy else ""
            parts.append(
                f"`{f.function}` received {f.distinct} distinct{kind} key(s) in {f.calls} calls (argument `{f.argument}`)."
            )
        for d in self.repeated_draws[:2]:
            parts.append(d.text + ": the same random numbers each time.")
        if self.legacy and not parts:
            n = sum(u.count for u in self.legacy)
            parts.append(
                f"No key was reused: {n} jax.random call(s) got a legacy uint32 PRNGKey, followed by their key data."
            )
        if not parts:
            flows = [f for f in self.flows if f.calls]
            if flows:
                f = flows[0]
                parts.append(
                    f"No key was reused; `{f.function}` received {f.distinct} distinct key(s) in {f.calls} call(s)."
                )
            else:
                parts.append("No key was reused (no typed key reached a jitted function of yours).")
        if self.other_error and not self.reuse:
            parts.append(f"The cell failed with {ended(self.other_error)}")
        return " ".join(parts)

    def document(self):
        from jaxmagic.report.document import Document, Facts, Paragraph, Section, SourceLines, Table

        sections = []
        for r in self.reuse[:4]:
            facts = [("consumer", f"`{r.consumer}`")]
            if r.index is not None:
                facts.append(("argument", f"{r.index}" + (f" (`{r.argument}`)" if r.argument else "")))
            facts.append(("found", "when the function was traced" if r.where == "trace" else "when it was called"))
            if r.count > 1:
                facts.append(("times", str(r.count)))
            blocks = [Facts(facts), Paragraph(r.explanation)]
            lines = []
            if r.first_used_at:
                lines.append(r.first_used_at)
            if r.reused_at and not r.same_line:
                lines.append(r.reused_at)
            if lines:
                caption = (
                    "First consumed here, then again on the same line:"
                    if r.same_line
                    else "First consumed, then used again:"
                    if len(lines) > 1
                    else "Used here:"
                )
                blocks.append(SourceLines(lines, caption))
            elif r.reused_at:
                blocks.append(SourceLines([r.reused_at], "Used again here:"))
            blocks.append(Paragraph(FIX))
            sections.append(Section("Key reused", blocks))
        if self.flows:
            rows = [
                [
                    f"`{f.function}`",
                    f"`{f.argument}`",
                    str(f.calls),
                    str(f.distinct),
                    (f"{f.repeated_times} x {f.repeated_key}" if f.repeated else "-"),
                    f"{f.first_call.label or f.first_call.filename}:{f.first_call.lineno}" if f.first_call else "-",
                ]
                for f in self.flows
            ]
            blocks = [
                Table(["function", "key argument", "calls", "distinct keys", "repeated key", "called from"], rows)
            ]
            if any(f.legacy for f in self.flows):
                blocks.append(
                    Paragraph(
                        "Legacy uint32 keys are counted where your function's program wraps the argument as "
                        "a key (jax.random functions do so with a raw key)."
                    )
                )
            if self.repeated_flows:
                blocks.append(
                    Paragraph(
                        "A function that gets the same key in several calls draws the same random "
                        "numbers every time (the same dropout mask every step). " + FIX
                    )
                )
            blocks.append(
                Paragraph(
                    "Counted from the raw data of each typed key passed to a jitted function of "
                    "yours (jax.random.key_data, read without consuming the key)."
                )
            )
            sections.append(Section("Keys per jitted function", blocks))
        if self.draws:
            shown = [d for d in self.draws if d.repeated] or self.draws[:8]
            rows = [
                [
                    f"`jax.random.{d.api}`",
                    "legacy uint32" if d.legacy else "typed",
                    str(d.calls),
                    str(d.distinct),
                    (f"{d.repeated_times} x {d.repeated_key}" if d.repeated else "-"),
                    d.line.where if d.line else "-",
                ]
                for d in shown[:12]
            ]
            blocks = [Table(["function", "key", "calls", "distinct", "repeated key", "your line"], rows)]
            if self.repeated_draws:
                blocks.append(
                    Paragraph(
                        "The same key data with the same other arguments draws the same random numbers: "
                        "a loop that reuses a key it never advances (e.g. the same permutation every epoch). " + FIX
                    )
                )
            blocks.append(
                Paragraph(
                    "Eager jax.random calls outside jit, followed by the data of the key each call was given "
                    "(read without consuming it) and its other arguments."
                )
            )
            sections.append(Section("Eager random calls per line", blocks))
        if self.legacy:
            rows = [
                [
                    f"`jax.random.{u.api}`",
                    str(u.count),
                    u.line.where if u.line else "-",
                    f"`{u.line.code}`" if u.line and u.line.code else "-",
                ]
                for u in self.legacy
            ]
            sections.append(
                Section(
                    "Legacy uint32 keys",
                    [Table(["function", "calls", "your line", "code"], rows), Paragraph(LEGACY_NOTE)],
                )
            )
        how = [
            "Checked with jax.debug_key_reuse(True) for this cell only"
            + (
                ": reuses were recorded and the cell ran on as it would without the checker."
                if self.recorded
                else ": the first reuse stops the cell with JAX's KeyReuseError."
            )
        ]
        if not self.calls_checked:
            how.append(
                "Each traced function was checked for a key used twice inside it; keys consumed twice "
                "between calls were not checked call by call (%%jax_keys does), only counted per function."
            )
        if not self.followed:
            how.append("This JAX gives no way to follow single calls, so keys per function were not counted.")
        sections.append(Section("How this was checked", [Paragraph(t) for t in how]))
        return Document("%%jax_keys", self.status, self.summary, sections)


# -- explaining a KeyReuseError ---------------------------------------------------


def _user_frames(tb) -> list[SourceLine]:
    """The user's frames of a traceback, outermost first (jaxmagic's and libraries' left out)."""
    if tb is None:
        return []
    return [
        source_line(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(tb) if is_user_file(f.filename)
    ]


def explain_key_reuse(
    error: BaseException, where: str = "", function: str = "", params: dict | None = None
) -> KeyReuse:
    """The facts of a ``KeyReuseError``: who got the key, which argument, where it was used and first used."""
    message = message_of(error).strip().splitlines()[0] if message_of(error).strip() else ""
    reuse = KeyReuse(message=message, where=where or "call")
    passed, in_trace = _PASSED.search(message), _IN_TRACE.search(message)
    match = passed or in_trace
    if match:
        reuse.consumer = match.group("function")
        reuse.index = int(match.group("index"))
    if in_trace:
        reuse.where = "trace"
        reuse.function = function
    elif function and reuse.consumer in ("jit-compiled function", ""):
        reuse.consumer = function
    if params and reuse.index is not None:
        reuse.argument = _argument_name(params, reuse.index)
    cause = error.__cause__
    if cause is not None and type(cause).__name__ == "KeyReuseError":
        first = _user_frames(cause.__traceback__)
        reuse.first_used_at = first[-1] if first else None
    if cause is not None and type(cause).__name__ == "JaxStackTraceBeforeTransformation":
        inner = _user_frames(cause.__traceback__)  # the traced line that reused it
        reuse.reused_at = inner[-1] if inner else None
        called = first_library_function(cause.__traceback__)  # "uniform": what that line called
        if called and reuse.consumer in ("jit", "pjit", "closed_call", ""):
            reuse.consumer = f"jax.random.{called}" if _is_random_api(called) else called
    if reuse.reused_at is None:
        lines = _user_frames(error.__traceback__) or _user_frames_of_stack()
        reuse.reused_at = lines[-1] if lines else None
    return reuse


def _is_random_api(name: str) -> bool:
    import jax

    return callable(getattr(jax.random, name, None))


def _user_frames_of_stack() -> list[SourceLine]:
    frame = sys._getframe(1)
    lines = []
    while frame is not None:
        if is_user_file(frame.f_code.co_filename):
            lines.append(source_line(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    return list(reversed(lines))


def _argument_name(params: dict, index: int) -> str:
    closed = params.get("jaxpr")
    info = getattr(getattr(closed, "jaxpr", closed), "debug_info", None)
    names = getattr(info, "arg_names", None)
    if names and 0 <= index < len(names) and names[index]:
        return str(names[index])
    return ""


_users_functions: dict[str, bool] = {}  # a traced function's "f at file:line" -> whether the file is the user's


def _function_is_users(params: dict) -> bool:
    closed = params.get("jaxpr")
    info = getattr(getattr(closed, "jaxpr", closed), "debug_info", None)
    where = str(getattr(info, "func_src_info", "") or "")
    known = _users_functions.get(where)  # asked at every call of a jitted function: answered once per function
    if known is None:
        match = re.search(r" at (.+):\d+$", where)
        known = bool(match) and is_user_file(match.group(1))
        if len(_users_functions) < 10_000:
            _users_functions[where] = known
    return known


# -- the probe -------------------------------------------------------------------


class _KeyWatch(jit_calls.CallObserver):
    """Counts the distinct typed keys each argument of the user's jitted functions receives."""

    def __init__(self, report: KeyReport):
        self.report = report
        self.flows: dict[tuple[str, int], KeyFlow] = {}
        self.seen: dict[tuple[str, int], dict[bytes, list]] = {}
        self.legacy_arguments: dict[int, tuple] = {}  # id(jaxpr) -> (jaxpr, argument indices), for the block
        self.lock = threading.Lock()

    def before(self, name, is_jit, args, params) -> None:
        if not is_jit or not _function_is_users(params):
            return
        legacy = self._legacy_arguments(params)
        for index, value in enumerate(args):
            if not jit_calls.is_typed_key(value) and index not in legacy:
                continue
            with jit_calls.reads_allowed():  # reading the key is ours, not one of the user's transfers
                fingerprint, shown = _key_fingerprint(value)
            key = (name, index)
            with self.lock:
                flow = self.flows.get(key)
                if flow is None:
                    argument = _argument_name(params, index) or f"argument {index}"
                    flow = self.flows[key] = KeyFlow(name, argument, first_call=_caller_line(), legacy=index in legacy)
                    self.report.flows.append(flow)
                    self.seen[key] = {}
                flow.calls += 1
                seen = self.seen[key]
                if fingerprint in seen:
                    seen[fingerprint][1] += 1
                elif len(seen) < MAX_FLOW_VALUES:
                    seen[fingerprint] = [shown, 1]
                flow.distinct = len(seen)

    def _legacy_arguments(self, params) -> frozenset[int]:
        """The arguments the called program wraps into keys (``random_wrap``): raw uint32 keys."""
        closed = params.get("jaxpr")
        jaxpr = getattr(closed, "jaxpr", closed)
        if jaxpr is None:
            return frozenset()
        cached = self.legacy_arguments.get(id(jaxpr))
        if cached is not None and cached[0] is jaxpr:
            return cached[1]
        try:
            found = frozenset(_wrapped_inputs(jaxpr))
        except Exception:  # another jaxpr layout: follow typed keys only
            found = frozenset()
        if len(self.legacy_arguments) < 1000:
            self.legacy_arguments[id(jaxpr)] = (jaxpr, found)
        return found

    def finish(self) -> None:
        """Fill in each flow's most repeated key (rendered once, at the end)."""
        self.legacy_arguments.clear()
        for key, flow in self.flows.items():
            seen = self.seen.get(key)
            if seen:
                data, times = max(seen.values(), key=lambda item: item[1])
                flow.repeated_key, flow.repeated_times = _render_key(data), times
        self.seen.clear()


def _wrapped_inputs(jaxpr, depth: int = 0) -> set[int]:
    """Indices of the program's inputs that reach ``random_wrap`` (a raw key made a typed one), through calls."""
    invars = list(jaxpr.invars)
    found = set()
    for eqn in jaxpr.eqns:
        inputs = [invars.index(v) if v in invars else None for v in eqn.invars]
        if eqn.primitive.name == "random_wrap":
            found |= {i for i in inputs[:1] if i is not None}
        elif depth < 4:
            for sub in compat.sub_jaxprs(eqn):
                inner = getattr(sub, "jaxpr", sub)
                if len(inner.invars) == len(eqn.invars):  # a call: its inputs are the equation's
                    found |= {inputs[i] for i in _wrapped_inputs(inner, depth + 1) if inputs[i] is not None}
    return found


def _key_fingerprint(key) -> tuple[bytes, object]:
    """A digest of a typed key's raw data, and the data (rendered only if shown); reads it, consumes nothing."""
    import numpy as np

    if jit_calls.is_typed_key(key):
        base = getattr(key, "_base_array", None)
        if base is None:
            import jax

            base = jax.random.key_data(key)
    else:
        base = key  # a raw uint32 key is its own key data
    data = np.asarray(base)
    raw = data.tobytes() + str(data.shape).encode()
    # A key or two is a few bytes: its data is its own fingerprint; a batch of keys is digested.
    return (raw if len(raw) <= 64 else hashlib.blake2b(raw, digest_size=16).digest()), data


def _render_key(data) -> str:
    import numpy as np

    return np.array2string(data.reshape(-1)[:4], separator=" ") + ("..." if data.size > 4 else "")


def _caller_line() -> SourceLine | None:
    return _line_of(user_frame())


def _line_of(frame) -> SourceLine | None:
    return None if frame is None else source_line(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)


def _draw_fingerprint(key, frame) -> tuple[bytes, object] | None:
    """Digest of a concrete key's data and the drawing function's other arguments; None under a trace."""
    import jax

    if isinstance(key, jax.core.Tracer):
        return None
    digest, data = _key_fingerprint(key)
    code = frame.f_code if frame is not None else None
    others = []
    if code is not None:
        names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
        for name in names:
            if name != "key":
                others.append(f"{name}={_argument_fingerprint(frame.f_locals.get(name))}")
    extra = hashlib.blake2b("|".join(others).encode(), digest_size=16).digest()
    return digest + extra, data


def _argument_fingerprint(value) -> str:
    import jax
    import numpy as np

    if isinstance(value, jax.core.Tracer):
        return f"tracer {id(value)}"
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        if getattr(value, "size", 0) <= 4096:
            try:
                array = np.asarray(value)
                return f"{array.dtype}{array.shape}:" + hashlib.blake2b(array.tobytes(), digest_size=8).hexdigest()
            except Exception:
                pass
        return f"array id {id(value)}"
    try:
        return repr(value)[:400]
    except Exception:
        return f"{type(value).__name__} id {id(value)}"


@contextlib.contextmanager
def _random_calls_followed(report: KeyReport) -> Iterator[None]:
    """Follow each eager jax.random call by its key's data (they all pass through ``_check_prng_key``).

    Lists the calls given a raw uint32 key, and counts per (function, line of
    yours) the distinct key data and other arguments each call was given.
    """
    random_core = compat.random_core()
    if random_core is None:  # another layout: no legacy-key listing
        yield
        return
    original = getattr(random_core, "_check_prng_key", None)
    if original is None:
        yield
        return
    uses: dict[tuple, LegacyKeyUse] = {}
    draws: dict[tuple, tuple[RepeatedDraw, dict]] = {}
    lock = threading.Lock()

    def check(name, key, *args, **kwargs):
        try:
            _follow(str(name), key, sys._getframe(1))
        except Exception:  # following is ours: never the user's error
            pass
        return original(name, key, *args, **kwargs)

    def _follow(name, key, frame):
        if not hasattr(key, "dtype"):
            return
        legacy = not jit_calls.is_typed_key(key)
        user = user_frame()  # the SourceLine (reading the line's text) is made once per line, not per call
        where = (name, user.f_code.co_filename, user.f_lineno) if user is not None else (name, "", 0)
        if legacy:
            with lock:
                use = uses.get(where)
                if use is None:
                    use = uses[where] = LegacyKeyUse(name, _line_of(user))
                    report.legacy.append(use)
                use.count += 1
        if name in _NOT_DRAWING or user is None:
            return
        with jit_calls.reads_allowed():  # reading the key is ours, not one of the user's transfers
            found = _draw_fingerprint(key, frame)
        if found is None:
            return
        fingerprint, data = found
        with lock:
            entry = draws.get(where)
            if entry is None:
                if len(draws) >= MAX_DRAW_LINES:
                    return
                entry = draws[where] = (RepeatedDraw(name, _line_of(user), legacy=legacy), {})
                report.draws.append(entry[0])
            draw, seen = entry
            draw.calls += 1
            if fingerprint in seen:
                seen[fingerprint][1] += 1
            elif len(seen) < MAX_FLOW_VALUES:
                seen[fingerprint] = [data, 1]
            draw.distinct = len(seen)

    random_core._check_prng_key = check
    try:
        yield
    finally:
        random_core._check_prng_key = original
        for draw, seen in draws.values():
            if seen:
                data, times = max(seen.values(), key=lambda item: item[1])
                draw.repeated_key, draw.repeated_times = _render_key(data), times
        draws.clear()


@contextlib.contextmanager
def keys(
    *,
    record: bool = False,
    check_calls: bool = True,
    also_observe: tuple[jit_calls.CallObserver, ...] = (),
    only_user_calls: bool = False,
    fast_path: bool = False,
    on_calls_unseen=None,
) -> Iterator[KeyReport]:
    """Check the block for reused PRNG keys; count the keys each jitted function of yours receives.

    Default: the first reuse raises JAX's ``KeyReuseError`` (the report is
    filled in first). ``record=True``: every reuse is recorded and the block
    runs on as it would without the checker. ``check_calls=False`` checks each
    traced function but not each call (much cheaper: the per-call check traces
    some operations again at every call); keys passed again are then still
    seen by the distinct-key count. ``also_observe``: more call observers for
    the same pass over the calls (the observation does not nest).
    ``only_user_calls``: watch only the jitted calls your own code makes (much
    cheaper; eager code is then not checked). ``fast_path``: the same calls,
    left on JAX's C++ path (cheaper still; needs ``record`` and not
    ``check_calls``; ``on_calls_unseen``: see ``jit_calls.observing_calls``).
    """
    import jax

    from jaxmagic.probes.leaks import mark_explained

    report = KeyReport(recorded=record)
    mode = "record" if record else "raise"
    report.calls_checked = check_calls
    seen: dict[tuple, KeyReuse] = {}

    def on_reuse(error, where, function, params):
        reuse = explain_key_reuse(error, where, function, params)
        spot = (
            reuse.consumer,
            reuse.index,
            reuse.where,
            (reuse.reused_at.filename, reuse.reused_at.lineno) if reuse.reused_at else None,
        )
        if spot in seen:
            seen[spot].count += 1
            return
        seen[spot] = reuse
        report.reuse.append(reuse)

    watch = _KeyWatch(report)
    try:
        with (
            preserved_jax_state(CONFIG_NAMES),
            _random_calls_followed(report),
            jit_calls.observing_calls(
                watch,
                *also_observe,
                trace_checks=mode,
                call_checks=mode if check_calls else "off",
                on_key_reuse=on_reuse,
                only_user_calls=only_user_calls,
                fast_path=fast_path,
                on_calls_unseen=on_calls_unseen,
            ) as followed,
        ):
            report.followed = followed
            if not followed:  # at least JAX's own checker
                note_own_value("jax_debug_key_reuse", True)
                with jax.debug_key_reuse(True):
                    yield report
            else:
                yield report
    except jax.errors.KeyReuseError as error:
        if not report.reuse:  # raised without passing our observer (e.g. an older JAX)
            report.reuse.append(explain_key_reuse(error))
        mark_explained(error, report)
        raise
    except BaseException as error:
        lines = message_of(error).strip().splitlines()
        report.other_error = f"{type(error).__name__}: {lines[0] if lines else ''}"
        raise
    finally:
        watch.finish()
