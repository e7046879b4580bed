"""The provenance service: where a value was made, in which function under which
transformations, and which call started it - from equations, frames, messages, NumPy."""

import gc
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from jaxmagic.probes._support import attribution


def _equations(program, enclosing=()):
    """Every equation of a jaxpr with the equations around it, outermost first."""
    for eqn in program.eqns:
        yield eqn, enclosing
        for value in eqn.params.values():
            for sub in value if isinstance(value, tuple) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    yield from _equations(inner, (*enclosing, eqn))


def loss_fn(w, x):
    def body(carry, xi):
        return carry + jnp.log(xi * w), None  # line of the log

    total, _ = lax.scan(body, 0.0, x)
    return jax.nn.logsumexp(total * x)


def step(w, x):
    return jax.grad(loss_fn)(w, x)


def _found(program, primitive, backward=None):
    for eqn, enclosing in _equations(program.jaxpr):
        if eqn.primitive.name != primitive:
            continue
        prov = attribution.of_equation(eqn, enclosing)
        if backward is None or ("grad (backward pass)" in prov.transforms) == backward:
            return prov
    raise AssertionError(f"no {primitive}")


def test_an_operation_in_a_scan_body_under_vmap_jit_grad_names_the_body_line_and_the_whole_path():
    program = jax.make_jaxpr(jax.vmap(jax.jit(step), in_axes=(None, 0)))(1.0, jnp.ones((2, 3)))
    prov = _found(program, "log")
    assert prov.made_at is not None and prov.made_at.code.endswith("# line of the log")
    assert prov.function == "body"
    assert prov.transforms == ["vmap", "jit(step)", "jvp", "scan body"]
    assert prov.library_function == ""  # jnp.log on the user's own line: no library function to name


def test_a_library_functions_backward_operation_names_the_public_function_and_the_users_line():
    program = jax.make_jaxpr(jax.jit(step))(1.0, jnp.ones(3))
    prov = _found(program, "div", backward=True)
    assert prov.library_function == "jax.nn.logsumexp"
    assert prov.made_at is not None and "logsumexp" in prov.made_at.code
    assert prov.transforms[-1] == "grad (backward pass)" and prov.transforms[0] == "jit(step)"


def test_jaxs_message_names_the_line_that_made_a_tracer_from_static_values():
    @jax.jit
    def f(x):
        n = jnp.add(x.size, 1)  # made here
        return jnp.ones((n,))

    try:
        f(jnp.ones(3))
    except TypeError as err:
        prov = attribution.of_message(str(err))
    assert prov is not None and prov.made_at is not None
    assert prov.made_at.code == "n = jnp.add(x.size, 1)  # made here"
    assert prov.transforms == ["jit(f)"]
    assert prov.started_by is None  # the message's "at file:line" is the definition, not a call


def test_a_message_without_a_user_line_says_nothing():
    assert attribution.of_message("invalid value (nan) encountered in log") is None


def test_numpy_array_line_comes_from_its_allocation_and_says_why_when_not_recorded():
    assert attribution.of_numpy_built(np.ones(3)).unknown  # tracemalloc off: says so, names no line
    tracemalloc.start()
    try:
        table = np.arange(1000.0)  # allocated here
        prov = attribution.of_numpy_built(table)
    finally:
        tracemalloc.stop()
    assert prov.made_at is not None and prov.made_at.code.endswith("# allocated here")
    del table
    gc.collect()


def test_a_frame_gives_its_line_and_the_outermost_user_line_as_the_start():
    def inner():
        return attribution.of_frame(__import__("sys")._getframe())

    prov = inner()
    assert prov.made_at is not None and prov.function.endswith("inner")
    assert prov.started_by is not None
    assert prov.started_by.function == "test_a_frame_gives_its_line_and_the_outermost_user_line_as_the_start"
    assert prov.started_by.code == "prov = inner()"
