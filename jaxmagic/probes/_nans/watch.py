"""Notice the first NaN a cell produces without stopping the cell, then explain it with the NaN probe.

``%%jax_nans`` stops at the first NaN: right when hunting one NaN, wrong for
``%%jax_doctor``, which must see everything else the cell does too (a NaN at
step 0 of a training loop would hide the recompilation at every step and the
key that never changes). So the doctor *watches*: it sees every call of a
jitted function and every eager operation (``jaxmagic._jax.jit_calls``) and looks
at their float results for NaN. The first call whose results hold a NaN while
its arguments held none produced it; later calls only pass it on.

A call's results are never read as the call returns: on an accelerator a
small verdict program of the watch's own is dispatched behind the call and read
once it is ready, at a later call or when the cell ends; on the CPU (and for the
first call of each signature) the results are read at the next call, when they
are normally computed already, or when the cell ends (``flush``). See
``pending_looks``: a look keeps the call's identity and number beside its
verdict, so a NaN read later is still told at the call that made it.

To name the operation and the line, that one call - not the cell - is run once
more after the cell, under the NaN probe (``jax.debug_nans``, its producer
search included: the line inside a scan body, the iteration, the values), with
the same arguments: a jitted function is
pure, so this repeats nothing the user would mind (its debug prints are
discarded). The call is rebuilt from JAX's dispatch frame (the function, its
jit options, the call's arguments) and kept only until then; a call whose
arguments were donated is repeated with the copies described below, without
donation. Eager operations need no re-run:
the primitive and the line are known when the NaN appears.

Donated arguments (``jax.jit(step, donate_argnums=(0, 1))``, how training
steps are written) are deleted by the call that gets them, so the call could
not be repeated and its results, donated to the next call, could not be read.
While the watch is on it keeps a copy of what a later repeat needs, for calls of
functions that donate only, within ``copy_limit`` bytes (``DONATED_COPY_LIMIT``,
64 MB) per call: the donated arguments of a call on jit's Python path (its
first call, copied before it runs), and the results of each call looked at
whose next call will be looked at too (a later call's donated arguments are the
earlier call's results: ``w, opt = step(w, opt, x)``), read for NaN there too.
On a fast loop the watch looks at a share of the calls: a copy for a next call
it would not look at was a program and a device copy of the params for nothing
(1.13x a donating MLP loop on a TPU v5e, issue 60 item 3). A donated argument it
holds no copy of (made before the cell and given to a call already compiled,
given by a call not looked at, or over the limit) is named in the note that says
why the call was not repeated.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from typing import TypeVar

import jax
import numpy as np

from jaxmagic._jax import call_sampling, finite_flags, jit_calls, jit_internals, own_programs
from jaxmagic._jax.types import Value
from jaxmagic.probes._nans.nonfinite import is_inexact
from jaxmagic.probes._nans.pending_looks import JitLocals, KeptCopies, PendingLook, PendingLooks, host_array
from jaxmagic.probes._support.calls.call_site import call_site
from jaxmagic.probes._support.rerun.failing_call import FailingCall
from jaxmagic.report import SourceLine
from jaxmagic.report.wording import format_bytes
from jaxmagic.usercode.source import whole_expression


@dataclasses.dataclass
class NanSighting:
    """The first call that produced a NaN, and how many calls returned one."""

    function: str  # the jitted function ("train_step") or the eager primitive ("log")
    jitted: bool
    call_number: int  # 1 for the function's first call in the cell
    # Calls of the function not looked at just before this one (first, last), when a watch that looks at a
    # share of the calls skipped some: one of them may have made a NaN first (or the one in the arguments).
    unread_before: tuple[int, int] | None = None
    line: SourceLine | None = None  # the user's line that made the call
    leaves: list[str] = dataclasses.field(default_factory=list)  # which outputs held NaN: "output 0 (64,)"
    came_in: bool = False  # its arguments already held a NaN (made before the cell or outside JAX)
    calls_with_nan: int = 0  # every call that returned a NaN, this one included
    call_source: str = ""  # the re-run call, e.g. "step_fn(params, X, Y, step_key, step)"
    rerun_note: str = ""
    donated: list[str] = dataclasses.field(
        default_factory=list
    )  # donated arguments the re-run used the watch's copies of


def _float_has_nan(value: object) -> bool:
    """True when a float array holds a NaN (call only for float values; see ``_is_float``)."""
    try:
        return bool(np.isnan(host_array(value)).any())
    except Exception:  # not readable here (deleted, on another process)
        return False


_float_dtypes: dict[object, bool] = {}  # dtype -> a float one


def _is_float(value: object) -> bool:
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return False
    try:
        return _float_dtypes[dtype]
    except (KeyError, TypeError):
        pass
    floating = is_inexact(dtype)
    try:
        _float_dtypes[dtype] = floating
    except TypeError:
        pass
    return floating


DONATED_COPY_LIMIT = 64 * 2**20  # bytes of one call's donated arguments (or results) the watch copies


# Why a donating call's arguments were not copied, when the watch looked at a share of the calls
NOT_LOOKED_AT_BEFORE = (
    "the call before it, whose results it was given, was not looked at (on fast loops the watch looks at a share "
    "of the calls, to cost a few percent)"
)
NOT_EXPECTED = (
    "the watch copies a donating call's results only when it expects to look at the next call (on fast loops it "
    "looks at a share of the calls, to cost a few percent), and it did not expect this one"
)


def _nbytes(leaves: Iterable[object]) -> int:
    return sum(int(getattr(leaf, "nbytes", 0) or 0) for leaf in leaves)


def _deleted(value: jax.Array) -> bool:
    try:
        return bool(value.is_deleted())
    except Exception:
        return False


_Tree = TypeVar("_Tree")  # a pytree, given back with the same structure


class NanWatch(jit_calls.CallObserver):
    """A call observer that remembers the first NaN-producing call (see the module docstring).

    A call's results are looked at without waiting for them (``pending_looks``):
    a verdict the device computes, read once ready, or on the CPU the results
    read at the next call. A look not read yet holds its call's arguments (to
    replay a NaN-making call), a look read on the host its results too.
    """

    def __init__(self, copy_limit: int = DONATED_COPY_LIMIT) -> None:
        self.sighting: NanSighting | None = None
        # the first call whose results held inf and no NaN, while no NaN was seen: a NaN watch that stays quiet
        # about it would let the doctor and the watch say OK on a result %%jax_nans reports (jax-ml/jax#37763)
        self.inf_sighting: NanSighting | None = None
        self.copy_limit = copy_limit
        self._pending_rerun: FailingCall | None = None
        self._looks = PendingLooks()  # the looks not read yet, oldest first
        self._platform = ""  # where the first results looked at live ("cpu", "tpu"): read them there or not
        self._signatures: set[finite_flags.Signature] = (
            set()
        )  # results' signatures looked at once on the host (no verdict program)
        self._calls: dict[str, int] = {}  # name -> calls seen
        self._looked_at: dict[str, int] = {}  # name -> the number of its last call seen
        self._before_call: list[tuple[object, jax.Array]] = []  # (donated argument, its copy) of the call about to run
        self._results: list[
            tuple[object, jax.Array]
        ] = []  # (result, its copy) of the last call of a function that donates
        self._not_copied = ""  # why the last call's donated arguments or results were not copied

    def before_donation(self, args: Sequence[object], kwargs: dict[str, object] | None, jit_info: object) -> None:
        """A call of a function that donates is about to run on jit's Python path: copy what it donates."""
        if self.sighting is not None:
            return
        leaves = [leaf for _, leaf in jit_calls.donated_leaves(jit_info, args, kwargs) if not _deleted(leaf)]
        size = _nbytes(leaves)
        if size > self.copy_limit:
            self._before_call, self._not_copied = (
                [],
                f"its donated arguments ({format_bytes(size)}) are over the {format_bytes(self.copy_limit)} the watch copies",
            )
            return
        self._before_call = list(zip(leaves, own_programs.copied(leaves)))

    @property
    def calls_seen(self) -> int:
        """Calls watched so far (read by a live view from another thread)."""
        return sum(list(self._calls.values()))

    def before(self, name: str, is_jit: bool, args: tuple[object, ...], params: dict[str, object]) -> None:
        self._read_looks(wait=False)

    def after(
        self, name: str, is_jit: bool, args: tuple[object, ...], params: dict[str, object], outputs: list[object]
    ) -> None:
        self._calls[name] = counted = self._calls.get(name, 0) + 1
        number = (jit_calls.call_number() if is_jit else None) or counted
        previous, self._looked_at[name] = self._looked_at.get(name, 0), number
        if self.sighting is not None and self.sighting.calls_with_nan > 1000:
            return  # enough counted
        jit_locals, kept = None, None
        if is_jit and self.sighting is None:
            local = jit_calls.call_locals()
            if local is not None:
                jit_locals = (local.get("fun"), local.get("jit_info"), local.get("args"), local.get("kwargs"))
                if jit_calls.donates(jit_locals[1]):
                    kept = self._keep_donated(jit_locals, outputs, number - previous == 1)
        self._before_call = []
        indices = [i for i, out in enumerate(outputs) if _is_float(out)]
        if not indices:
            return
        floats = [outputs[i] for i in indices]
        frame, lineno = call_site()  # kept as words, not the frame: a frame keeps its locals alive
        site = (frame.f_code.co_filename, lineno, frame.f_code.co_name) if frame is not None else None
        look = PendingLook(name, is_jit, number, previous, site, indices, args, jit_locals, kept)
        if is_jit and self._on_device(floats):
            signature = finite_flags.signature_of(floats)
            if signature in self._signatures or finite_flags.has_verdict_program(signature):
                with jit_calls.reads_allowed():  # its copy to the host is ours, not a transfer of the user's
                    look.codes = finite_flags.nonfinite_codes(floats, signature)
                look.shapes = [tuple(getattr(out, "shape", ())) for out in floats]
            else:  # its first call: read on the host, no program compiled for a function called once
                self._signatures.add(signature)
        if look.codes is None:  # read on the host: its results, or the copies of those a later call donates
            look.outputs = [kept["results"].get(id(out), out) for out in floats] if kept is not None else floats
        looks = self._looks
        looks.add(look)
        if looks.over_limit():  # the verdicts there already first, in any order: a clean one frees its place
            looks.read_ready()
        while looks.over_limit():  # the device is far behind: wait for the oldest look
            self._read(looks.take(wait=True))

    def _on_device(self, floats: list[Value]) -> bool:
        """Whether verdicts are the device's: where looks are deferred (``call_sampling.looks_deferred``, by
        default anywhere but the CPU)."""
        if not self._platform:  # read once: the first results looked at say where the cell computes
            self._platform = call_sampling.platform_of(floats)
        return call_sampling.looks_deferred(self._platform)

    def _keep_donated(self, jit_locals: JitLocals, outputs: list[object], after_the_last_look: bool) -> KeptCopies:
        """For a call of a function that donates: the copies of its donated arguments (by the id of the
        deleted array), and copies of its results (its next call's donated arguments) when the next call will
        be looked at (``jit_calls.next_call_observed``: on a fast loop the watch looks at a share of the calls,
        and a copy no look uses was a program and a device copy of the params for nothing - issue 60 item 3).
        ``after_the_last_look``: the call before it was looked at (its results copied, if they were)."""
        _, info, args, kwargs = jit_locals
        held = self._before_call + self._results
        copies: KeptCopies = {"arguments": {}, "missing": [], "results": {}, "why": ""}
        for argument, leaf in jit_calls.donated_leaves(info, args, kwargs):
            copy = next((c for original, c in held if original is leaf), None)
            if copy is not None:
                copies["arguments"][id(leaf)] = copy
            elif _deleted(leaf):
                copies["missing"].append(argument)
        copies["why"] = self._not_copied if after_the_last_look else NOT_LOOKED_AT_BEFORE
        self._not_copied = ""
        arrays = [out for out in outputs if hasattr(out, "is_deleted")]
        size = _nbytes(arrays)
        if size > self.copy_limit:
            self._results = []
            self._not_copied = f"the results of the call before it ({format_bytes(size)}) are over the {format_bytes(self.copy_limit)} the watch copies"
        elif not jit_calls.next_call_observed():
            self._results = []
            self._not_copied = NOT_EXPECTED
        else:
            self._results = list(zip(arrays, own_programs.copied(arrays)))
            copies["results"] = {id(original): copy for original, copy in self._results}
        return copies

    def flush(self) -> None:
        """Read every look not read yet, waiting for what it is about."""
        self._read_looks(wait=True)

    def _read_looks(self, wait: bool) -> None:
        """Read the looks whose verdicts are ready (all of them with ``wait``), oldest first."""
        while (look := self._looks.take(wait)) is not None:
            self._read(look)

    def _read(self, look: PendingLook | None) -> None:
        """What one look found: the first call whose results held a NaN (or inf), counted after it."""
        if look is None:
            return
        kinds = look.kinds()
        bad = [i for i, kind in enumerate(kinds) if kind == "nan"]
        if not bad:
            if self.inf_sighting is None and self.sighting is None:
                infinite = [i for i, kind in enumerate(kinds) if kind == "inf"]
                if infinite:
                    self.inf_sighting = NanSighting(
                        function=look.name,
                        jitted=look.is_jit,
                        call_number=look.number,
                        line=look.line,
                        leaves=[f"output {look.indices[i]} {look.shape(i)}" for i in infinite[:4]],
                    )
            return
        if self.sighting is not None:
            self.sighting.calls_with_nan += 1
            return
        kept = look.kept
        args = [kept["arguments"].get(id(a), a) for a in look.args] if kept is not None else look.args
        with jit_calls.reads_allowed():  # our reads are not the user's transfers
            came_in = any(_is_float(a) and _float_has_nan(a) for a in args)
        number, previous = look.number, look.previous
        sighting = NanSighting(
            function=look.name,
            jitted=look.is_jit,
            call_number=number,
            line=look.line,
            leaves=[f"output {look.indices[i]} {look.shape(i)}" for i in bad[:4]],
            came_in=came_in,
            calls_with_nan=1,
            unread_before=(previous + 1, number - 1) if number - previous > 1 else None,
        )
        self.sighting = sighting
        if look.is_jit and not came_in:
            self._keep_rerun(sighting, look)
        self._results = self._before_call = []  # nothing more is re-run: the copies are not needed

    def _keep_rerun(self, sighting: NanSighting, look: PendingLook) -> None:
        """Keep the NaN-making call, rebuilt, for ``take_rerun`` (or say in the sighting why it cannot be)."""
        name, jit_locals, kept = look.name, look.jit_locals, look.kept
        call = _rebuilt_call(name, jit_locals, kept)
        if isinstance(call, str):
            sighting.rerun_note = call
        elif call is None:
            sighting.rerun_note = (
                "The call could not be repeated safely (JAX did not dispatch it from Python), so it was not re-run."
            )
        else:
            if sighting.line is not None:  # named as the user's line wrote it, as %%jax_nans names the statement
                call.source = whole_expression(sighting.line.code, 0, 0, called=name) or call.source
            self._pending_rerun, sighting.call_source = call, call.source
            if kept is not None and jit_locals is not None:
                sighting.donated = sorted({argument for argument, _ in jit_calls.donated_leaves(*jit_locals[1:])})

    def take_rerun(self) -> tuple[NanSighting | None, FailingCall | None]:
        """Flush, then hand over the sighting and the call to re-run (kept no longer here).

        The re-run itself, under the NaN probe, is the doctor's
        (``jaxmagic.probes._nans.sighting.explain_nan_sighting``): a support
        module runs no probe.
        """
        self.flush()
        call, self._pending_rerun = self._pending_rerun, None
        return self.sighting, call


def _rebuilt_call(name: str, jit_locals: JitLocals | None, kept: KeptCopies | None = None) -> FailingCall | str | None:
    """The jitted call, rebuilt from JAX's dispatch frame: the same function, options and arguments.

    JAX's ``cache_miss`` frame holds the user's function, its jit options and
    the call's own arguments (static ones included); ``_cpp_pjit`` makes the
    same jitted function from them, sharing its caches.
    """
    if jit_locals is None:
        return None
    fun, info, args, kwargs = jit_locals
    if fun is None or info is None or args is None:
        return None
    if jit_calls.donates(info):
        # Its donated arguments were deleted by the call: the watch's copies stand in for them, and the
        # re-run donates nothing (the copies stay for the producer search after it).
        if kept is None or kept["missing"]:
            missing = ", ".join(dict.fromkeys(kept["missing"])) if kept else "its donated arguments"
            why = (
                kept["why"]
                if kept and kept["why"]
                else (
                    "they were made before the watch saw a call that could copy them (the first call of a function "
                    "compiled before the cell is copied only after it ran)"
                )
            )
            return (
                f"The call could not be repeated: {missing} of `{name}` (donated: donate_argnums) had been deleted "
                f"by the call, and the watch held no copy, because {why}. So the operation and the line inside "
                "the function are not known; %%jax_nans on the cell finds them."
            )

        def restored(value: _Tree) -> _Tree:
            return jax.tree_util.tree_map(lambda leaf: kept["arguments"].get(id(leaf), leaf), value)

        args, kwargs = restored(tuple(args)), restored(dict(kwargs or {}))
        info = jit_calls.without_donation(info)
        if info is None:
            return None
    jitted = jit_internals.compiled_call(fun, info)
    if jitted is None:
        return None
    return FailingCall(f"{name}(...)", jitted, [(f"argument {i}", a) for i, a in enumerate(args)], dict(kwargs or {}))
