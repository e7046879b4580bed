"""Which of a jitted call's inputs the compiled program kept, and as which entry parameter (private, read here only).

JAX prunes the inputs a program never reads (``keep_unused=False``, the default): the compiled program has
no parameter for them, its input shardings say None, and a donated one is not donated - with no warning.
It also hoists large constants into the first parameters. So the compiled program's parameter ``n`` is not
the call's flat input ``n``; this module is the one place that says which it is, from JAX's own record of
what it kept (``kept_var_idx``), never from a count that happens to fit.

Flat inputs are the leaves of the call's dynamic arguments (static ones removed), positional then keyword
(sorted), each flattened as ``jax.tree_util`` does: the order of ``Compiled.input_shardings``' leaves.
"""

from __future__ import annotations

import dataclasses
from types import FrameType
from typing import TYPE_CHECKING

from jax._src.interpreters import pxla

from jaxmagic._jax.types import Program

if TYPE_CHECKING:
    import jax
    from jax._src.core import AbstractValue


@dataclasses.dataclass(frozen=True)
class ProgramInputs:
    """How a compiled program's entry parameters stand for the call's flat inputs."""

    inputs: int  # the call's flat (dynamic) inputs
    constants: int  # constants JAX hoisted into the first parameters
    kept: tuple[int, ...]  # the flat inputs the program reads, in parameter order

    def parameter_of(self, flat_input: int) -> int | None:
        """The entry parameter number of flat input ``flat_input``; None when JAX pruned it."""
        if flat_input not in self.kept:
            return None
        return self.constants + self.kept.index(flat_input)

    def input_of(self, parameter: int) -> int | None:
        """The flat input behind entry parameter ``parameter``; None for a hoisted constant."""
        position = parameter - self.constants
        return self.kept[position] if 0 <= position < len(self.kept) else None

    @property
    def unread(self) -> list[int]:
        """The flat inputs the program never reads (pruned: no parameter, nothing transferred or donated)."""
        return [i for i in range(self.inputs) if i not in self.kept]


def input_shardings_flat(compiled: jax.stages.Compiled) -> list[jax.sharding.Sharding | None]:
    """One sharding per flat input of ``compiled`` (a ``jax.stages.Compiled``), None where JAX pruned it.

    Flattened by the call's own input structure (``in_tree``): a None the user passed as an argument is
    no input at all, while a None sharding at an input's place is a pruned input; flattening the
    shardings alone cannot tell the two apart."""
    # jaxlib's PyTreeDef: its stub has no flatten_up_to
    return list(compiled.in_tree.flatten_up_to(compiled.input_shardings))  # type: ignore[attr-defined]


def program_inputs(compiled: jax.stages.Compiled) -> ProgramInputs:
    """Read from a ``jax.stages.Compiled``: the executable's kept inputs and hoisted constants.

    Without the private fields (another JAX), the public ``input_shardings`` still say which inputs
    were pruned (None) and constants are assumed absent."""
    shardings = input_shardings_flat(compiled)
    executable = getattr(compiled, "_executable", None)
    params = getattr(compiled, "_params", None)
    constants = len(getattr(params, "const_args", ()) or ())
    kept_with_constants = getattr(executable, "_kept_var_idx", None)
    if kept_with_constants is None:
        kept = tuple(i for i, s in enumerate(shardings) if s is not None)
        return ProgramInputs(len(shardings), 0, kept)
    kept = tuple(sorted(i - constants for i in kept_with_constants if constants <= i < constants + len(shardings)))
    return ProgramInputs(len(shardings), constants, kept)


def inputs_jit_prunes(jaxpr: Program) -> frozenset[int]:
    """The flat inputs of a traced program (a ``ClosedJaxpr`` or ``Jaxpr``, as pjit's ``jaxpr`` parameter) that
    jit leaves out of the compiled program: nothing is transferred or donated for them.

    Decided by JAX's own pruning at lowering (``pxla.prune_unused_inputs``: dead-code elimination from the
    outputs, effects kept), so an input read only by code whose result is never used counts as pruned - as
    jit prunes it - where a scan of the equations' inputs would count it as read. Empty when not known
    (another JAX, a program with dynamic shapes); the caller leaves out ``keep_unused=True`` calls."""
    inner = getattr(jaxpr, "jaxpr", jaxpr)
    prune = getattr(pxla, "prune_unused_inputs", None)
    invars = getattr(inner, "invars", None)
    if prune is None or invars is None:
        return frozenset()
    try:
        if any(not all(isinstance(d, int) for d in getattr(v.aval, "shape", ())) for v in invars):
            return frozenset()  # dynamic shapes: jit keeps every input
        kept = prune(inner)[2]
    except Exception:  # a program JAX itself would not prune this way: claim nothing
        return frozenset()
    return frozenset(i for i in range(len(invars)) if i not in kept)


@dataclasses.dataclass
class UnreadDonation:
    """A donated argument the program being compiled never reads: JAX pruned it, so nothing is donated."""

    name: str  # the argument's path as JAX names it ("" when it gave none)
    type: str  # "float32[4]"


def donated_unread_at_compile(frame: FrameType | None) -> list[UnreadDonation]:
    """At a backend compilation of a jitted call: its donated inputs that JAX pruned from the program.

    Read from the stack: ``pjit._pjit_call_impl_python`` holds the call's ``donated_invars`` (one per flat
    input) and its ``jaxpr`` (names and types); ``pxla.UnloadedMeshExecutable.from_hlo`` holds
    ``kept_var_idx`` and ``all_args_info`` (hoisted constants first). [] when either is absent."""
    call = compiling = None
    try:
        current = frame
        for _ in range(60):
            if current is None:
                break
            code = current.f_code
            if compiling is None and code.co_name == "from_hlo" and code.co_filename.endswith("pxla.py"):
                compiling = current
            if code.co_name == "_pjit_call_impl_python" and code.co_filename.endswith("pjit.py"):
                call = current
                break
            current = current.f_back
        if call is None or compiling is None:
            return []
        donated = tuple(call.f_locals.get("donated_invars") or ())
        if not any(donated) or call.f_locals.get("keep_unused"):
            return []
        kept = compiling.f_locals.get("kept_var_idx")
        all_args = compiling.f_locals.get("all_args_info")
        jaxpr = call.f_locals.get("jaxpr")
    finally:
        del current, call, compiling
    avals = list(getattr(all_args, "in_avals", ()) or ())
    constants = len(avals) - len(donated)
    if constants < 0 or kept is None:
        return []
    names = list(getattr(getattr(jaxpr, "debug_info", None), "arg_names", None) or [""] * len(donated))
    in_avals = list(getattr(jaxpr, "in_avals", ()) or avals[constants:])
    return [
        UnreadDonation(str(names[i] if i < len(names) else ""), _type_text(in_avals[i]) if i < len(in_avals) else "")
        for i, is_donated in enumerate(donated)
        if is_donated and i + constants not in kept
    ]


def _type_text(aval: AbstractValue) -> str:
    try:
        return aval.str_short(short_dtypes=False)
    except Exception:
        return str(aval)
