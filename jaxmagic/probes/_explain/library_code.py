"""A tracer error raised in a library's own code, traced from the user's line: the fix is in the library's terms.

``jax.jit(opt.init)(params)`` with ``opt = optax.inject_hyperparams(optax.adafactor)(learning_rate=0.1)``
raises TracerBoolConversionError in Optax's ``_factored_dims`` (``if shape[d] < min_dim_size_to_factor``):
the ``if`` is the library's, not the user's, so no rewrite of the user's line (``jnp.where``, ``lax.cond``)
applies (google-deepmind/optax#412). What the library needs is a Python value where it got a traced one,
and only the user's way into the library can give it that:

* the value is a hyperparameter ``optax.inject_hyperparams`` made an array (its ``numeric_hps``): the library's
  own option keeps it a Python value - ``static_args=('min_dim_size_to_factor',)`` - tried by tracing the
  library's ``init`` rebuilt with it under ``jax.eval_shape`` on the shapes of the call's arguments (Optax's
  code only; nothing of the user's runs);
* otherwise the report names the library's function and line and the traced names there, and says to pass a
  Python value (a static argument) where the user's line hands it to the library, untried.

Nothing of a library is imported: the objects are the ones on the failing stack.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from typing import Any

import jax

from jaxmagic.probes._support.calls.library_calls import library_called, package_of
from jaxmagic.probes._support.fixes.fix import Fix
from jaxmagic.report import SourceLine
from jaxmagic.report.wording import error_line
from jaxmagic.usercode.source import code_kind, is_user_file, source_line

_INJECT_MODULE = "optax.schedules._inject"  # where optax.inject_hyperparams' init_fn / update_fn live


@dataclasses.dataclass
class LibraryRaise:
    """Where in a library's code a tracer error was raised, below the user's innermost line."""

    line: SourceLine  # the library's line that raised
    library: str  # its package: "optax"
    called: str  # the public callable the user's line reached first ("" when none has a public name)
    traced: list[str]  # the names bound to tracers in the raising frame


def library_raise(tb: types.TracebackType | None) -> LibraryRaise | None:
    """The library frame that raised, when the traceback's innermost frames after the user's last one are a
    library's (JAX's own frames between them are skipped); None when the user's code or JAX's raised."""
    frames: list[types.FrameType] = []
    while tb is not None:
        frames.append(tb.tb_frame)
        tb = tb.tb_next
    last_user = max((i for i, f in enumerate(frames) if is_user_file(f.f_code.co_filename)), default=None)
    inner = frames[last_user + 1 :] if last_user is not None else []
    library = [f for f in inner if code_kind(f.f_code.co_filename) == "library"]
    # the innermost frame that is not JAX's own (its __bool__, __index__, __array__ on the tracer raised)
    raising = next((f for f in reversed(inner) if code_kind(f.f_code.co_filename) != "jax"), None)
    if raising is None or not library or library[-1] is not raising:
        return None
    code = raising.f_code
    tracer = _tracer_class()
    traced = [name for name, value in raising.f_locals.items() if tracer is not None and isinstance(value, tracer)]
    called = library_called([(f.f_code.co_filename, f.f_code.co_qualname) for f in library])
    found = LibraryRaise(
        line=source_line(code.co_filename, raising.f_lineno, code.co_qualname),
        library=package_of(code.co_filename),
        called=called,
        traced=traced,
    )
    del frames, inner, library, raising
    return found


def library_fixes(found: LibraryRaise, tb: types.TracebackType | None) -> list[Fix]:
    """The fixes of a tracer error in a library's code: the library's own option where one is known and was
    tried, else a Python value where the user hands it to the library (untried)."""
    injected = _inject_static_fix(found, tb)
    if injected is not None:
        return [injected]
    names = ", ".join(f"`{n}`" for n in found.traced) or "a value"
    where = f"`{found.called}`" if found.called else f"{found.library}'s code"
    return [
        Fix(
            f"a Python value for {names} where your line hands it to {where}",
            f"{found.library}'s `{found.line.function}` ({found.line.where}) needs {names} as a Python value, and "
            "it got a traced one: pass a Python number (a static argument of the function you jit, or the "
            "library's own option for static values) rather than an array",
            "suggestion: not tried (the code that needs it is the library's)",
        )
    ]


def _inject_static_fix(found: LibraryRaise, tb: types.TracebackType | None) -> Fix | None:
    """``static_args`` for a hyperparameter ``optax.inject_hyperparams`` made an array and the inner
    transformation needs as a Python value, tried with ``jax.eval_shape`` of the rebuilt ``init``."""
    frame = _frame_in(tb, _INJECT_MODULE, "init_fn")
    if frame is None:
        return None
    local = frame.f_locals
    factory, numeric = local.get("inner_factory"), local.get("numeric_hps")
    params = local.get("params")
    other, scheduled = local.get("other_hps") or {}, local.get("sched_hps") or {}
    del frame, local
    names = [n for n in found.traced if isinstance(numeric, dict) and n in numeric]
    optax = sys.modules.get("optax")
    if not names or factory is None or optax is None or not isinstance(numeric, dict):
        return None
    public = _public_factory(optax, factory)
    static = "(" + ", ".join(repr(n) for n in names) + ("," if len(names) == 1 else "") + ")"
    use = f"optax.inject_hyperparams({public}, static_args={static})(...)"
    when = (
        f"inject_hyperparams makes every number it is given an array (to change it during training); "
        f"{public}'s `{found.line.function}` needs {', '.join(f'`{n}`' for n in names)} as a Python number "
        "(a shape decision): keep it static, with the same hyperparameters as before"
    )
    try:
        rebuilt = optax.inject_hyperparams(factory, static_args=tuple(names))(**numeric, **other, **scheduled)
        shapes = jax.tree.map(lambda leaf: jax.ShapeDtypeStruct(leaf.shape, leaf.dtype), params)
        jax.eval_shape(jax.jit(rebuilt.init), shapes)
    except Exception as failure:  # the trial's outcome is the fix's evidence
        return Fix(use, when, f"checked: still fails - it raised {error_line(failure)}")
    return Fix(
        use,
        when,
        "checked: its init traces under jax.jit on the shapes of your parameters (jaxmagic traced Optax's "
        "init with jax.eval_shape; nothing of yours ran)",
    )


def _public_factory(optax: types.ModuleType, factory: Any) -> str:
    name = getattr(factory, "__name__", "")
    return f"optax.{name}" if name and getattr(optax, name, None) is factory else name or "inner_factory"


def _frame_in(tb: types.TracebackType | None, module: str, function: str) -> types.FrameType | None:
    while tb is not None:
        frame = tb.tb_frame
        if frame.f_code.co_name == function and frame.f_globals.get("__name__") == module:
            return frame
        tb = tb.tb_next
    return None


def _tracer_class() -> type | None:
    return getattr(getattr(sys.modules.get("jax"), "core", None), "Tracer", None)
