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
