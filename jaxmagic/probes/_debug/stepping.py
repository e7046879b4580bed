"""Re-run one call op by op so that it stops at the user's failing line, fast.

The simple core: the call's Python function runs eagerly under ``jax.disable_jit()``
(and ``jax.debug_nans(True)`` for a NaN), so the failing primitive raises at the user's
line in a real Python frame whose locals are concrete arrays. Two things would make
that slow or useless, and are replaced while the call runs (``_jax/loop_patches.py``):

- ``lax.scan`` / ``lax.fori_loop`` would run their body in Python once per step: the
  loop first runs compiled once, recording the first step whose carry or outputs are
  not finite and the carry going into it; only that step then runs op by op.
- ``jax.vmap`` still traces under ``disable_jit`` (its locals are batch tracers): it
  runs compiled once with a per-element finiteness flag, then only the first failing
  element runs, unbatched.

Where a compiled search finds nothing non-finite, its compiled result stands (a NaN
that the step itself masked is then not stopped at: the position says the loop ran
compiled); ``eager=True`` turns both fast paths off.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxmagic._jax.loop_patches import LoopFunctions, loops_replaced, vmap_parts
from jaxmagic.probes._support.rerun.failing_call import FailingCall
from jaxmagic.probes._support.rerun.kept_state import KeptState, kept
from jaxmagic.report import SourceLine
from jaxmagic.usercode.source import innermost_user_line, is_jaxmagic_file


@dataclasses.dataclass
class Step:
    """Where in a loop or a batch the re-run stopped: the user's line that ran the loop or the vmap."""

    kind: str  # "scan" (also fori_loop) or "vmap"
    index: int  # the loop iteration (in the order the loop ran) or the batch element
    size: int  # the loop's length or the batch size
    line: SourceLine | None

    @property
    def text(self) -> str:
        what = "iteration" if self.kind == "scan" else "batch element"
        return f"{what} {self.index} of {self.size} (counted from 0; {self.kind})"


@dataclasses.dataclass
class SteppingLog:
    """What the re-run did: the steps it is inside, compiled runs, loops it ran in full."""

    steps: list[Step] = dataclasses.field(default_factory=list)
    compiled_runs: int = 0
    notes: list[str] = dataclasses.field(default_factory=list)
    put_back: str = ""  # the re-run wrote into the user's objects and they were put back (kept_state)


def all_finite(tree: object, nan_only: bool = False) -> jax.Array:
    """Whether every float leaf is finite - or, ``nan_only``, holds no NaN: under ``jax.debug_nans`` alone an
    inf is no error, and a step that only made one (``log(0)``) would not stop op by op."""
    good = (lambda leaf: ~jnp.isnan(leaf)) if nan_only else jnp.isfinite
    checks = [
        jnp.all(good(leaf))
        for leaf in jax.tree.leaves(tree)
        if hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.inexact)
    ]
    return jnp.all(jnp.stack(checks)) if checks else jnp.array(True)


@contextlib.contextmanager
def _compiled() -> Iterator[None]:
    """The compiled search runs with jit on and no NaN checking (it looks for the NaN itself)."""
    with jax.disable_jit(False), jax.debug_nans(False), jax.debug_infs(False):
        yield


# The compiled searches, kept per user function (weakly: a search holds its function only by a weak
# reference, so nothing of the user's is kept alive) and per loop shape: debugging the same failure again
# compiles nothing new, as JAX keeps its own eager operations compiled.
_SEARCHES: weakref.WeakKeyDictionary[Any, dict[tuple[object, ...], Callable[..., Any]]] = weakref.WeakKeyDictionary()


def _kept(
    function: Callable[..., Any], key: tuple[object, ...], build: Callable[[Callable[..., Any]], Callable[..., Any]]
) -> Callable[..., Any]:
    """``build(call_function)`` jitted, kept for ``function`` under ``key`` when it can be weakly referenced."""
    try:
        reference = weakref.ref(function)
    except TypeError:  # a builtin, a bound method's fresh object: built for this run only
        return jax.jit(build(function))
    searches = _SEARCHES.setdefault(function, {})
    if key not in searches:
        searches[key] = jax.jit(build(lambda *args: reference()(*args)))  # type: ignore[misc]
    return searches[key]


def _scan_search(
    original: Callable[..., Any], f: Callable[..., Any], length: int | None, reverse: bool, nan_only: bool
) -> Callable[[Any, Any], Any]:
    """``scan`` of ``f`` that also carries the first step whose carry or outputs are not finite, and the carry
    that went into it."""

    def searching(state: tuple[Any, Any, Any, Any], x: Any) -> tuple[tuple[Any, Any, Any, Any], Any]:
        carry, step, first, saved = state
        new_carry, y = f(carry, x)
        failed = (first < 0) & ~all_finite((new_carry, y), nan_only)
        saved = jax.tree.map(lambda kept, now: jnp.where(failed, now, kept), saved, carry)
        return (new_carry, step + 1, jnp.where(failed, step, first), saved), y

    def run(init: object, xs: object) -> Any:
        start = (init, jnp.int32(0), jnp.int32(-1), init)
        return original(searching, start, xs, length=length, reverse=reverse)

    return run


def _vmap_search(
    original: Callable[..., Any], fun: Callable[..., Any], in_axes: object, out_axes: object, nan_only: bool
) -> Callable[..., Any]:
    """``vmap`` of ``fun`` that also returns, per element, whether its outputs are all finite."""

    def checked(*element: object) -> tuple[object, jax.Array]:
        out = fun(*element)
        return out, all_finite(out, nan_only)

    return original(checked, in_axes, (out_axes, 0))


class Stepper:
    """The stand-ins for ``scan`` and ``vmap`` during one re-run, and what they recorded."""

    def __init__(self, fast: bool, nan_only: bool = False) -> None:
        self.fast = fast
        self.nan_only = nan_only  # the failure looked for is a NaN (jax.debug_nans alone): an inf is no failure
        self.log = SteppingLog()
        self.original: LoopFunctions | None = None
        self.call_line: SourceLine | None = None  # the re-run call's own line, for a loop it calls directly

    @contextlib.contextmanager
    def installed(self) -> Iterator[SteppingLog]:
        with loops_replaced(self.scan, self.vmap) as originals:
            self.original = originals
            yield self.log

    # -- scan ------------------------------------------------------------------------------------
    def scan(
        self,
        f: Callable[..., Any],
        init: object,
        xs: object = None,
        length: int | None = None,
        reverse: bool = False,
        unroll: int | bool = 1,
        **options: Any,
    ) -> object:
        __tracebackhide__ = True

        assert self.original is not None
        original = self.original.scan
        if not self.fast or not jax.config.jax_disable_jit or options:
            return original(f, init, xs, length=length, reverse=reverse, unroll=unroll, **options)
        caller = sys._getframe(1)
        line = self.call_line if is_jaxmagic_file(caller.f_code.co_filename) else innermost_user_line(caller)
        try:
            final, ys, first, carry_in = self._search_scan(original, f, init, xs, length, reverse)
        except Exception as error:  # the search itself failed: the loop runs op by op, as it would have
            self.log.notes.append(f"the loop at {where(line)} ran op by op: its compiled search failed ({error})")
            return original(f, init, xs, length=length, reverse=reverse, unroll=unroll)
        size = int(length) if length is not None else int(jax.tree.leaves(xs)[0].shape[0])
        if first < 0:
            self.log.notes.append(f"the loop at {where(line)} ran compiled: no step made a NaN or inf")
            return final, ys
        index = size - 1 - first if reverse else first
        x_in = None if xs is None else jax.tree.map(lambda leaf: leaf[index], xs)
        self.log.steps.append(Step("scan", first, size, line))
        f(carry_in, x_in)  # the failing step, op by op: expected to raise at the user's line
        self.log.steps.pop()
        self.log.notes.append(
            f"step {first} of the loop at {where(line)} did not fail op by op: the whole loop ran op by op"
        )
        return original(f, init, xs, length=length, reverse=reverse, unroll=unroll)

    def _search_scan(
        self,
        original: Callable[..., Any],
        f: Callable[..., Any],
        init: object,
        xs: object,
        length: int | None,
        reverse: bool,
    ) -> tuple[object, object, int, object]:
        """One compiled run: the final carry, the outputs, the first step whose carry or outputs are not
        finite (-1 if none) and the carry that went into it."""

        key = ("scan", length, reverse, self.nan_only)
        run = _kept(f, key, lambda body: _scan_search(original, body, length, reverse, self.nan_only))
        with _compiled():
            (final, _, first, carry_in), ys = run(init, xs)
        self.log.compiled_runs += 1
        return final, ys, int(first), carry_in

    # -- vmap ------------------------------------------------------------------------------------
    def vmap(
        self, fun: Callable[..., Any], in_axes: object = 0, out_axes: object = 0, **options: Any
    ) -> Callable[..., Any]:
        assert self.original is not None
        original = self.original.vmap
        batched = original(fun, in_axes, out_axes, **options)

        def stepped(*args: object, **kwargs: object) -> object:
            __tracebackhide__ = True

            if not self.fast or not jax.config.jax_disable_jit or kwargs or options:
                return batched(*args, **kwargs)
            return self.run_vmapped(fun, in_axes, out_axes, args, line=innermost_user_line(sys._getframe(1)))

        return stepped

    def run_vmapped(
        self,
        fun: Callable[..., Any],
        in_axes: object,
        out_axes: object,
        args: tuple[object, ...],
        line: SourceLine | None,
    ) -> object:
        """``vmap(fun, in_axes, out_axes)(*args)``: compiled with a finiteness flag per element, then the first
        element that is not finite op by op, unbatched."""
        __tracebackhide__ = True

        assert self.original is not None
        original = self.original.vmap
        axes = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
        if len(axes) != len(args) or not all(a is None or isinstance(a, int) for a in axes):
            self.log.notes.append(f"the vmap at {where(line)} ran as JAX runs it: its in_axes are a pytree")
            return original(fun, in_axes, out_axes)(*args)

        axes_key = ("vmap", repr(in_axes), repr(out_axes), self.nan_only)
        try:
            search = _kept(fun, axes_key, lambda body: _vmap_search(original, body, in_axes, out_axes, self.nan_only))
            with _compiled():
                outs, finite = search(*args)
        except Exception as error:
            self.log.notes.append(f"the vmap at {where(line)} ran as JAX runs it: its compiled search failed ({error})")
            return original(fun, in_axes, out_axes)(*args)
        self.log.compiled_runs += 1
        failing = np.flatnonzero(~np.asarray(finite))
        if not failing.size:
            self.log.notes.append(f"the vmap at {where(line)} ran compiled: no element made a NaN or inf")
            return outs
        element = int(failing[0])
        size = int(np.asarray(finite).shape[0])
        one = [
            arg if axis is None else jax.tree.map(lambda leaf, a=axis: leaf.take(element, axis=a), arg)
            for arg, axis in zip(args, axes)
        ]
        self.log.steps.append(Step("vmap", element, size, line))
        fun(*one)  # the failing element, unbatched and op by op: expected to raise at the user's line
        self.log.steps.pop()
        self.log.notes.append(f"element {element} of the vmap at {where(line)} did not fail alone: all ran batched")
        return original(fun, in_axes, out_axes)(*args)


def where(line: SourceLine | None) -> str:
    return f"`{line.code}` ({line.where})" if line is not None else "a line of JAX's"


def run_call(
    call: FailingCall,
    *,
    nan_check: bool,
    inf_check: bool,
    key_check: bool = False,
    fast: bool = True,
    line: SourceLine | None = None,
) -> tuple[BaseException | None, SteppingLog]:
    """Run ``call()`` op by op (NaN/inf/key-reuse checking as asked) with the fast loop and vmap stand-ins; return the
    exception it raised (None if it finished) and the stepping log."""
    # The compiled searches look for a NaN or an inf; any other error is left to run op by op, where it raises.
    fast = fast and (nan_check or inf_check)
    stepper = Stepper(fast, nan_only=nan_check and not inf_check)
    stepper.call_line = line
    parts = vmap_parts(call.function) if fast else None
    with contextlib.ExitStack() as stack:
        stack.enter_context(jax.disable_jit())
        if nan_check:
            stack.enter_context(jax.debug_nans(True))
        if inf_check:
            stack.enter_context(jax.debug_infs(True))
        if key_check:  # a KeyReuseError: JAX's checker stops at the second use, op by op
            stack.enter_context(jax.debug_key_reuse(True))
        log = stack.enter_context(stepper.installed())
        # the re-run executes the call for real: a stateful library's jit wrapper (nnx.jit) would apply its
        # update to the user's objects a second time; they are put back after it (kept_state)
        kept_objects = KeptState()
        stack.callback(lambda: setattr(log, "put_back", kept_objects.note))  # runs after kept's own exit
        kept_objects = stack.enter_context(kept(call.function, [v for _, v in call.args], call.kwargs))
        try:
            assert stepper.original is not None
            if fast and call.function is stepper.original.scan:  # `lax.scan(body, ...)` evaluated before the swap
                stepper.scan(*(v for _, v in call.args), **call.kwargs)
            elif parts is not None and not call.kwargs:  # the call itself is a vmapped function
                stepper.run_vmapped(parts.function, parts.in_axes, parts.out_axes, tuple(v for _, v in call.args), line)
            else:
                call()
        except Exception as error:
            return error, log
    return None, log
