"""A probe that runs the user's code again puts back what that run wrote into the user's objects
(`probes/_support/rerun/kept_state.py`): nnx.jit writes its outputs into the Modules a call reaches, and a
write that fails under a probe's trace left a Module with no attributes at all."""

import pytest

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")

from jaxmagic.probes._support.rerun.kept_state import kept  # noqa: E402


class Holder:
    def __init__(self):
        self.value = jnp.ones(2)
        self.inner = Slotted()


class Slotted:
    __slots__ = ("raw",)

    def __init__(self):
        self.raw = 1.0


HELD = Holder()


def _writes_into_the_global():
    HELD.value = "a tracer, say"
    HELD.inner.raw = 2.0
    del HELD.inner


def test_an_object_a_function_reaches_through_its_globals_is_put_back_with_its_slots():
    inner = HELD.inner
    with kept(_writes_into_the_global) as state:
        _writes_into_the_global()
    assert isinstance(HELD.value, jax.Array) and HELD.inner is inner and inner.raw == 1.0
    assert sorted(state.restored) == ["Holder", "Slotted"]
    assert "put back" in state.note


def test_a_closure_and_an_argument_are_put_back_and_an_untouched_run_says_nothing():
    held = Holder()

    def clears(other):
        vars(held).clear()
        other.value = None

    other = Holder()
    with kept(clears, [other]):
        clears(other)
    assert isinstance(held.value, jax.Array) and isinstance(other.value, jax.Array)
    with kept(clears, [other]) as untouched:
        pass
    assert untouched.restored == [] and untouched.note == ""


def test_an_nnx_module_a_traced_train_step_writes_into_is_whole_afterwards():
    nnx = pytest.importorskip("flax.nnx")
    model = nnx.Linear(2, 1, rngs=nnx.Rngs(0))
    kernel = model.kernel[...]

    @nnx.jit
    def step(model):
        model.kernel[...] = model.kernel[...] * 2.0
        return model.kernel[...].sum()

    def run():  # reaches `model` through its closure, as a cell's function reaches a global Module
        return step(model)

    with kept(run) as state:
        try:
            jax.make_jaxpr(run)()
        except Exception:
            pass  # Flax may refuse to write tracers into an outer Module; either way nothing may stay
    assert "kernel" in vars(model) or hasattr(model, "kernel")
    assert not isinstance(model.kernel[...], jax.core.Tracer)
    assert jnp.array_equal(model.kernel[...], kernel)
    assert state.restored  # the trace wrote into it (or cleared it): it was put back
