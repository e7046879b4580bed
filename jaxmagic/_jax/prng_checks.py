"""Following each eager jax.random call: every one passes its key through ``random_core._check_prng_key``.

The one place jaxmagic patches JAX's PRNG internals (``jax._src.random.core``,
read through ``key_internals.random_core``). ``tests/test_jax_structure.py`` checks
that JAX still has the function, its signature and the calls through it.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Collection, Iterator
from types import FrameType, ModuleType
from typing import cast

import jax
import numpy as np
from jax._src import core

from jaxmagic._jax import jaxpr_parts, key_internals
from jaxmagic._jax.types import Atom, Equation, Jaxpr, Program
from jaxmagic.usercode.source import is_user_file

CHECK_NAME = "_check_prng_key"  # (name, key, *, allow_batched=False) -> (key, wrapped); looked up at each call

# what the key-reuse search finds: (the equation, the call equations it is inside outermost first, its program)
Culprit = tuple[Equation, list[Equation], Jaxpr]
# an equation with the equations it is inside, outermost first
Enclosed = tuple[Equation, list[Equation]]


def key_check() -> Callable[..., tuple[jax.Array, bool]] | None:
    """JAX's ``_check_prng_key`` (the jax.random functions' key check), or None on another layout."""
    core = key_internals.random_core()
    return None if core is None else getattr(core, CHECK_NAME, None)


@contextlib.contextmanager
def following_key_checks(follow: Callable[[str, object, object], None]) -> Iterator[bool]:
    """While open, ``follow(name, key, frame)`` sees each eager jax.random call before JAX checks its key.

    ``name`` is the jax.random function's name, ``key`` its key argument and
    ``frame`` that function's frame (its arguments are its locals). An error
    in ``follow`` is dropped: following is ours, never the user's error.
    Yields False (and follows nothing) where this JAX has no such check.
    """
    core = key_internals.random_core()
    original = key_check()
    if original is None:
        yield False
        return

    def check(name: str, key: object, *args: object, **kwargs: object) -> tuple[jax.Array, bool]:
        try:
            follow(str(name), key, sys._getframe(1))
        except Exception:  # following is ours: never the user's error
            pass
        return original(name, key, *args, **kwargs)

    setattr(core, CHECK_NAME, check)
    try:
        yield True
    finally:
        setattr(core, CHECK_NAME, original)


# -- where JAX's key-reuse check was when it raised (keyscomp) ---------------------------------
#
# ``jax.experimental.key_reuse._core.jaxpr_type_signature`` walks a program's equations, each in
# a frame whose local ``eqn`` is the equation being checked; it recurses into calls and loop
# bodies. The frames of a ``KeyReuseError`` raised by that check therefore name the equation JAX
# was at, and the equations around it (a ``jit`` call, the ``scan`` of a ``fori_loop``).

_SIGNATURE_FUNCTION = "jaxpr_type_signature"


def reuse_equations(error: BaseException) -> list[Equation]:
    """The equations JAX's key-reuse check was inside when it raised ``error``, outermost first;
    [] when it was raised elsewhere (a call checked at run time, another JAX layout)."""
    found: list[Equation] = []
    for frame in _check_frames(error):
        try:
            eqn = frame.f_locals.get("eqn")
        except Exception:
            eqn = None
        if eqn is not None and hasattr(eqn, "primitive"):
            found.append(eqn)
    return found


def _check_frames(error: BaseException) -> Iterator[FrameType]:
    """The frames of JAX's key-reuse check in ``error``'s traceback, outermost first."""
    tb = getattr(error, "__traceback__", None)
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == _SIGNATURE_FUNCTION and "key_reuse" in code.co_filename.replace("\\", "/"):
            yield tb.tb_frame
        tb = tb.tb_next


def checked_program_is_users(error: BaseException) -> bool | None:
    """Whether the outermost program JAX's key-reuse check was reading when it raised is a function of the
    user's (a jitted function) rather than one JAX traced itself (an eager ``lax.fori_loop`` is checked
    through a program JAX traces around the loop primitive); None when it cannot be told."""
    for frame in _check_frames(error):  # the outermost one
        try:
            jaxpr = frame.f_locals.get("jaxpr")
        except Exception:
            return None
        where = str(getattr(getattr(jaxpr, "debug_info", None), "func_src_info", "") or "")
        if " at " not in where:
            return None
        return is_user_file(where.rsplit(" at ", 1)[-1].rsplit(":", 1)[0])
    return None


def _key_reuse_module() -> ModuleType | None:
    try:
        from jax.experimental.key_reuse import _core
    except Exception:
        return None
    return _core


def _is_key(var: Atom) -> bool:
    dtype = getattr(getattr(var, "aval", None), "dtype", None)
    try:
        return dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
    except Exception:
        return False


def _loop_parts(eqn: Equation) -> tuple[Jaxpr, int, int] | None:
    """(body jaxpr, number of constants, number of carries) of a ``scan`` or ``while`` equation; None otherwise."""
    name = eqn.primitive.name
    if name == "scan":
        closed = eqn.params.get("jaxpr")
        body = cast(Jaxpr, getattr(closed, "jaxpr", closed))  # a loop equation holds its body
        if "num_consts" in eqn.params:
            consts, carry = int(eqn.params["num_consts"]), int(eqn.params["num_carry"])
        else:
            consts, carry, _ = (len(g) for g in eqn.params["ft_in"].unpack())
        return body, consts, carry
    if name == "while":
        closed = eqn.params.get("body_jaxpr")
        body = cast(Jaxpr, getattr(closed, "jaxpr", closed))
        consts = int(eqn.params.get("body_nconsts", 0))
        return body, consts, len(body.outvars)
    return None


def _first_consumer(jaxpr: Jaxpr, targets: Collection[Atom], module: ModuleType, depth: int = 0) -> Culprit | None:
    """The first equation of ``jaxpr`` that consumes one of ``targets`` (variables, followed through
    the equations that only pass a key on), with the call equations it is inside: (eqn, [calls]) or None."""
    forwards: dict[Atom, Atom] = {}

    def resolve(var: Atom) -> Atom:
        for _ in range(len(forwards) + 1):
            if var in forwards:
                var = forwards[var]
            else:
                break
        return var

    for eqn in jaxpr.eqns:
        try:
            signature = module.key_reuse_signature_from_eqn(eqn)
        except Exception:
            signature = module.unknown_signature(eqn)
        for sink in signature.sinks:
            if 0 <= sink.idx < len(eqn.invars) and _is_key(eqn.invars[sink.idx]):
                var = eqn.invars[sink.idx]
                try:
                    hit = not is_literal_var(var) and resolve(var) in targets
                except TypeError:
                    hit = False
                if hit:
                    inner = _inside_user_call(eqn, sink.idx, module, depth)
                    return inner if inner is not None else (eqn, [], jaxpr)
        for in_idx, out_idx in signature.forwards:
            forwards[eqn.outvars[out_idx]] = eqn.invars[in_idx]
    return None


def is_literal_var(var: object) -> bool:
    return isinstance(var, core.Literal)


def _inside_user_call(eqn: Equation, index: int, module: ModuleType, depth: int) -> Culprit | None:
    """When ``eqn`` calls a function of the user's (a nested jit of theirs), the equation inside it
    that consumes its argument ``index``: the line inside that function, not the call."""
    if depth >= 4 or eqn.primitive.name not in ("jit", "pjit", "closed_call", "core_call"):
        return None
    closed = eqn.params.get("jaxpr") or eqn.params.get("call_jaxpr")
    inner = getattr(closed, "jaxpr", closed)
    if inner is None or len(inner.invars) != len(eqn.invars):
        return None
    where = str(getattr(getattr(inner, "debug_info", None), "func_src_info", "") or "")
    source = where.rsplit(" at ", 1)[-1].rsplit(":", 1)[0] if " at " in where else ""
    if not source or not is_user_file(source):
        return None  # jax.random.normal's own jit: the call is the user's line
    found = _first_consumer(inner, {inner.invars[index]}, module, depth + 1)
    if found is None:
        return None
    culprit, calls, program = found
    return culprit, [eqn, *calls], program


def loop_reuse_culprit(loop_eqn: Equation, message: str) -> Culprit | None:
    """For a ``KeyReuseError`` JAX raised at a ``scan``/``while`` (a ``fori_loop``) - "... body function
    leads to key reuse when repeatedly executed" - the equation inside the body that draws with the key
    that is reused at the next pass, with the call equations between the body and it and the
    program it is in: (eqn, [calls], jaxpr) or None when it cannot be told.

    A key constant of the body (closed over) consumed at every pass: its consumer. A key carried from
    pass to pass consumed inside the body: the equation that consumes the key the body hands to the
    next pass (``key, sub = split(key)`` then ``normal(key)``: the draw consumes the carried ``key``)."""
    module = _key_reuse_module()
    parts = _loop_parts(loop_eqn)
    if module is None or parts is None:
        return None
    body, consts, carry = parts
    try:
        if "cond function" in message or "both use" in message:
            return None  # a key the loop's condition consumes: not a line of the body
        if "constants" in message or (loop_eqn.primitive.name == "while" and _consumed_constant(body, consts, module)):
            targets = {v for v in body.invars[:consts] if _is_key(v)}
            found = _first_consumer(body, targets, module)
            if found is not None:
                return found
        outgoing = {v for v in body.outvars[:carry] if _is_key(v) and not is_literal_var(v)}
        # a carried key handed on unchanged is the incoming one: follow the outgoing variables back
        return _first_consumer(body, outgoing | _forwarded_inputs(body, outgoing, module), module)
    except Exception:  # another jaxpr layout: could not tell
        return None


def _consumed_constant(body: Jaxpr, consts: int, module: ModuleType) -> bool:
    try:
        signature = module.jaxpr_type_signature(body)
    except Exception:
        return False
    return any(np.any(s.mask) for s in signature.sinks if s.idx < consts)


def _forwarded_inputs(body: Jaxpr, outgoing: set[Atom], module: ModuleType) -> set[Atom]:
    """Inputs of ``body`` that reach one of ``outgoing`` only through equations that pass a key on."""
    forwards: dict[Atom, Atom] = {}
    for eqn in body.eqns:
        try:
            signature = module.key_reuse_signature_from_eqn(eqn)
        except Exception:
            continue
        for in_idx, out_idx in signature.forwards:
            forwards[eqn.outvars[out_idx]] = eqn.invars[in_idx]
    found: set[Atom] = set()
    for var in outgoing:
        for _ in range(len(forwards) + 1):
            if var in forwards:
                var = forwards[var]
            else:
                break
        if var in body.invars:
            found.add(var)
    return found


def split_sibling_unused(program: Jaxpr, eqn: Equation) -> bool | None:
    """Whether ``eqn`` draws with one key of a ``split`` whose other keys ``program`` never reads
    (``key, sub = split(key)``; ``normal(key)``; ``sub`` unused): True, False, or None when ``eqn``'s
    key does not come from a split in ``program``."""
    keys = [v for v in eqn.invars if _is_key(v) and not is_literal_var(v)]
    if not keys:
        return None
    producer = next((e for e in program.eqns if keys[0] in e.outvars), None)
    if producer is None or producer.primitive.name != "unstack":
        return None
    source = producer.invars[0]
    if not any(source in e.outvars and e.primitive.name == "random_split" for e in program.eqns):
        return None
    siblings = [v for v in producer.outvars if v is not keys[0]]
    read = {id(v) for e in program.eqns for v in e.invars} | {id(v) for v in program.outvars}
    return bool(siblings) and all(id(v) not in read for v in siblings)


def passes_with_sibling(loop_eqn: Equation, program: Jaxpr, eqn: Equation) -> bool | None:
    """Try the fix on the traced program: ``eqn`` (in the loop body ``program``) draws with the other key
    of its split instead, and JAX's key-reuse check of the loop runs again. True: it passes; False: it
    still reports a reuse; None: it could not be tried (the draw is not directly in the body)."""
    module = _key_reuse_module()
    parts = _loop_parts(loop_eqn)
    if module is None or parts is None or parts[0] is not program:
        return None
    keys = [v for v in eqn.invars if _is_key(v) and not is_literal_var(v)]
    producer = next((e for e in program.eqns if keys and keys[0] in e.outvars), None)
    if producer is None or producer.primitive.name != "unstack":
        return None
    siblings = [v for v in producer.outvars if v is not keys[0]]
    if len(siblings) != 1:
        return None

    try:
        sibling = siblings[0]
        if isinstance(sibling, core.DropVar):  # the unused key has no name yet: give it one
            sibling = core.Var(sibling.aval)
            producer_new = producer.replace(outvars=[sibling if v is siblings[0] else v for v in producer.outvars])
        else:
            producer_new = producer
        drawn = eqn.replace(invars=[sibling if v is keys[0] else v for v in eqn.invars])
        eqns = [producer_new if e is producer else drawn if e is eqn else e for e in program.eqns]
        body = program.replace(eqns=eqns)
        key = "jaxpr" if loop_eqn.primitive.name == "scan" else "body_jaxpr"
        closed = loop_eqn.params[key]
        new_loop = loop_eqn.replace(params={**loop_eqn.params, key: closed.replace(jaxpr=body)})
        module.key_reuse_signature_from_eqn(new_loop)
    except jax.errors.KeyReuseError:
        return False
    except Exception:
        return None
    return True


# -- one key for a whole vmapped batch (keyscomp) ----------------------------------------------
#
# Under ``vmap`` a draw whose key is not batched (a key closed over, or passed with in_axes=None)
# runs once and its numbers are broadcast: every element of the batch gets the same noise. JAX's
# key-reuse checker says nothing (the key is consumed once). In the traced program it is a draw
# (a call of a jax.random function, or ``random_bits``) under ``vmap`` whose key is one key.

_MAX_EQUATIONS = 5000


def _draws_bits(program: Jaxpr, depth: int = 0) -> bool:
    """Whether the program draws random bits (a split or a fold_in alone draws nothing)."""
    for eqn in program.eqns:
        if eqn.primitive.name == "random_bits":
            return True
        if depth < 8:
            for sub in jaxpr_parts.sub_jaxprs(eqn):
                if _draws_bits(getattr(sub, "jaxpr", sub), depth + 1):
                    return True
    return False


def shared_key_draws(closed: Program) -> list[Enclosed]:
    """Draws under ``vmap`` with a single (unbatched) key in a user's traced program:
    ``[(draw equation, enclosing equations outermost first)]``, at most one per drawing equation."""
    program = getattr(closed, "jaxpr", closed)
    found: list[Enclosed] = []
    seen = [0]

    def walk(jaxpr: Jaxpr, enclosing: list[Equation], under_vmap: bool, depth: int) -> None:
        for eqn in jaxpr.eqns:
            seen[0] += 1
            if seen[0] > _MAX_EQUATIONS or depth > 8:
                return
            vmapped = under_vmap or "vmap" in jaxpr_parts.name_stack_text(eqn)
            keys = [v for v in eqn.invars if _is_key(v) and not is_literal_var(v)]
            name = eqn.primitive.name
            subs = jaxpr_parts.sub_jaxprs(eqn)
            if name == "random_bits" or (keys and subs and name in ("jit", "pjit", "closed_call")):
                called, filename = jaxpr_parts.called_function(eqn) if subs else ("", "")
                library = name == "random_bits" or (filename and not is_user_file(filename))
                if library:
                    if (
                        vmapped
                        and keys
                        and tuple(cast(core.ShapedArray, keys[0].aval).shape) == ()
                        and (name == "random_bits" or _draws_bits(getattr(subs[0], "jaxpr", subs[0])))
                    ):
                        found.append((eqn, list(enclosing)))
                    continue
            for sub in subs:
                walk(getattr(sub, "jaxpr", sub), [*enclosing, eqn], vmapped, depth + 1)

    try:
        walk(program, [], False, 0)
    except Exception:  # another jaxpr layout: nothing found, nothing claimed
        return []
    return found


_LOOPS = {"scan": "jaxpr", "while": "body_jaxpr"}  # loop primitive -> its body's parameter


def loop_invariant_draws(closed: Program) -> list[tuple[Equation, list[Equation], Equation]]:
    """Draws inside a loop body (``lax.scan``, ``fori_loop``, ``while_loop``, ``lax.map``) whose key does
    not change between passes - made only from values the body closes over, not from its carry or its
    per-pass inputs (``jax.random.bernoulli(jax.random.fold_in(key, 7), ...)`` with ``key`` from outside,
    a Flax ``Dropout`` given the same ``rngs`` each pass): every pass draws the same numbers. JAX's
    key-reuse checker sees no reuse there (``fold_in`` consumes nothing).
    ``[(draw equation, enclosing equations outermost first, the loop equation)]``, one per drawing equation."""
    program = getattr(closed, "jaxpr", closed)
    found: list[tuple[Equation, list[Equation], Equation]] = []
    seen = [0]

    def follow_changes(jaxpr: Jaxpr, varying: set[int], enclosing: list[Equation], loop: Equation | None) -> None:
        """Propagate "changes between passes" through ``jaxpr`` (ids in ``varying``); record the draws
        of ``loop``'s body whose key does not change."""
        for eqn in jaxpr.eqns:
            seen[0] += 1
            if seen[0] > _MAX_EQUATIONS or len(enclosing) > 8:
                return
            inputs_vary = any(id(v) in varying for v in eqn.invars if not is_literal_var(v))
            name = eqn.primitive.name
            if name == "random_bits" and loop is not None and not inputs_vary:
                found.append((eqn, list(enclosing), loop))
            subs = jaxpr_parts.sub_jaxprs(eqn)
            if name in _LOOPS:
                _walk_loop(eqn, [*enclosing, eqn])
            elif subs and loop is not None:
                for sub in subs:
                    inner = getattr(sub, "jaxpr", sub)
                    inner_varying = {id(iv) for iv, ov in zip(inner.invars, eqn.invars) if id(ov) in varying}
                    follow_changes(inner, inner_varying, [*enclosing, eqn], loop)
            if inputs_vary:
                varying.update(id(v) for v in eqn.outvars)

    def _walk_loop(eqn: Equation, enclosing: list[Equation]) -> None:
        body = eqn.params.get(_LOOPS[eqn.primitive.name])
        inner = getattr(body, "jaxpr", body)
        if inner is None or (eqn.primitive.name == "scan" and int(eqn.params.get("length", 2)) < 2):
            return
        if eqn.primitive.name == "scan":
            _, carry, xs = jaxpr_parts.scan_operands(eqn, list(inner.invars))  # the body's inputs, split as the scan's
            changing = [*carry, *xs]
        else:
            changing = list(inner.invars[int(eqn.params["body_nconsts"]) :])  # the carry
        follow_changes(inner, {id(v) for v in changing}, enclosing, eqn)

    def walk(jaxpr: Jaxpr, enclosing: list[Equation]) -> None:
        for eqn in jaxpr.eqns:
            seen[0] += 1
            if seen[0] > _MAX_EQUATIONS or len(enclosing) > 8:
                return
            if eqn.primitive.name in _LOOPS:
                _walk_loop(eqn, [*enclosing, eqn])
                continue
            for sub in jaxpr_parts.sub_jaxprs(eqn):
                walk(getattr(sub, "jaxpr", sub), [*enclosing, eqn])

    try:
        walk(program, [])
    except Exception:  # another jaxpr layout: nothing found, nothing claimed
        return []
    unique = {id(eqn): (eqn, enclosing, loop) for eqn, enclosing, loop in found}
    return list(unique.values())


# A draw whose key depends on none of the program's inputs - made inside the function from a literal seed
# (``key = jax.random.PRNGKey(0)`` in the step) or closed over from outside (a global key the function
# captured) - is the same draw at every call of the compiled program: a dropout mask, noise or a sample that
# never changes between training steps. JAX's key-reuse checker sees nothing: each call consumes its key once.

_MAKERS = ("random_seed", "random_wrap")  # what turns a seed or raw data into a key


def constant_key_draws(closed: Program) -> list[tuple[Equation, list[Equation], Enclosed | None]]:
    """Draws (``random_bits``) outside any loop whose key depends on none of the program's inputs:
    ``[(draw equation, enclosing equations outermost first, (the equation that made the key, its enclosing
    equations) or None)]``.
    A path the walk cannot map (a branch's operands, a loop) counts as depending on the inputs: nothing
    is claimed there."""
    program = getattr(closed, "jaxpr", closed)
    found: list[tuple[Equation, list[Equation], Enclosed | None]] = []
    seen = [0]

    def walk(jaxpr: Jaxpr, varying: set[int], made: dict[int, Enclosed], enclosing: list[Equation]) -> None:
        for eqn in jaxpr.eqns:
            seen[0] += 1
            if seen[0] > _MAX_EQUATIONS or len(enclosing) > 8:
                return
            inputs = [v for v in eqn.invars if not is_literal_var(v)]
            inputs_vary = any(id(v) in varying for v in inputs)
            name = eqn.primitive.name
            maker = next((made[id(v)] for v in inputs if id(v) in made), None)  # the first maker in the chain
            if maker is None and name in _MAKERS and not inputs_vary:
                maker = (eqn, list(enclosing))
            if name == "random_bits" and not inputs_vary:
                found.append((eqn, list(enclosing), maker))
            subs = jaxpr_parts.sub_jaxprs(eqn) if name not in _LOOPS else []
            for sub in subs:
                inner = getattr(sub, "jaxpr", sub)
                if len(inner.invars) == len(eqn.invars):  # a call: its inputs are the equation's
                    pairs = list(zip(inner.invars, eqn.invars))
                    inner_varying = {id(i) for i, o in pairs if not is_literal_var(o) and id(o) in varying}
                    inner_made = {id(i): made[id(o)] for i, o in pairs if not is_literal_var(o) and id(o) in made}
                else:  # not mapped: all of it varies as soon as anything given to it does
                    inner_varying = {id(i) for i in inner.invars} if inputs_vary or inputs else set()
                    inner_made = {}
                walk(inner, inner_varying, inner_made, [*enclosing, eqn])
            if inputs_vary or name in _LOOPS:
                varying.update(id(v) for v in eqn.outvars)
            if maker is not None:
                made.update({id(v): maker for v in eqn.outvars})

    try:
        walk(program, {id(v) for v in program.invars}, {}, [])
    except Exception:  # another jaxpr layout: nothing found, nothing claimed
        return []
    unique = {id(eqn): (eqn, enclosing, maker) for eqn, enclosing, maker in found}
    return list(unique.values())
