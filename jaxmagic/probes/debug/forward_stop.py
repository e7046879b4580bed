"""Under ``jax.grad``: stop at the forward line whose derivative made the NaN, with the forward values.

A NaN made only by a derivative (``jnp.linalg.norm`` at 0: 0.5/sqrt(0) times 0) is raised by JAX's
backward pass, where no frame of the user's runs: an op-by-op re-run stops in JAX's code. The line
whose derivative it was is known to the NaN producer search (``_support/nan/producer.py``: the
backward equation is attributed to the forward one). This re-runs the forward function alone - the
function the transformation was applied to, or the failing call itself when it takes the gradient
inside (a train step calling ``eqx.filter_value_and_grad``) - op by op, and stops *before* that line runs, so its
frame holds the concrete forward (primal) values the derivative was taken at.
"""

from __future__ import annotations

import sys
from types import FrameType, TracebackType

from jaxmagic._jax.compat import transformed_function
from jaxmagic.probes._support.nan.failing_call import FailingCall
from jaxmagic.probes._support.nan.producer import search
from jaxmagic.report import SourceLine


class StoppedBeforeLine(Exception):
    """Raised into the user's frame just before the forward line runs: its traceback is the stop."""


def forward_line_of_nan(call: FailingCall) -> SourceLine | None:
    """The user's forward line whose derivative made the NaN in ``call`` (a ``jax.grad(f)(...)``), or None."""
    found = search(call.function, [value for _, value in call.args], call.kwargs, source=call.source, with_fixes=False)
    producer = found.producer
    if producer is None or producer.line is None or not (producer.derivative or producer.phase == "backward"):
        return None
    return producer.line


def stop_before(call: FailingCall, line: SourceLine) -> tuple[TracebackType | None, str]:
    """Run the forward function of ``call`` op by op (``jax.disable_jit``) until ``line`` is about to run;
    (the traceback that stops there, "") or (None, why it did not stop)."""
    import jax  # deferred: jaxmagic imports JAX only when a probe runs

    forward = call.forward or transformed_function(call.function)
    if not callable(forward):
        # the gradient is taken inside the call (a train step calling `jax.grad`, `eqx.filter_value_and_grad`,
        # `nnx.value_and_grad`): the call itself reaches the forward line, while that transformation traces it
        forward = call.function
    if not callable(forward):
        return None, "the function the gradient is taken of could not be told"
    target = (line.filename, line.lineno)

    def local(frame: FrameType, event: str, _arg):
        if event == "line" and (frame.f_code.co_filename, frame.f_lineno) == target:
            raise StoppedBeforeLine(f"stopped before {line.code}")
        return local

    def calls(frame: FrameType, event: str, _arg):
        # only frames of the line's file are followed line by line: everything else runs at full speed
        return local if event == "call" and frame.f_code.co_filename == line.filename else None

    previous = sys.gettrace()
    try:
        with jax.disable_jit():
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
