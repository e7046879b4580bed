"""JAX still has the private structure jaxmagic's ``_jax`` patches rely on: a JAX upgrade fails here first."""

import inspect

import jax
import pytest

from jaxmagic._jax import compat, prng_checks


def test_keys_random_core_has_the_key_check():
    core = compat.random_core()
    assert core is not None, "jax._src.random.core is gone"
    check = getattr(core, prng_checks.CHECK_NAME, None)
    assert callable(check), "jax._src.random.core._check_prng_key is gone"
    parameters = list(inspect.signature(check).parameters)
    assert parameters[:2] == ["name", "key"]


@pytest.mark.parametrize("make_key", [jax.random.key, jax.random.PRNGKey], ids=["typed", "legacy"])
def test_keys_eager_random_calls_pass_through_the_patched_check(make_key):
    seen = []
    key = make_key(0)
    with prng_checks.following_key_checks(lambda name, k, frame: seen.append((name, k, frame))) as following:
        assert following
        jax.random.uniform(key, (2,))
        jax.random.permutation(key, 4)
    assert prng_checks.key_check() is getattr(compat.random_core(), prng_checks.CHECK_NAME)
    names = [name for name, _, _ in seen]
    assert "uniform" in names and "permutation" in names
    name, k, frame = next(item for item in seen if item[0] == "uniform")
    assert k is key
    assert "key" in frame.f_code.co_varnames  # the drawing function's frame: its arguments are its locals


def test_keys_following_restores_the_check_and_drops_follow_errors():
    original = prng_checks.key_check()

    def follow(name, key, frame):
        raise RuntimeError("ours")

    with prng_checks.following_key_checks(follow):
        assert prng_checks.key_check() is not original
        jax.random.normal(jax.random.key(1), (2,))
    assert prng_checks.key_check() is original


def test_jit_options_are_read_from_the_jitted_function():
    def f(x, n):
        return x * n

    info = compat.jit_options(jax.jit(f, static_argnums=(1,), donate_argnums=(0,)))
    assert info is not None, "a jitted function no longer keeps its options in _jit_info"
    assert tuple(info.static_argnums) == (1,) and tuple(info.donate_argnums) == (0,)
    for field in ("static_argnames", "donate_argnames", "keep_unused"):
        assert hasattr(info, field), f"PjitInfo has no {field}"


def test_an_eager_operation_is_told_from_a_users_jitted_function():
    from jax._src import dispatch  # the structure under test is private by nature

    eager = dispatch.xla_primitive_callable(jax.lax.sin_p)  # what jnp.sin(x) outside jit compiles
    assert compat.is_eager_operation(eager.__wrapped__), "eager primitives are no longer marked _apply_primitive"
    assert not compat.is_eager_operation(jax.jit(lambda x: x).__wrapped__)


def test_a_tracer_keeps_the_line_it_was_made_on():
    lines = []

    def f(x):
        y = x * 2
        lines.append(compat.tracer_line_info(y))
        return y

    jax.jit(f)(1.0)
    info = lines[0]
    assert info is not None and hasattr(info, "traceback"), "tracers no longer keep their source info"
    frame = compat.user_frame(info.traceback)
    assert frame is not None and frame.function_name.endswith("f")


def test_traced_argument_info_has_an_abstract_value():
    traced = jax.jit(lambda x: x + 1).trace(jax.numpy.ones((2, 3)))
    leaf = jax.tree_util.tree_leaves(traced.args_info, is_leaf=compat.has_abstract_value)[0]
    assert compat.has_abstract_value(leaf), "ArgInfo no longer keeps _aval"
    assert tuple(compat.abstract_value(leaf).shape) == (2, 3)


def test_typed_key_data_reads_the_raw_words():
    key = jax.random.key(7)
    assert (jax.numpy.asarray(compat.typed_key_data(key)) == jax.random.key_data(key)).all()


def test_scan_frame_keeps_its_body_initial_carry_and_step_shapes():
    # _jax/loop_call.py reads JAX's scan frame: f, init_flat (a flat tree) and x_avals
    import jax.numpy as jnp
    from jax import lax

    from jaxmagic._jax.loop_call import loop_call
    from jaxmagic._jax.transform_stack import stack_at_raise

    def body(c, x):
        total, n = c
        return (total + jnp.zeros(n).sum() + x, n), None

    try:
        lax.scan(body, (0.0, 3), jnp.ones((4, 2)))
    except TypeError as error:
        found = loop_call(stack_at_raise(error), "scan", "body")
    assert found is not None
    assert found.init == (0.0, 3) and found.step.shape == (2,) and found.carry_position == 0
