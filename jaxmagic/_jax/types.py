"""Names for the pieces of a traced program, for annotations: ``Equation`` (one line of a jaxpr),
``Jaxpr`` (an open program), ``ClosedJaxpr`` (a program with its constants), ``Program`` (either: what
a call equation's parameters hold), ``Var`` (a variable), ``Literal`` (a constant written into an
equation), ``Atom`` (what an equation reads: a ``Var`` or a ``Literal``) and ``Traceback`` (the jaxlib
traceback an equation's ``source_info`` records).

``Value`` is what an equation reads or writes when a program is evaluated: a ``jax.Array``, a NumPy
array or scalar, a Python number (a ``Literal``'s ``val``), or a tracer where a loop body is evaluated
traced - nothing narrower holds for all of them, so it is ``Any`` under its own name. ``Params`` is an
equation's ``params`` (and a call's, as ``jit_calls`` observes it): each primitive keeps its own kinds of
value under its own names (a ``Program``, a tuple of axes, a dtype, a flag), so the values are ``Any``.

The classes come from ``jax.extend.core`` (JAX 0.10.2 and the installed JAX both have them, as
``jax._src.core``'s own classes; ``Traceback`` from ``jax._src.source_info_util``) for the type checker only: at run time every name here is
``typing.Any``, so nothing is imported and an annotation that ``typing.get_type_hints`` evaluates
still resolves. Test a value with ``jaxpr_parts.is_literal`` / ``jaxpr_parts.jaxpr_types`` instead of
``isinstance`` against these names.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from jax._src.source_info_util import Traceback
    from jax.extend.core import ClosedJaxpr, Jaxpr, Literal, Var
    from jax.extend.core import JaxprEqn as Equation

    Atom: TypeAlias = Var | Literal
    Program: TypeAlias = Jaxpr | ClosedJaxpr
else:
    Equation = Any
    Jaxpr = Any
    ClosedJaxpr = Any
    Var = Any
    Literal = Any
    Atom = Any
    Program = Any
    Traceback = Any

Value: TypeAlias = Any
Params: TypeAlias = dict[str, Any]

__all__ = ["Atom", "ClosedJaxpr", "Equation", "Jaxpr", "Literal", "Params", "Program", "Traceback", "Value", "Var"]
