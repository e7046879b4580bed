"""The questions jaxmagic asks of JAX's private modules, answered in one place.

JAX's public API does not say whether a backend exists, which user frame made
an equation, or which sub-programs an equation holds; ``jax._src`` does. Every
such question is a function here, so a JAX release that moves something breaks
one module, and each answer says what it does when the private name is gone.
Nothing outside ``jaxmagic/_jax/`` imports ``jax._src``.
"""

from __future__ import annotations

import contextlib
import functools
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, TypeGuard

from jaxmagic.report.source import code_kind

if TYPE_CHECKING:
    from jax.stages import Wrapped


def backend_started() -> bool:
    """True once JAX has created its backends (``jax.live_arrays()`` or ``jax.devices()`` would
    otherwise start one, after which fake CPU devices can no longer be added).

    A JAX without the private helper is assumed started: asking would start it anyway.
    """
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):
        return True


def is_jitted(fn) -> TypeGuard[Wrapped]:
    """True for a ``jax.jit`` wrapper: it can be traced and lowered without being called."""
    return callable(getattr(fn, "trace", None)) and callable(getattr(fn, "lower", None))


def unregister_duration_listener(listener) -> None:
    """Remove a ``jax.monitoring`` duration listener (JAX has no public way); quiet if it is gone."""
    with contextlib.suppress(Exception):
        from jax._src import monitoring

        monitoring.unregister_event_duration_listener(listener)


def traceback_filtering_mode() -> str | None:
    """The traceback filtering mode JAX resolves ``auto`` to right now, or None if JAX cannot say."""
    try:
        from jax._src import traceback_util

        return traceback_util._filtering_mode()
    except Exception:
        return None


def user_frames(traceback) -> list:
    """JAX's user frames (innermost first) of a traceback JAX recorded (an equation's
    ``source_info.traceback``, a tracer's line info); [] when there is none."""
    if traceback is None:
        return []
    try:
        from jax._src import source_info_util

        return list(source_info_util.user_frames(traceback))
    except Exception:
        return []


def user_frame(traceback):
    """The innermost of :func:`user_frames`, or None."""
    frames = user_frames(traceback)
    return frames[0] if frames else None


def user_context(eqn):
    """A context that makes equations bound inside it carry ``eqn``'s source info and name stack."""
    from jax._src import source_info_util

    return source_info_util.user_context(eqn.source_info.traceback, name_stack=eqn.source_info.name_stack)


def scope_entry_type():
    """The class of ``named_scope`` entries on a name stack (None in a JAX without it)."""
    try:
        from jax._src import source_info_util

        return getattr(source_info_util, "Scope", None)
    except ImportError:
        return None


def sub_jaxprs(eqn) -> list:
    """The sub-programs an equation holds in its parameters (scan/while/cond bodies, calls)."""
    from jax._src import core

    return list(core.jaxprs_in_params(eqn.params))


def is_literal(var) -> bool:
    """True for a constant written into an equation (a ``Literal``), False for a variable."""
    from jax._src import core

    return isinstance(var, core.Literal)


def jaxpr_types() -> tuple[type, ...]:
    """``Jaxpr`` and ``ClosedJaxpr``: the objects that hold a traced program's constants."""
    from jax._src import core

    return tuple(t for t in (getattr(core, "Jaxpr", None), getattr(core, "ClosedJaxpr", None)) if t)


def inspect_sharding_primitive():
    """The primitive ``jax.debug.inspect_array_sharding`` binds."""
    from jax._src.debugging import inspect_sharding_p

    return inspect_sharding_p


def compiled_call(fun, info) -> Any | None:
    """A new jitted callable of ``fun`` with the jit options ``info`` recorded, or None."""
    try:
        from jax._src import pjit

        return pjit._cpp_pjit(fun, info)
    except Exception:
        return None


def mlir_ir():
    """JAX's bundled MLIR Python bindings (``ir``), to read StableHLO locations."""
    from jax._src.lib.mlir import ir

    return ir


def random_core():
    """JAX's PRNG core module (where legacy uint32 keys are checked), or None."""
    try:
        from jax._src.random import core

        return core
    except ImportError:
        return None


def profiler_session_active() -> bool:
    """True while a ``jax.profiler`` trace is running (``start_trace`` would raise); False if JAX cannot say."""
    try:
        from jax._src import profiler

        return getattr(profiler._profile_state, "session", None) is not None
    except Exception:
        return False


@functools.cache  # making a jitted function to read it costs ~0.1 ms; it is the same code object every time
def jit_cache_miss_code():
    """The code object of jit's Python dispatch path (``cache_miss`` in pjit.py), or None.

    A jitted call whose compiled program is not in the C++ dispatch cache runs
    this function; its frame's locals are the call's ``args`` and ``kwargs``.
    """
    try:
        import jax

        miss = jax.jit(_identity)._cache_miss
        code = getattr(miss, "__wrapped__", miss).__code__
        return code if code.co_name == "cache_miss" else None
    except Exception:
        return None


def _identity(x):
    return x


@functools.cache
def jit_type() -> type:
    """The class of the objects ``jax.jit`` returns (jaxlib's PjitFunction)."""
    import jax

    return type(jax.jit(_identity))


def top_level_check():
    """A function answering "is JAX at the top level (nothing traced: a call runs eagerly)?", or None.

    It runs at every call the user's code makes of a jitted function (``%%jax_nans``' call counts), so
    it reads the two thread-local states ``core.trace_state_clean`` reads, without its three Python
    calls and two properties (~1 us a call on a loaded machine; issue 44); JAX's own function where
    those states are not found. ``tests/test_jax_structure.py`` checks the two agree."""
    try:
        from jax._src import core
    except ImportError:
        return None
    trace_state = getattr(core, "trace_state_strong_ref", None)
    axis_env_state = getattr(core, "axis_env_state", None)
    eval_trace, top_axis_env = getattr(core, "eval_trace", None), getattr(core, "top_axis_env", None)
    if None not in (trace_state, axis_env_state, eval_trace, top_axis_env) and all(
        hasattr(state, "value") for state in (trace_state, axis_env_state)
    ):

        def at_top_level() -> bool:
            trace = trace_state.value
            return trace is None or (trace is eval_trace and axis_env_state.value is top_axis_env)

        return at_top_level
    clean = getattr(core, "trace_state_clean", None)
    return clean if callable(clean) else None


def clear_dispatch_cache(jitted) -> bool:
    """Empty the C++ dispatch cache of one jitted function, so its next call takes the Python path.

    Nothing is compiled again: the Python path finds the program in JAX's own
    caches and puts it back. False when this JAX's jit objects cannot do it.
    """
    clear = getattr(jitted, "_clear_cache", None)
    if not callable(clear):
        return False
    try:
        clear()
        return True
    except Exception:
        return False


def function_being_traced():
    """The Python callable JAX is tracing right now (from a trace event's stack), or None.

    JAX's tracing entry points hold the function as a ``linear_util.WrappedFun``
    (a local named ``fun`` with the callable as ``.f``); jit's dispatch holds it
    as ``fun`` itself. The innermost such frame is the trace that just ended.
    """

    frame = sys._getframe(1)
    try:
        for _ in range(200):
            if frame is None:
                return None
            if "jax" in frame.f_code.co_filename and "fun" in frame.f_code.co_varnames:
                fun = frame.f_locals.get("fun")
                inner = getattr(fun, "f", None)
                if inner is not None and hasattr(fun, "transforms"):  # a WrappedFun
                    return inner
                if callable(fun):
                    return fun
            frame = frame.f_back
        return None
    finally:
        del frame


def trace_context_size() -> int | None:
    """How many values JAX's tracing cache key holds for its context (configs and user contexts); None if unknown."""
    try:
        from jax._src import config

        return len(config.trace_context_names())
    except Exception:
        return None


# -- evaluating a jaxpr equation by equation (the NaN producer search) -----------


def closed_parts(program) -> tuple[Any, list]:
    """``(jaxpr, consts)`` of a ``ClosedJaxpr``; an open ``Jaxpr`` (remat's body) has no consts."""
    inner = getattr(program, "jaxpr", None)
    if inner is not None and hasattr(program, "consts"):
        return inner, list(program.consts)
    return program, []


def bind_equation(eqn, values: list) -> list:
    """Run one equation on concrete values as ``jax.core.eval_jaxpr`` does; its outputs as a list.

    A jitted call's donation is dropped: the values are the user's own arrays (a probe's re-evaluation
    must not delete them) and are read again when the equation is opened."""
    from jax._src import source_info_util

    subfuns, bind_params = _bind_params(eqn)
    if any(bind_params.get("donated_invars", ())):  # a jitted call that donates: its inputs are read again after
        bind_params = {**bind_params, "donated_invars": (False,) * len(bind_params["donated_invars"])}
    with source_info_util.user_context(eqn.source_info.traceback, name_stack=eqn.source_info.name_stack):
        with eqn.ctx.manager:
            out = eqn.primitive.bind(*subfuns, *values, **bind_params)
    return list(out) if eqn.primitive.multiple_results else [out]


def with_params(eqn, **params):
    """``eqn`` with some of its parameters replaced (a dtype widened), for ``bind_equation``; ``eqn`` unchanged."""
    return eqn.replace(params={**eqn.params, **params})


def _bind_params(eqn):
    got = eqn.primitive.get_bind_params(eqn.params)
    if isinstance(got, tuple):  # older JAX: (subfuns, params)
        return got
    return (), got


def jaxpr_function(program):
    """A Python function running ``program`` (a ``ClosedJaxpr`` or open ``Jaxpr``) on its inputs, returning
    the list of its outputs; traceable, so it can be jitted or used inside ``lax.scan``."""
    from jax._src import core

    jaxpr, consts = closed_parts(program)

    def run(*args):
        return core.eval_jaxpr(jaxpr, consts, *args)

    return run


def scan_operands(eqn, args: list) -> tuple[list, list, list]:
    """``(consts, carry, xs)`` of a ``scan`` equation's inputs, in the body's input order."""
    params = eqn.params
    if "ft_in" in params:  # JAX >= 0.10: flat trees say which inputs are which
        consts, carry, xs = params["ft_in"].update(list(args)).unpack()
        return list(consts.vals), list(carry.vals), list(xs.vals)
    n_consts, n_carry = params["num_consts"], params["num_carry"]
    return list(args[:n_consts]), list(args[n_consts : n_consts + n_carry]), list(args[n_consts + n_carry :])


def while_operands(eqn, args: list) -> tuple[list, list, list]:
    """``(cond_consts, body_consts, carry)`` of a ``while`` equation's inputs."""
    n_cond, n_body = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
    return list(args[:n_cond]), list(args[n_cond : n_cond + n_body]), list(args[n_cond + n_body :])


def name_stack_text(eqn) -> str:
    """The equation's name stack as JAX prints it (``jvp(f)/transpose(jvp(f))``), '' if none."""
    try:
        return str(eqn.source_info.name_stack)
    except Exception:
        return ""


def traceback_frames(traceback) -> list[tuple[str, int, str]]:
    """``(file, line, function)`` of every frame of a traceback JAX recorded, innermost first; [] if none."""
    try:
        return [(f.file_name, int(f.line_num), str(f.function_name)) for f in traceback.frames]
    except Exception:
        return []


def called_function(eqn) -> tuple[str, str]:
    """``(name, file)`` of the Python function a call equation (``jit``, ``closed_call``) traced, from
    its sub-program's debug info (``("_std", ".../jax/_src/numpy/reductions.py")``); ("", "") if unknown."""
    for program in sub_jaxprs(eqn)[:1]:
        info = getattr(getattr(program, "jaxpr", program), "debug_info", None)
        name = str(getattr(info, "func_name", "") or "")
        filename = str(getattr(info, "func_filename", "") or "")
        return name, filename
    return "", ""


@contextlib.contextmanager
def tracing_where_traced():
    """While active, every equation traced keeps the traceback of the place it was traced at,
    even where JAX attributes it to another line (the backward pass attributes each transposed
    equation to its forward line, and so loses the line of a user's ``custom_vjp`` rule).

    Yields a dict: ``id(traceback)`` -> the traceback JAX attributed that equation to; the
    tracebacks are kept alive until the block ends. Without the private hook, yields {}.
    """
    try:
        from jax._src import source_info_util
    except ImportError:
        yield {}
        return
    original = source_info_util.current
    get_traceback = source_info_util.xla_client.Traceback.get_traceback
    context = source_info_util._source_info_context
    attributed: dict = {}
    kept: list = []

    def current():
        info = context.context
        real = get_traceback()
        if info.traceback:
            attributed[id(real)] = info.traceback
            kept.append(real)
        return info.replace(traceback=real)

    source_info_util.current = current
    try:
        yield attributed
    finally:
        source_info_util.current = original


_key_reuse_signatures: dict = {}  # (primitive, params, argument types) -> KeyReuseSignature
_SIMPLE_PARAMS = (int, float, str, bool, type(None))


def _simple(value) -> bool:
    if isinstance(value, tuple):
        return all(_simple(v) for v in value)
    return isinstance(value, _SIMPLE_PARAMS)


def call_with_key_reuse_checks(prim, raw_impl, args: tuple, params: dict, original):
    """``original(prim, raw_impl, *args, **params)`` - JAX's per-call key-reuse check - with the
    signature of a primitive whose signature JAX computes per call cached.

    For ``unstack``, ``slice`` and ``concatenate`` (``k1, k2 = jax.random.split(key)`` unstacks)
    JAX traces the operation with ``jax.make_jaxpr`` at every eager call to learn which outputs
    are fresh keys; that signature depends only on the parameters and the argument types, so it is
    traced once per (primitive, parameters, types). Only parameters of plain numbers, strings and
    tuples of them are cached (nothing that could hold an array or a function alive); everything
    else, and any other JAX layout, goes through ``original`` unchanged.
    """
    import jax

    try:
        from jax.experimental.key_reuse import _core as key_reuse

        dynamic = isinstance(key_reuse.key_reuse_signatures.get(prim), key_reuse.DynamicKeyReuseSignature)
    except (ImportError, AttributeError):
        dynamic = False
    if not dynamic or not all(_simple(v) for v in params.values()):
        return original(prim, raw_impl, *args, **params)
    try:
        key = (prim, tuple(sorted(params.items())), tuple(jax.typeof(a) for a in args))
        signature = _key_reuse_signatures.get(key)
    except TypeError:  # an argument without a hashable type
        return original(prim, raw_impl, *args, **params)
    if signature is None:
        signature = key_reuse.key_reuse_signature_from_primitive(prim, *args, **params)
        if len(_key_reuse_signatures) < 10_000:
            _key_reuse_signatures[key] = signature
    # The rest as JAX's call_impl_with_key_reuse_checks does it for a primitive other than jit.
    signature.check_signature(*args, funcname=str(prim))
    result = raw_impl(*args, **params)
    signature.update_consumption(list(args), result if prim.multiple_results else [result])
    return result


def post_hook_state():
    """JAX's setting for the function its C++ jit calls after each fast-path call, or None.

    ``jax.debug_nans`` puts its NaN check there: ``hook(jitted, args, kwargs,
    output)`` runs after every call the C++ dispatch serves from its cache,
    with the call's own arguments and its result, while the call stays on the
    fast path. Calls that take jit's Python path (``cache_miss``: the first of
    a signature, programs with effects) do not call it. ``swap_local`` /
    ``set_local`` set it for one thread; ``value`` is the hook in effect.
    """
    try:
        from jax._src import api

        state = api._post_hook_state
        needed = ("swap_local", "set_local", "get_local", "value")
        return state if all(hasattr(state, name) for name in needed) else None
    except (ImportError, AttributeError):
        return None


def jit_arguments(jit_info, args: tuple, kwargs: dict):
    """``(signature, dynamic arguments)`` of a call of a jitted function (its ``_jit_info``) as its dispatch sees it, or None.

    The signature (hashable: the static arguments, the pytree structure) with
    the dynamic leaves' types identifies the traced program; the dynamic
    leaves are the program's inputs after its hoisted constants.
    """
    try:
        from jax._src import tree_util
        from jax._src.lib import jax_jit

        return jax_jit.parse_arguments(
            args,
            tuple(kwargs.values()),
            tuple(kwargs.keys()),
            jit_info.static_argnums,
            jit_info.static_argnames,
            tree_util.tracing_registry,
        )
    except Exception:
        return None


def jit_program(fun, jit_info, args: tuple, kwargs: dict):
    """``(hoisted constants, jit parameters)`` of a call of a jitted ``fun``, from JAX's trace cache, or None.

    Traces only if this signature was never traced in the current context; the
    parameters hold the program (``params["jaxpr"]``) as the key-reuse path's
    observers see it.
    """
    try:
        from jax._src import pjit

        p, _ = pjit._infer_params(fun, jit_info, args, kwargs)
        return list(p.consts), p.params
    except Exception:
        return None


def jit_options(jitted):
    """The jit options (``PjitInfo``) a jitted function was made with, or None; ``compiled_call`` takes them."""
    return getattr(jitted, "_jit_info", None)


def is_eager_operation(fun) -> bool:
    """True for the function jit wraps around one primitive applied eagerly (``jnp.sin(x)`` outside jit)."""
    return bool(getattr(fun, "_apply_primitive", False))


def tracer_line_info(tracer):
    """The source info JAX recorded where a tracer was made (its ``traceback`` is the user's frames), or None."""
    return getattr(tracer, "_line_info", None)


def abstract_value(info):
    """The abstract value (shape, dtype, weak type) of a traced argument's or output's info, else ``info`` itself."""
    return getattr(info, "_aval", None) or info


def has_abstract_value(info) -> bool:
    return hasattr(info, "_aval")


def typed_key_data(key):
    """The raw uint32 data of a typed key without copying it (``jax.random.key_data`` when JAX keeps it elsewhere)."""
    base = getattr(key, "_base_array", None)
    if base is None:
        import jax

        base = jax.random.key_data(key)
    return base


_PP_CONTEXT_LOCK = threading.Lock()


def jaxpr_equation_printer(jaxpr):
    """A function printing one equation of ``jaxpr`` (or of its sub-jaxprs) with the variable names
    ``str(jaxpr)`` gives it.

    ``str(eqn)`` names the variables of the lone equation afresh (its output becomes ``a``), so the
    text would not match the printed jaxpr. JAX's top-level printer makes a naming context that the
    public API does not hand out: it is recorded while that printer runs, then each equation is
    printed with it. If this JAX does not allow it, the function returned prints like ``str(eqn)``
    and its ``same_names`` attribute is False.
    """
    inner = getattr(jaxpr, "jaxpr", jaxpr)  # a ClosedJaxpr prints its Jaxpr
    context = settings = None
    try:
        from jax._src import core

        made = []
        original = core.JaxprPpContext

        class _Recorded(original):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                made.append(self)

        with _PP_CONTEXT_LOCK:
            core.JaxprPpContext = _Recorded
            try:
                core.pp_toplevel_jaxpr(inner)
            finally:
                core.JaxprPpContext = original
        if made:
            context, settings = made[0], core.JaxprPpSettings()
    except Exception:  # a JAX whose printer moved: print each equation on its own
        context = None

    def text(eqn) -> str:
        if context is None:
            return str(eqn)
        try:
            return core.pp_eqn(eqn, context, settings).format()
        except Exception:
            return str(eqn)

    text.same_names = context is not None
    return text


def program_source(jaxpr) -> tuple[str, str, int] | None:
    """(function name, file, line) a traced program was made from, from its debug info
    (``func_src_info``: "predict at /path/model.py:12"); None when JAX recorded none."""
    info = getattr(getattr(jaxpr, "jaxpr", jaxpr), "debug_info", None)
    text = str(getattr(info, "func_src_info", "") or "")
    name, at, where = text.partition(" at ")
    filename, _, line = where.rpartition(":")
    if not at or not filename or not line.isdigit():
        return None
    return name, filename, int(line)


def transformed_function(function):
    """The function a JAX transformation was applied to: ``loss`` for ``jax.grad(loss)`` or
    ``jax.value_and_grad(loss)``, read through JAX's wrappers (``__wrapped__``, or the closure cell
    ``fun`` / the one callable cell of each wrapper in JAX's own files); None when ``function`` is no
    such wrapper or the chain is not found."""
    current = function
    for _ in range(8):
        code = getattr(current, "__code__", None)
        if code is None or code_kind(code.co_filename) != "jax":
            return None if current is function else current
        inner = getattr(current, "__wrapped__", None)
        if inner is None:
            cells = dict(zip(code.co_freevars, (c.cell_contents for c in current.__closure__ or ())))
            callables = [v for v in cells.values() if callable(v)]
            inner = cells.get("fun") if callable(cells.get("fun")) else callables[0] if len(callables) == 1 else None
        if inner is None:
            return None
        current = inner
    return None


@contextlib.contextmanager
def addressable_shards(x) -> Iterator[list]:
    """``x.addressable_shards``, taken from a second ``Array`` object over the same device buffers (no copy).

    jaxlib caches the per-shard arrays it makes for ``addressable_shards`` (``_arrays``) on the array asked,
    for as long as that array lives: asked on the user's array, a look left ``jax.live_arrays()`` listing
    one more array per shard, held by nothing a holder search can name (issue 52, 7e). The view and its
    shards go when the block ends. An array without jaxlib's rewrap (a typed PRNG key array, another
    jax.Array) is asked itself."""
    rewrap = getattr(x, "_rewrap_with_aval_and_sharding", None)
    view = rewrap(x.aval, x.sharding) if rewrap is not None else x
    shards = list(view.addressable_shards)
    try:
        yield shards
    finally:
        shards.clear()
        del view


def per_device_bytes(x) -> int:
    """Bytes ``x``'s shards take on this process's devices (a replicated array: once per device), from its
    sharding alone - no shard is made."""
    sharding = x.sharding
    devices = len(getattr(sharding, "addressable_devices", ()) or ()) or 1
    shape = sharding.shard_shape(tuple(x.shape))
    size = 1
    for dim in shape:
        size *= int(dim)
    return devices * size * int(x.dtype.itemsize)
