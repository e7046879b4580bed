"""Donation is a way down only where the caller no longer needs the argument: the call's line says so.

``donate_argnums`` lets XLA write the call's results over an argument, and the caller's array is deleted:
reading it afterwards fails. The programs are our own minimal versions of real threads:

* jax-ml/jax#16906 - ``fn(x, y)`` with ``y`` donated, then ``print(y)``: "RuntimeError: Array has been
  deleted"; jax-ml/jax#9675 - the same donating function called twice on one array;
* jax-ml/jax#16647 - ``loop_state, replay_state = fori_loop_fn(loop_state, replay_state)``: the line rebinds
  what it donates, the shape of every training loop that donates;
* poets-ai/elegy#226 - donating a model's buffers in every step function broke a user's code that still read
  them;
* a gradient function (issue 63's scan over layers): ``grads = grad_fn(params, x)`` then
  ``params - lr * grads`` - donating ``params`` would let XLA write the gradients over it (same shapes).

Each cell runs for real on small arrays; the report is read from the call's own line (nothing evaluated).
"""

from __future__ import annotations

import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from jaxmagic import probes  # noqa: E402
from jaxmagic.probes._memory import memory_of_call  # noqa: E402
from jaxmagic.probes._support.calls.after_call import FREE, KEPT, UNKNOWN, argument_after_call  # noqa: E402

N = 1024  # a 4 MiB f32[N,N]: donating it takes a quarter to a half off these programs' peaks


def _donation(report):
    [program] = report.programs
    [way] = [w for w in program.ways_down if w.kind == "donate"]
    return program, way


def add_one(x):
    return x + 1


def test_donating_an_array_the_line_leaves_bound_is_measured_and_not_offered():
    """jax#16906 / jax#9675: the caller reads `buf` again after the call; a donated `buf` is deleted by it."""
    donating = jax.jit(add_one, donate_argnums=(0,))
    probe = jnp.ones((N, N))
    donating(probe)
    assert probe.is_deleted()  # the premise, on this CPU: donation deletes the caller's array
    step = jax.jit(add_one)
    buf = jnp.ones((N, N))
    with probes.memory() as report:
        out = step(buf)
    program, way = _donation(report)
    assert way.lowers and way.peak_after is not None  # measured: it would lower the peak ...
    assert way not in program.offered  # ... and is not offered: `buf` is still the caller's
    assert way.withheld.startswith("`buf` may be used after the call (the line does not rebind it)")
    assert way.withheld.endswith("donate only if you no longer need it")
    assert not report.fix.startswith("donate") and "Not offered: donate `x`" in report.fix
    assert report.status.value == "ok" and float(buf[0, 0]) == 1.0 and float(out[0, 0]) == 2.0


def test_a_line_that_rebinds_what_it_passes_is_offered_donation():
    """jax#16647: `loop_state, replay_state = fori_loop_fn(loop_state, replay_state)` - both rebound."""

    def advance(loop_state, replay_state):
        return loop_state * 0.5, replay_state + loop_state

    step = jax.jit(advance)
    loop_state, replay_state = jnp.ones((N, N)), jnp.zeros((N, N))
    with probes.memory() as report:
        loop_state, replay_state = step(loop_state, replay_state)
    program, way = _donation(report)
    assert way in program.offered and not way.withheld
    assert way.title.startswith("donate `loop_state`, `replay_state` (donate_argnums=(0, 1)")
    assert report.fix.startswith("donate `loop_state`, `replay_state`") and "tried by compiling for cpu" in report.fix


def test_only_what_the_line_rebinds_is_donated():
    """`params = update(params, grads)`: `params` is rebound, `grads` still the caller's - the trial donates
    `params` alone, and says why `grads` was left out."""

    def update(params, grads):
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads)

    step = jax.jit(update)
    params = {"w": jnp.ones((N, N))}
    grads = {"w": jnp.ones((N, N))}
    with probes.memory() as report:
        params = step(params, grads)
    program, way = _donation(report)
    assert way in program.offered and "donate_argnums=(0,)" in way.title and "`grads`" not in way.title
    assert "left out: `grads` may be used after the call" in way.how
    alone = jax.jit(update, donate_argnums=(0,))
    [measured] = memory_of_call(alone, (params, grads), try_ways=False).programs
    assert way.peak_after == measured.peak_bytes  # the trial is the program the offered code makes


def test_a_temporary_argument_is_free_to_donate():
    """`out = step(jnp.ones(...))`: nothing but the call holds the argument."""
    step = jax.jit(add_one)
    with probes.memory() as report:
        out = step(jnp.ones((N, N)))
    program, way = _donation(report)
    assert way in program.offered and float(out[0, 0]) == 2.0


def loss(params, x):
    return ((x @ params) ** 2).mean()


def test_a_gradient_functions_params_are_not_offered_for_donation():
    """The gradient has the parameters' shape, so XLA can write it over them: donation lowers the peak and
    deletes `params`, which the update on the next line reads."""
    grad_fn = jax.jit(jax.grad(loss))
    params, x = jnp.ones((N, N)) * 0.01, jnp.ones((2 * N, N))  # only `params` has the gradient's shape
    with probes.memory() as report:
        grads = grad_fn(params, x)
    params = params - 0.1 * grads
    program, way = _donation(report)
    assert way.lowers and way not in program.offered and "donate_argnums=(0,)" in way.title
    assert way.withheld.startswith("`params` may be used after the call (the line does not rebind it)")
    assert not report.fix.startswith("donate")
    donating = jax.jit(jax.grad(loss), donate_argnums=(0,))
    kept = jnp.ones((N, N)) * 0.01
    new = donating(kept, x)
    with pytest.raises(RuntimeError, match="deleted"):  # what the withheld way would have done to the update
        kept - 0.1 * new


def test_a_call_measured_without_its_line_cannot_tell_and_says_so():
    """`memory_of_call(fn, specs)`: no line of the user's makes the call; `%jax_memory step(buf)`: the magic's
    call rebinds nothing. Neither offers donation; each says why in its own words."""
    spec = (jax.ShapeDtypeStruct((N, N), jnp.float32),)
    [program] = memory_of_call(jax.jit(add_one), spec).programs
    [way] = [w for w in program.ways_down if w.kind == "donate"]
    assert way not in program.offered and way.withheld.startswith("whether `x` is used after the call cannot be told")
    [program] = memory_of_call(jax.jit(add_one), spec, call="step(buf)").programs
    [way] = [w for w in program.ways_down if w.kind == "donate"]
    assert way not in program.offered and way.withheld.startswith("`buf` may be used after the call")


@pytest.mark.parametrize(
    ("line", "position", "verdict", "written"),
    [
        ("params, opt_state = step(params, opt_state, batch)", 0, FREE, "params"),
        ("params, opt_state = step(params, opt_state, batch)", 2, KEPT, "batch"),
        ("state = step(state.params, batch)", 0, FREE, "state.params"),  # the holder rebound
        ("out = step(init(key), batch)", 0, FREE, "init(key)"),  # a temporary
        ("out = step(jnp.asarray(params), batch)", 0, KEPT, "params"),  # may hand back `params` itself
        ("grads = grad_fn(params, x)", 0, KEPT, "params"),  # the callee under another name: the bound call
        ("params += step(params, batch)", 0, KEPT, "params"),  # reads the deleted array to add to it
        ("out = step(*args)", 0, UNKNOWN, ""),
        ("", 0, UNKNOWN, ""),
    ],
)
def test_the_line_says_whether_the_caller_keeps_the_argument(line, position, verdict, written):
    after = argument_after_call(line, "step", position, "params")
    assert (after.verdict, after.written) == (verdict, written), after.why
