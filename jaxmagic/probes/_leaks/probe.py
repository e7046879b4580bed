"""The leak probe: run code with ``jax.checking_leaks()``, every trace made afresh, and explain
what leaked (``explanations``).

JAX only checks when a trace ends, so a function whose trace is cached is not checked; the probe
makes everything trace afresh (``_jax.retrace``), without clearing caches.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import jax

from jaxmagic._jax import jit_internals
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic._jax.retrace import fresh_traces
from jaxmagic._jax.transform_stack import leak_error_stacks
from jaxmagic.probes._leaks.explanations import explain_unexpected_tracer, fill_leak_report, held_tracers
from jaxmagic.probes._leaks.report import LeakReport
from jaxmagic.probes._leaks.tracers import text
from jaxmagic.probes._support.explained import mark_explained
from jaxmagic.report.wording import error_line, message_of
from jaxmagic.usercode.source import defining_code, is_user_file

CONFIG_NAMES = ("jax_check_tracer_leaks",)
_TRACE_EVENT = "/jax/core/compile/jaxpr_trace_duration"


def _whose_trace() -> str:
    """ "user" or "library": where the function jit is tracing now is defined; "" if the stack does not say."""
    fun = jit_internals.function_being_traced()
    if fun is None:
        return ""
    if jit_internals.is_eager_operation(fun):
        return "library"
    code, _ = defining_code(fun)
    if code is None:
        return ""
    return "user" if is_user_file(code.co_filename) else "library"


@contextlib.contextmanager
def _trace_names(report: LeakReport) -> Iterator[None]:
    def on_event(event: str, duration_secs: float, **kwargs: str | int) -> None:
        if event != _TRACE_EVENT:
            return
        name = str(kwargs.get("fun_name", "?"))
        # Eager primitives (jnp.ones runs broadcast_in_dim as a tiny jit) and jax.numpy's own jitted
        # helpers (_reduce_sum) are JAX's: told by where the traced function is defined.
        whose = _whose_trace()
        if whose == "library":
            report.eager_operations += 1
        elif name == "<unnamed function>":
            report.traced.append("(a callable object)")
        elif name not in report.traced:
            report.traced.append(name if whose == "user" else f"{name} (jaxmagic could not tell whose)")

    jax.monitoring.register_event_duration_secs_listener(on_event)
    try:
        yield
    finally:
        jax.monitoring.unregister_event_duration_listener(on_event)


@contextlib.contextmanager
def leaks(*, namespace: dict[str, object] | None = None, retrace_token: str | None = None) -> Iterator[LeakReport]:
    """Check every trace in the block for leaked tracers, tracing cached functions afresh.

    On a leak JAX's ``Exception("Leaked trace ...")`` propagates unchanged; an
    ``UnexpectedTracerError`` too. The report is filled in before. With
    ``namespace`` (the user's variables) the report names the variables that
    hold leaked tracers. ``retrace_token`` (see ``_jax.retrace.fresh_traces``):
    blocks with the same token share their traces, each checked when made.
    """
    report = LeakReport()
    try:
        with (
            preserved_jax_state(CONFIG_NAMES),
            _trace_names(report),
            fresh_traces(retrace_token) as how,
            leak_error_stacks() as stacks,
            jax.checking_leaks(),
        ):
            report.retrace_method, report.retrace_note = how.method, how.description
            yield report
    except Exception as error:
        try:
            if text.is_leak_message(message_of(error)):
                fill_leak_report(report, error, namespace, stacks[-1] if stacks else None)
            elif isinstance(error, jax.errors.UnexpectedTracerError):
                report.unexpected = explain_unexpected_tracer(error, namespace)
                report.jax_message = message_of(error).strip()
            else:
                report.other_error = error_line(error)
        except Exception as failure:  # never let our analysis hide the user's error
            report.other_error = report.other_error or error_line(error)
            report.retrace_note += f" (jaxmagic could not finish its analysis: {error_line(failure)})"
        mark_explained(error, report)
        raise
    except BaseException as error:
        report.other_error = error_line(error)
        raise
    finally:
        if not report.leaked and not report.unexpected:
            report.held = held_tracers(namespace)
