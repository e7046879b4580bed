"""JAX still has the private structure jaxmagic's ``_jax`` patches rely on: a JAX upgrade fails here first."""

import inspect

import jax
import pytest

from jaxmagic._jax import array_shards, jit_internals, key_internals, prng_checks, recorded_sources, runtime


def test_keys_random_core_has_the_key_check():
    core = key_internals.random_core()
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
    assert prng_checks.key_check() is getattr(key_internals.random_core(), prng_checks.CHECK_NAME)
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

    info = jit_internals.jit_options(jax.jit(f, static_argnums=(1,), donate_argnums=(0,)))
    assert info is not None, "a jitted function no longer keeps its options in _jit_info"
    assert tuple(info.static_argnums) == (1,) and tuple(info.donate_argnums) == (0,)
    for field in ("static_argnames", "donate_argnames", "keep_unused"):
        assert hasattr(info, field), f"PjitInfo has no {field}"


def test_an_eager_operation_is_told_from_a_users_jitted_function():
    from jax._src import dispatch  # the structure under test is private by nature

    eager = dispatch.xla_primitive_callable(jax.lax.sin_p)  # what jnp.sin(x) outside jit compiles
    assert jit_internals.is_eager_operation(eager.__wrapped__), "eager primitives are no longer marked _apply_primitive"
    assert not jit_internals.is_eager_operation(jax.jit(lambda x: x).__wrapped__)


def test_a_tracer_keeps_the_line_it_was_made_on():
    lines = []

    def f(x):
        y = x * 2
        lines.append(recorded_sources.tracer_line_info(y))
        return y

    jax.jit(f)(1.0)
    info = lines[0]
    assert info is not None and hasattr(info, "traceback"), "tracers no longer keep their source info"
    frame = recorded_sources.user_frame(info.traceback)
    assert frame is not None and frame.function_name.endswith("f")


def test_traced_argument_info_has_an_abstract_value():
    traced = jax.jit(lambda x: x + 1).trace(jax.numpy.ones((2, 3)))
    leaf = jax.tree_util.tree_leaves(traced.args_info, is_leaf=jit_internals.has_abstract_value)[0]
    assert jit_internals.has_abstract_value(leaf), "ArgInfo no longer keeps _aval"
    assert tuple(jit_internals.abstract_value(leaf).shape) == (2, 3)


def test_typed_key_data_reads_the_raw_words():
    key = jax.random.key(7)
    assert (jax.numpy.asarray(key_internals.typed_key_data(key)) == jax.random.key_data(key)).all()


def test_debug_loops_are_replaced_where_user_code_and_fori_loop_find_them_and_put_back():
    from jax._src.lax.control_flow import loops

    from jaxmagic._jax.loop_patches import loops_replaced

    assert jax.lax.scan is loops.scan, "jax.lax.scan is no longer the loops module's scan"
    calls = []

    def scan(f, init, xs=None, length=None, **options):
        calls.append(length)
        return original.scan(f, init, xs, length=length, **options)

    with loops_replaced(scan, jax.vmap) as original:
        jax.lax.scan(lambda c, x: (c + x, x), 0.0, jax.numpy.ones(3))
        jax.lax.fori_loop(0, 4, lambda i, c: c + i, 0)  # fori_loop with static bounds calls the module's scan
    assert calls == [None, 4]
    assert jax.lax.scan is loops.scan is original.scan and jax.vmap is original.vmap


def test_debug_vmap_parts_are_read_from_jax_vmap_f_closure():
    from jaxmagic._jax.loop_patches import vmap_parts

    def per_example(x, y):
        return x * y

    parts = vmap_parts(jax.vmap(per_example, in_axes=(0, None)))
    assert parts is not None and parts.function is per_example and parts.in_axes == (0, None)
    assert vmap_parts(jax.jit(jax.vmap(per_example))).function is per_example  # through a jit around it
    assert vmap_parts(per_example) is None and vmap_parts(jax.jit(per_example)) is None


def test_debug_breakpoint_backend_is_chosen_over_jax_own_and_removed():
    from jax._src.debugger import core

    from jaxmagic._jax.debugger_backends import breakpoint_backend

    hits = []

    def f(x):
        y = x + 1
        jax.debug.breakpoint()
        return y

    with breakpoint_backend("jaxmagic", hits.append):
        jax.jit(f)(jax.numpy.ones(2))
    assert "jaxmagic" not in core._debugger_registry
    frame = hits[0][0]
    assert frame.filename == __file__ and frame.locals["y"].shape == (2,)


def test_debug_callback_has_a_batching_rule_in_the_table_jaxmagic_replaces():
    from jax._src import debugging
    from jax._src.interpreters import batching

    from jaxmagic._jax.debugger_backends import batch_elements_told, batch_position

    rule = batching.fancy_primitive_batchers[debugging.debug_callback_p]
    seen = []
    with batch_elements_told():
        jax.vmap(lambda x: jax.debug.callback(lambda v: seen.append((batch_position(), float(v))), x))(
            jax.numpy.arange(2.0)
        )
    assert batching.fancy_primitive_batchers[debugging.debug_callback_p] is rule
    assert sorted(seen) == [((0,), 0.0), ((1,), 1.0)]


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


def test_cond_and_switch_frames_keep_their_branches_and_operands():
    # _jax/loop_call.branch_call reads JAX's cond frame (true_fun, false_fun, operands) and switch's
    # (branches, operands), and the line that called them
    import jax.numpy as jnp
    from jax import lax

    from jaxmagic._jax.loop_call import branch_call
    from jaxmagic._jax.transform_stack import stack_at_raise

    def yes(n):
        return jnp.arange(n)

    for kind, call in (
        ("cond", lambda: lax.cond(True, yes, lambda n: jnp.zeros(n), 3)),
        ("switch", lambda: lax.switch(0, [yes, lambda n: jnp.zeros(n)], 3)),
    ):
        try:
            call()
        except Exception as error:  # a ConcretizationTypeError from jnp.arange of the traced operand
            found = branch_call(stack_at_raise(error), kind, "yes")
        assert found is not None, kind
        assert found.operands == (3,) and yes in found.branches and found.called_at is not None


def test_top_level_check_agrees_with_jax_own_trace_state_clean():
    # The fast check reads the states core.trace_state_clean reads (issue 44): it must answer the same
    # at the top level, inside jit, grad and vmap traces, and under an axis name (a pmap/shard_map axis).
    import jax
    import jax.numpy as jnp
    from jax._src import core

    fast = runtime.top_level_check()
    assert fast is not None and fast() is True and core.trace_state_clean() is True
    seen = []

    def record(x):
        seen.append((fast(), core.trace_state_clean()))
        return x * 2.0

    jax.jit(record)(jnp.ones(2))
    jax.grad(lambda x: record(x).sum())(jnp.ones(2))
    jax.vmap(record)(jnp.ones((2, 2)))
    with core.extend_axis_env_nd([("i", 2)]):
        seen.append((fast(), core.trace_state_clean()))
    assert seen and all(ours == theirs for ours, theirs in seen), seen
    assert fast() is True


def test_the_compile_frames_hold_the_program_and_the_donation_lowering():
    # _jax/compile_frames.py reads pjit's `jaxpr` local at a compilation and mlir's lowering locals at the
    # "donated buffers were not usable" warning
    import inspect

    from jax._src import pjit
    from jax._src.interpreters import mlir

    assert "jaxpr" in inspect.signature(pjit._pjit_call_impl_python).parameters
    lowering = inspect.signature(mlir.lower_jaxpr_to_module).parameters
    assert {"module_name", "jaxpr", "in_avals", "donated_args", "arg_names", "platforms"} <= set(lowering)
    # the output types: JAX 0.12's out_avals, or JAX 0.10's ClosedJaxpr (its annotation: core.ClosedJaxpr)
    assert "out_avals" in lowering or "ClosedJaxpr" in str(lowering["jaxpr"].annotation)


def test_the_compiled_program_records_which_inputs_it_kept():
    # _jax/program_inputs.py reads Compiled's kept inputs and hoisted constants, and at a compilation
    # pjit's `donated_invars` / `keep_unused` and pxla's `from_hlo` `kept_var_idx` / `all_args_info`
    import inspect

    import jax.numpy as jnp
    from jax._src import pjit
    from jax._src.interpreters import pxla

    from jaxmagic._jax.program_inputs import program_inputs

    compiled = jax.jit(lambda a, unused, b: a + b).trace(jnp.ones(2), jnp.ones(3), jnp.ones(2)).lower().compile()
    assert hasattr(compiled._executable, "_kept_var_idx") and hasattr(compiled._params, "const_args")
    inputs = program_inputs(compiled)
    assert (inputs.inputs, inputs.kept, inputs.unread) == (3, (0, 2), [1])
    assert (inputs.parameter_of(2), inputs.input_of(1 + inputs.constants)) == (1 + inputs.constants, 2)
    assert {"donated_invars", "keep_unused", "jaxpr"} <= set(inspect.signature(pjit._pjit_call_impl_python).parameters)
    assert {"kept_var_idx", "all_args_info"} <= set(inspect.signature(pxla.UnloadedMeshExecutable.from_hlo).parameters)


def test_jit_prunes_inputs_by_its_own_dead_code_elimination():
    # _jax/program_inputs.inputs_jit_prunes calls pxla.prune_unused_inputs, as lowering does: an input read
    # only by code whose result is unused is pruned, an input under an effect (a debug print) is kept
    import jax.numpy as jnp

    from jaxmagic._jax.program_inputs import inputs_jit_prunes

    def f(a, dead, printed, b):
        _ = dead @ a  # its result unused
        jax.debug.print("{}", printed)
        return a + b

    traced = jax.jit(f).trace(jnp.ones(2), jnp.ones((2, 2)), jnp.ones(2), jnp.ones(2))
    assert inputs_jit_prunes(traced.jaxpr) == {1}
    assert traced.lower().compile().input_shardings[0][1] is None  # JAX agrees: no parameter for it


def test_the_persistent_cache_state_is_readable():
    from jax._src import compilation_cache

    from jaxmagic._jax.persistent_cache import cache_state

    assert hasattr(compilation_cache, "_cache") and hasattr(compilation_cache, "_cache_initialized")
    state = cache_state()
    assert state.min_compile_seconds >= 0 and state.enabled in (True, False)


def test_the_backend_compile_event_is_recorded_in_cached_compilation_with_the_lowered_module():
    # jaxmagic._jax.program_prints reads the module being compiled from that frame (%jax_gather's programs)
    from jax import monitoring

    from jaxmagic._jax import program_prints

    printed = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            printed.append(program_prints.print_of_compilation(lambda filename, lineno: f"line {lineno}"))

    monitoring.register_event_duration_secs_listener(listener)
    try:
        jax.jit(lambda x: x * 3.0 + 1.0)(jax.numpy.ones(5))
    finally:
        monitoring.unregister_event_duration_listener(listener)
    assert printed and printed[-1] is not None, "pxla._cached_compilation no longer holds `computation`"
    assert printed[-1].op_count >= 3 and any("stablehlo.multiply" in op[1] for op in printed[-1].ops)


def test_transformations_are_read_back_from_jaxs_wrappers():
    """vmap_f keeps in_axes/out_axes and the mapped function, grad_f its value_and_grad_f, which keeps the
    differentiated function and argnums (the memory probe's batch gradient and lax.map chunks read them)."""
    from jaxmagic._jax.transform_chain import per_example_gradient, vmapped

    def loss(w, x):
        return (x @ w) ** 2

    per_example = jax.jit(jax.vmap(jax.grad(loss, argnums=0), in_axes=(None, 0)))
    read = per_example_gradient(per_example)
    assert read is not None and read.function is loss and read.in_axes == (None, 0) and read.argnums == 0
    mapped = vmapped(jax.jit(jax.vmap(loss, in_axes=(None, 0), out_axes=0)))
    assert mapped is not None and mapped.function is loss and mapped.in_axes == (None, 0) and mapped.out_axes == 0
    assert per_example_gradient(jax.jit(loss)) is None and vmapped(jax.jit(loss)) is None


def test_a_compilation_dumps_its_buffer_assignment_and_live_ranges():
    """compiler_options={"xla_dump_to": ...} per compilation writes the optimized module, the buffer assignment
    and the live ranges with a peak section (the memory probe reads the three)."""
    from jaxmagic._jax.compile_dumps import compile_with_memory_dumps

    lowered = jax.jit(lambda x: jax.numpy.outer(x, x).sum(axis=0)).trace(jax.ShapeDtypeStruct((64,), "float32")).lower()
    compiled, dumps = compile_with_memory_dumps(lowered)
    assert dumps.hlo.startswith("HloModule")
    assert "allocation 0: size" in dumps.buffer_assignment and " value: <" in dumps.buffer_assignment
    assert "(peak):" in dumps.live_range and "BufferLiveRange:" in dumps.live_range
    assert compiled.memory_analysis() is not None
    assert dumps.platform == jax.default_backend()  # the lowering's platform, read from JAX's private lowering object


def test_addressable_shards_come_from_a_view_that_shares_the_buffers_and_goes():
    # jaxlib caches the per-shard arrays of `addressable_shards` on the array asked (`_arrays`, no setter);
    # array_shards.addressable_shards asks a second Array over the same buffers (`_rewrap_with_aval_and_sharding`)
    import gc

    x = jax.numpy.arange(6.0) * 2
    assert hasattr(x, "_rewrap_with_aval_and_sharding"), "jaxlib's ArrayImpl no longer rewraps"
    gc.collect()
    before = len(jax.live_arrays())
    with array_shards.addressable_shards(x) as shards:
        assert len(shards) == 1 and shards[0].data.unsafe_buffer_pointer() == x.unsafe_buffer_pointer()  # no copy
    gc.collect()
    assert len(jax.live_arrays()) == before, "the view's per-shard arrays outlived it"
    assert array_shards.per_device_bytes(x) == 6 * 4
