"""The parts of a traced program JAX's public API does not name: an equation's sub-programs, literals,
source info and name stack, the function a call equation traced, running one equation on values, a
scan's or while's operands, and printing an equation with its jaxpr's variable names.

(see ``runtime.py`` for the rule every module here follows when the private name is gone)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeGuard

from jax._src import core, source_info_util
from jax._src.debugging import inspect_sharding_p
from jax._src.lib.mlir import ir

if TYPE_CHECKING:
    from jax._src.core import JaxprEqn, JaxprPpContext, JaxprPpSettings, Primitive

    from jaxmagic._jax.types import Jaxpr, Literal, Program, Value


def closed_parts(program: Program) -> tuple[Jaxpr, list[Value]]:
    """``(jaxpr, consts)`` of a ``ClosedJaxpr``; an open ``Jaxpr`` (remat's body) has no consts."""
    inner = getattr(program, "jaxpr", None)
    if inner is not None and hasattr(program, "consts"):
        return inner, list(program.consts)
    return program, []


def sub_jaxprs(eqn: JaxprEqn) -> list[Program]:
    """The sub-programs an equation holds in its parameters (scan/while/cond bodies, calls)."""
    return list(core.jaxprs_in_params(eqn.params))


def is_literal(var: object) -> TypeGuard[Literal]:
    """True for a constant written into an equation (a ``Literal``), False for a variable."""
    return isinstance(var, core.Literal)


def jaxpr_types() -> tuple[type, ...]:
    """``Jaxpr`` and ``ClosedJaxpr``: the objects that hold a traced program's constants."""
    return tuple(t for t in (getattr(core, "Jaxpr", None), getattr(core, "ClosedJaxpr", None)) if t)


def called_function(eqn: JaxprEqn) -> tuple[str, str]:
    """``(name, file)`` of the Python function a call equation (``jit``, ``closed_call``) traced, from
    its sub-program's debug info (``("_std", ".../jax/_src/numpy/reductions.py")``); ("", "") if unknown."""
    for program in sub_jaxprs(eqn)[:1]:
        info = getattr(getattr(program, "jaxpr", program), "debug_info", None)
        name = str(getattr(info, "func_name", "") or "")
        filename = str(getattr(info, "func_filename", "") or "")
        return name, filename
    return "", ""


def program_source(jaxpr: Program | None) -> tuple[str, str, int] | None:
    """(function name, file, line) a traced program was made from, from its debug info
    (``func_src_info``: "predict at /path/model.py:12"); None when JAX recorded none."""
    info = getattr(getattr(jaxpr, "jaxpr", jaxpr), "debug_info", None)
    text = str(getattr(info, "func_src_info", "") or "")
    name, at, where = text.partition(" at ")
    filename, _, line = where.rpartition(":")
    if not at or not filename or not line.isdigit():
        return None
    return name, filename, int(line)


def name_stack_text(eqn: JaxprEqn) -> str:
    """The equation's name stack as JAX prints it (``jvp(f)/transpose(jvp(f))``), '' if none."""
    try:
        return str(eqn.source_info.name_stack)
    except Exception:
        return ""


def scope_entry_type() -> type | None:
    """The class of ``named_scope`` entries on a name stack (None in a JAX without it)."""
    try:
        from jax._src import source_info_util

        return getattr(source_info_util, "Scope", None)
    except ImportError:
        return None


def user_context(eqn: JaxprEqn) -> contextlib.AbstractContextManager[None]:
    """A context that makes equations bound inside it carry ``eqn``'s source info and name stack."""
    return source_info_util.user_context(eqn.source_info.traceback, name_stack=eqn.source_info.name_stack)


def bind_equation(eqn: JaxprEqn, values: list[Value]) -> list[Value]:
    """Run one equation on concrete values as ``jax.core.eval_jaxpr`` does; its outputs as a list.

    A jitted call's donation is dropped: the values are the user's own arrays (a probe's re-evaluation
    must not delete them) and are read again when the equation is opened."""
    subfuns, bind_params = _bind_params(eqn)
    if any(bind_params.get("donated_invars", ())):  # a jitted call that donates: its inputs are read again after
        bind_params = {**bind_params, "donated_invars": (False,) * len(bind_params["donated_invars"])}
    with source_info_util.user_context(eqn.source_info.traceback, name_stack=eqn.source_info.name_stack):
        with eqn.ctx.manager:
            out = eqn.primitive.bind(*subfuns, *values, **bind_params)
    return list(out) if eqn.primitive.multiple_results else [out]


def with_params(eqn: JaxprEqn, **params: Any) -> JaxprEqn:
    """``eqn`` with some of its parameters replaced (a dtype widened), for ``bind_equation``; ``eqn`` unchanged."""
    return eqn.replace(params={**eqn.params, **params})


def _bind_params(eqn: JaxprEqn) -> tuple[Sequence[Any], dict[str, Any]]:
    got = eqn.primitive.get_bind_params(eqn.params)
    if isinstance(got, tuple):  # older JAX: (subfuns, params)
        return got
    return (), got


def jaxpr_function(program: Program) -> Callable[..., list[Value]]:
    """A Python function running ``program`` (a ``ClosedJaxpr`` or open ``Jaxpr``) on its inputs, returning
    the list of its outputs; traceable, so it can be jitted or used inside ``lax.scan``."""
    jaxpr, consts = closed_parts(program)

    def run(*args: Value) -> list[Value]:
        return core.eval_jaxpr(jaxpr, consts, *args)

    return run


def scan_operands(eqn: JaxprEqn, args: list[Value]) -> tuple[list[Value], list[Value], list[Value]]:
    """``(consts, carry, xs)`` of a ``scan`` equation's inputs, in the body's input order."""
    params = eqn.params
    if "ft_in" in params:  # JAX >= 0.10: flat trees say which inputs are which
        consts, carry, xs = params["ft_in"].update(list(args)).unpack()
        return list(consts.vals), list(carry.vals), list(xs.vals)
    n_consts, n_carry = params["num_consts"], params["num_carry"]
    return list(args[:n_consts]), list(args[n_consts : n_consts + n_carry]), list(args[n_consts + n_carry :])


def while_operands(eqn: JaxprEqn, args: list[Value]) -> tuple[list[Value], list[Value], list[Value]]:
    """``(cond_consts, body_consts, carry)`` of a ``while`` equation's inputs."""
    n_cond, n_body = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
    return list(args[:n_cond]), list(args[n_cond : n_cond + n_body]), list(args[n_cond + n_body :])


def inspect_sharding_primitive() -> Primitive:
    """The primitive ``jax.debug.inspect_array_sharding`` binds."""
    return inspect_sharding_p


def mlir_ir() -> ModuleType:
    """JAX's bundled MLIR Python bindings (``ir``), to read StableHLO locations."""
    return ir


_PP_CONTEXT_LOCK = threading.Lock()


class EquationPrinter:
    """Prints one equation of a jaxpr with the variable names ``str(jaxpr)`` gives it (made by
    ``jaxpr_equation_printer``); without a naming context (``same_names`` False) it prints like
    ``str(eqn)``."""

    def __init__(self, context: JaxprPpContext | None = None, settings: JaxprPpSettings | None = None) -> None:
        self._context, self._settings = context, settings
        self.same_names = context is not None and settings is not None

    def __call__(self, eqn: JaxprEqn) -> str:
        if self._context is None or self._settings is None:
            return str(eqn)
        try:
            from jax._src import core

            return core.pp_eqn(eqn, self._context, self._settings).format()
        except Exception:
            return str(eqn)


def jaxpr_equation_printer(jaxpr: Jaxpr) -> EquationPrinter:
    """A printer of one equation of ``jaxpr`` (or of its sub-jaxprs) with the variable names
    ``str(jaxpr)`` gives it.

    ``str(eqn)`` names the variables of the lone equation afresh (its output becomes ``a``), so the
    text would not match the printed jaxpr. JAX's top-level printer makes a naming context that the
    public API does not hand out: it is recorded while that printer runs, then each equation is
    printed with it. If this JAX does not allow it, the printer returned prints like ``str(eqn)``
    and its ``same_names`` attribute is False.
    """
    inner = getattr(jaxpr, "jaxpr", jaxpr)  # a ClosedJaxpr prints its Jaxpr
    try:
        from jax._src import core

        made: list[JaxprPpContext] = []
        original = core.JaxprPpContext

        class _Recorded(core.JaxprPpContext):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                made.append(self)

        with _PP_CONTEXT_LOCK:
            core.JaxprPpContext = _Recorded  # type: ignore[misc]  # a patch of JAX's class while it prints
            try:
                core.pp_toplevel_jaxpr(inner)
            finally:
                core.JaxprPpContext = original  # type: ignore[misc]
        if made:
            return EquationPrinter(made[0], core.JaxprPpSettings())
    except Exception:  # a JAX whose printer moved: print each equation on its own
        pass
    return EquationPrinter()
