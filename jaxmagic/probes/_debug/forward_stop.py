"""Under ``jax.grad``: stop at the forward line whose derivative made the NaN, with the forward values.

A NaN made only by a derivative (``jnp.linalg.norm`` at 0: 0.5/sqrt(0) times 0) is raised by JAX's
backward pass, where no frame of the user's runs: an op-by-op re-run stops in JAX's code. The line
whose derivative it was is known to the NaN producer search (``_nans/search/producer.py``: the
backward equation is attributed to the forward one). This re-runs the forward function alone - the
function the transformation was applied to, or the failing call itself when it takes the gradient
inside (a train step calling ``eqx.filter_value_and_grad``) - op by op, and stops *before* that line runs, so its
frame holds the concrete forward (primal) values the derivative was taken at.

Under ``jax.vmap`` that frame would hold batch tracers (vmap traces even under ``disable_jit``), and the
NaN of one element's derivative would be no element's. So ``jax.vmap`` is replaced while the forward
function runs (``_jax/loop_patches.py``): the vmapped function's derivative is evaluated per element,
compiled once (``jax.vjp`` of the element's outputs with a cotangent of ones: a derivative holding NaN or
inf is not finite for any cotangent), and only the first element whose derivative is not finite runs,
unbatched, to the line - its values are that element's.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxmagic._jax.jit_internals import transformed_function
from jaxmagic._jax.loop_patches import LoopFunctions, loops_replaced
from jaxmagic.probes._debug.stepping import Step, SteppingLog, all_finite, where
from jaxmagic.probes._nans.search.producer import search
from jaxmagic.probes._support.rerun.failing_call import FailingCall
from jaxmagic.report import SourceLine
from jaxmagic.usercode.source import innermost_user_line

if TYPE_CHECKING:
    from _typeshed import TraceFunction


class StoppedBeforeLine(Exception):
    """Raised into the user's frame just before the forward line runs: its traceback is the stop."""


def forward_line_of_nan(call: FailingCall) -> SourceLine | None:
    """The user's forward line whose derivative made the NaN in ``call`` (a ``jax.grad(f)(...)``), or None."""
    found = search(call.function, [value for _, value in call.args], call.kwargs, source=call.source, with_fixes=False)
    producer = found.producer
    if producer is None or producer.line is None or not (producer.derivative or producer.phase == "backward"):
        return None
    return producer.line


class _DerivativeElements:
    """The stand-in for ``jax.vmap`` while the forward function runs: the first element whose derivative is not
    finite runs alone, unbatched (``log`` says which); without one, the vmap runs as JAX runs it."""

    def __init__(self, log: SteppingLog) -> None:
        self.log = log
        self.original: LoopFunctions | None = None

    def vmap(
        self, fun: Callable[..., Any], in_axes: object = 0, out_axes: object = 0, **options: Any
    ) -> Callable[..., Any]:
        assert self.original is not None
        batched = self.original.vmap(fun, in_axes, out_axes, **options)

        def stepped(*args: object, **kwargs: object) -> object:
            __tracebackhide__ = True
            line = innermost_user_line(sys._getframe(1))
            axes = in_axes if isinstance(in_axes, (tuple, list)) else (in_axes,) * len(args)
            if kwargs or options or len(axes) != len(args) or not all(a is None or isinstance(a, int) for a in axes):
                return batched(*args, **kwargs)
            tracing = sys.gettrace()
            sys.settrace(None)  # the search traces the function: the line it reaches there is no stop
            try:
                finite = np.asarray(self._search(fun, in_axes, out_axes)(*args))
            except Exception as error:  # the search itself failed: the vmap runs as JAX runs it
                self.log.notes.append(f"the vmap at {where(line)} ran batched: its derivative search failed ({error})")
                return batched(*args)
            finally:
                sys.settrace(tracing)
            self.log.compiled_runs += 1
            failing = np.flatnonzero(~finite)
            if not failing.size:
                self.log.notes.append(f"the vmap at {where(line)}: no element's derivative was found not finite")
                return batched(*args)
            element = int(failing[0])
            one = [arg if axis is None else _take(arg, element, axis) for arg, axis in zip(args, axes)]
            self.log.steps.append(Step("vmap", element, int(finite.shape[0]), line))
            self.log.notes.append(
                f"element {element} of the vmap at {where(line)} is the first whose derivative is not finite (each "
                "element's derivative was evaluated compiled, with a cotangent of ones): it alone ran to the line, "
                "unbatched, so the values shown are its own"
            )
            fun(*one)  # the line stops it (StoppedBeforeLine) before anything runs batched again
            self.log.steps.pop()  # it ran to its end without reaching the line: the batch goes on as JAX runs it
            self.log.notes.pop()
            return batched(*args)

        return stepped

    def _search(self, fun: Callable[..., Any], in_axes: object, out_axes: object) -> Callable[..., Any]:
        """``jit(vmap(element -> whether its outputs and their derivative are finite))``."""
        assert self.original is not None

        def checked(*element: object) -> jax.Array:
            leaves, tree = jax.tree.flatten(element)
            varying = [i for i, leaf in enumerate(leaves) if jnp.issubdtype(jnp.result_type(leaf), jnp.inexact)]

            def of(*values: object) -> object:
                filled = list(leaves)
                for i, value in zip(varying, values):
                    filled[i] = value
                return fun(*jax.tree.unflatten(tree, filled))

            out, pullback = jax.vjp(of, *(leaves[i] for i in varying))
            cotangent = jax.tree.map(
                lambda o: (
                    jnp.ones_like(o) if jnp.issubdtype(o.dtype, jnp.inexact) else np.zeros(o.shape, jax.dtypes.float0)
                ),
                out,
            )
            return all_finite((out, pullback(cotangent)))

        return jax.jit(self.original.vmap(checked, in_axes, 0))


def _take(arg: object, element: int, axis: int) -> object:
    return jax.tree.map(lambda leaf: leaf.take(element, axis=axis), arg)


def stop_before(
    call: FailingCall, line: SourceLine, log: SteppingLog | None = None
) -> tuple[TracebackType | None, str]:
    """Run the forward function of ``call`` op by op (``jax.disable_jit``) until ``line`` is about to run;
    (the traceback that stops there, "") or (None, why it did not stop). A ``jax.vmap`` on the way runs only
    its first element whose derivative is not finite (``log``: which, and how it was found)."""
    forward = call.forward or transformed_function(call.function)
    if not callable(forward):
        # the gradient is taken inside the call (a train step calling `jax.grad`, `eqx.filter_value_and_grad`,
        # `nnx.value_and_grad`): the call itself reaches the forward line, while that transformation traces it
        forward = call.function
    if not callable(forward):
        return None, "the function the gradient is taken of could not be told"
    target = (line.filename, line.lineno)

    def local(frame: FrameType, event: str, _arg: object) -> TraceFunction:
        if event == "line" and (frame.f_code.co_filename, frame.f_lineno) == target:
            raise StoppedBeforeLine(f"stopped before {line.code}")
        return local

    def calls(frame: FrameType, event: str, _arg: object) -> TraceFunction | None:
        # only frames of the line's file are followed line by line: everything else runs at full speed
        return local if event == "call" and frame.f_code.co_filename == line.filename else None

    elements = _DerivativeElements(log if log is not None else SteppingLog())
    previous = sys.gettrace()
    try:
        with jax.disable_jit(), loops_replaced(jax.lax.scan, elements.vmap) as originals:
            elements.original = originals
            sys.settrace(calls)
            try:
                forward(*(value for _, value in call.args), **call.kwargs)
            finally:
                sys.settrace(previous)
    except StoppedBeforeLine as stop:
        return stop.__traceback__, ""
    except Exception as error:  # the forward function failed before reaching the line
        return None, f"the forward function raised before reaching it: {type(error).__name__}: {error}"
    return None, "the forward function finished without reaching that line"
