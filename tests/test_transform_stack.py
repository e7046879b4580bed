"""The private JAX structure `_jax/transform_stack.py` relies on: API frames holding the function they
transform, jit's cache_miss keeping the call, the leak checker's error builder, tracers' line info."""

from __future__ import annotations

import sys

import jax
import jax.numpy as jnp
import pytest

from jaxmagic._jax import transform_stack


def test_the_stack_inside_a_loss_under_grad_under_jit_names_each_transformation_and_function():
    seen = []

    def loss(w):
        seen.append(transform_stack.of_stack(sys._getframe()))
        return jnp.sum(w**2)

    @jax.jit
    def step(w):
        return jax.grad(loss)(w)

    step(jnp.ones(2))
    [path] = seen
    assert [(t.name, t.function) for t in path] == [("jit", "step"), ("grad", "loss")]
    assert [t.label for t in path] == ["jit(step)", "grad"]
    assert path[1].called_from.code == "return jax.grad(loss)(w)" and path[1].parameters == ("w",)


@pytest.mark.parametrize("how", ["vmap", "scan"])
def test_vmap_and_scan_frames_hold_the_function(how):
    seen = []

    def body(c, x):
        seen.append(transform_stack.of_stack(sys._getframe()))
        return c, x

    if how == "vmap":
        jax.vmap(lambda x: body(0, x))(jnp.ones(2))
        assert [t.name for t in seen[0]] == ["vmap"]
    else:
        jax.lax.scan(body, 0.0, jnp.ones(2))
        assert [(t.name, t.function, t.label) for t in seen[0]] == [("scan", "body", "scan body")]


def test_the_leak_checkers_error_builder_is_watched():
    kept = []

    def f(x):
        kept.append(x * 2)
        return x

    with transform_stack.leak_error_stacks() as stacks:
        with pytest.raises(Exception, match="Leaked trace"), jax.checking_leaks():
            jax.jit(f)(jnp.ones(2))
    assert [[t.label for t in stack] for stack in stacks] == [["jit(f)"]]
    assert transform_stack.line_info(kept[0]) is not None
    assert transform_stack.traced_for(kept[0]) == ("jit", "f")


def test_the_stack_where_an_error_was_raised_keeps_jits_call():
    def count_up(n):
        return jnp.arange(n)

    try:
        jax.jit(count_up)(3)
    except Exception as error:
        frames = transform_stack.stack_at_raise(error)
        assert [t.label for t in transform_stack.transformations(frames)] == ["jit(count_up)"]
        fun, args, kwargs, static = transform_stack.jit_call(frames, "count_up")
        assert fun is count_up and args == (3,) and kwargs == {}
        assert static == {"static_argnums": (), "static_argnames": ()}
        del frames, fun
