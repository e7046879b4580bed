"""The program probe (%jax_hlo): named scopes across stages, baked values, memory."""

from __future__ import annotations

import argparse
import gc
import json
import weakref

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmagic import probes
from jaxmagic.ipython.call_expression import split_scope_and_call
from jaxmagic.ipython.option_types import sweep as parse_sweep
from jaxmagic.probes import ProbeArgumentError
from jaxmagic.probes._hlo import Sweep, parse_stages
from jaxmagic.probes._hlo.name_paths import collapse_repeats, find_run, parse_name, scope_path, split_query
from jaxmagic.report import Status


def scoped_mlp(params, x):
    with jax.named_scope("encoder"):
        h = jax.nn.relu(x @ params["w1"])  # ENCODER LINE
        with jax.named_scope("attn"):
            h = h * 2
    with jax.named_scope("head"):
        out = h @ params["w2"]
        loss = jnp.mean(out**2)
    return loss


P = {"w1": jnp.ones((4, 8)) * 0.1, "w2": jnp.ones((8, 2)) * 0.1}
X = jnp.ones((3, 4))


def line_of(marker: str) -> int:
    import inspect

    lines, start = inspect.getsourcelines(scoped_mlp)
    return start + next(i for i, text in enumerate(lines) if marker in text)


# -- name paths ---------------------------------------------------------------


def test_name_paths():
    path = parse_name("jit(g)/transpose(jvp())/while/body/eval_jaxpr/step/encoder/step/encoder/jit(relu)/max")
    assert path.backward and path.op == "max"
    assert "jit(relu)" in path.segments and "jvp()" not in path.segments
    assert scope_path(path, {"step", "encoder"}) == ("step", "encoder")  # JAX's repeat removed
    old_style = parse_name("jit(f)/transpose(jvp(encoder))/dot_general")
    assert old_style.backward and scope_path(old_style, {"encoder"}) == ("encoder",)
    assert collapse_repeats(("a", "b", "a", "b", "c")) == ("a", "b", "c")
    assert split_query("jit(f)/encoder/attn") == ("encoder", "attn")
    assert find_run(("step", "encoder", "attn"), ("encoder", "attn")) == 3
    assert find_run(("encoder",), ("attn",)) == -1


def test_magic_line_parsing():
    assert split_scope_and_call("scoped_mlp(p, x)") == (None, "scoped_mlp(p, x)")
    assert split_scope_and_call("encoder/attn scoped_mlp(p, x)") == ("encoder/attn", "scoped_mlp(p, x)")
    assert split_scope_and_call("'layer 1' f(x)") == ("layer 1", "f(x)")
    with pytest.raises(ValueError, match="two expressions"):
        split_scope_and_call("f(x) g(y)")
    assert parse_sweep("B=64,256,1024") == ("B", [64, 256, 1024])
    with pytest.raises(argparse.ArgumentTypeError, match="NAME=V1"):
        parse_sweep("64,256")
    assert parse_stages("hlo,jaxpr") == ["jaxpr", "hlo"] and parse_stages("all") == ["jaxpr", "stablehlo", "hlo"]
    with pytest.raises(ProbeArgumentError, match="unknown stages") as raised:
        parse_stages("xla")
    assert raised.value.parameter == "stage"


# -- scopes -------------------------------------------------------------------


def test_scope_in_three_stages_with_lines():
    report = probes.hlo(scoped_mlp, P, X, scope="encoder", call_text="scoped_mlp(P, X)")
    assert report.status is Status.OK and report.function == "jit(scoped_mlp)"
    counts = report.counts
    assert counts["jaxpr"] >= 2 and counts["stablehlo"] >= 2 and counts["hlo"] >= 2
    jaxpr_ops = {op.op for op in report.ops_in("jaxpr")}
    assert {"dot_general", "max", "mul"} <= jaxpr_ops
    assert all(op.full_name.startswith("jit(scoped_mlp)/encoder/") for op in report.ops)
    # the chapter's check: the matmul is in the optimized HLO under encoder/dot_general
    assert any(op.full_name.endswith("encoder/dot_general") for op in report.ops_in("hlo"))
    # each stage names the user's line
    dot_lines = {op.stage: op.line.lineno for op in report.ops if op.op == "dot_general"}
    assert dot_lines == {
        "jaxpr": line_of("ENCODER LINE"),
        "stablehlo": line_of("ENCODER LINE"),
        "hlo": line_of("ENCODER LINE"),
    }
    # nested scope is reported relative to the query
    assert {op.inner for op in report.ops if op.op == "mul"} == {"attn"}
    assert report.kernels and all(k.scope_ops >= 1 for k in report.kernels)
    assert "encoder" in report.summary and "head" not in {op.inner for op in report.ops}


def test_nested_scope_query():
    report = probes.hlo(scoped_mlp, P, X, scope="encoder/attn")
    assert {op.op for op in report.ops} == {"mul"}
    assert report.counts["jaxpr"] == 1 and report.counts["hlo"] == 1


def test_scope_tree_without_scope():
    report = probes.hlo(scoped_mlp, P, X)
    assert report.scope_paths == ["encoder", "encoder/attn", "head"]
    tree = {node.path: node.counts for node in report.tree}
    assert tree["encoder"]["jaxpr"] == 3 and tree["encoder/attn"]["jaxpr"] == 1 and tree["head"]["jaxpr"] == 4
    assert tree["head"]["hlo"] >= 1 and tree["encoder"]["kernels"] >= 1
    assert "3 named scopes" in report.summary


def test_missing_scope_suggests_close_names():
    report = probes.hlo(scoped_mlp, P, X, scope="encodr", stage="jaxpr")
    assert not report.scope_found and report.status is Status.PROBLEM
    assert report.suggestions[0] == "encoder" and "Did you mean 'encoder'" in report.summary


def test_scope_that_fusion_files_under_another_name():
    def f(x):
        with jax.named_scope("a"):
            y = jnp.sin(x)
        with jax.named_scope("b"):
            return y * 2

    report = probes.hlo(f, jnp.ones(8), scope="a")
    (sin,) = report.ops_in("hlo")
    # XLA loop-fuses sin and mul; the fusion keeps the root's op_name (scope b)
    assert sin.kernel and not sin.kernel_in_scope and sin.kernel_label.endswith("/b/mul")
    (kernel,) = report.fused_away
    assert kernel.opcode == "fusion" and kernel.scope_ops == 1 and kernel.other_ops >= 1
    assert "labels with another name" in report.summary
    text = str(report)
    assert "A fusion keeps one op_name" in text


def test_scopes_inside_scan_and_grad():
    def loss(params, xs):
        def body(c, x):
            with jax.named_scope("step"):
                return c + scoped_mlp(params, x), None

        return jax.lax.scan(body, 0.0, xs)[0]

    report = probes.hlo(jax.grad(loss), P, jnp.ones((5, 3, 4)), scope="encoder")
    assert report.function == "jit(loss)"
    assert any(op.backward for op in report.ops_in("jaxpr")) and any(not op.backward for op in report.ops_in("jaxpr"))
    assert report.counts["hlo"] >= 2
    # JAX repeats "step/encoder" inside the scan body's custom_jvp (relu): it is one scope, not two
    assert report.scope_paths[:3] == ["step", "step/encoder", "step/encoder/attn"]


# -- baked literals and captured constants -------------------------------------


SCALE = 2.0
TABLE = jnp.ones((512, 512))


class Config:
    scale = 3.0


CFG = Config()
SETTINGS = {"lr": 0.5}


def scaled(x):
    return x * SCALE


def test_global_scalar_is_flagged_as_baked_literal():
    report = probes.hlo(scaled, 1.0, stage="jaxpr")
    (literal,) = report.literals
    assert (literal.name, literal.kind, literal.value) == ("SCALE", "global", "2.0:f32[]")
    assert "mul" in literal.equation and literal.line.code == "return x * SCALE"
    assert report.status is Status.PROBLEM and "SCALE" in report.summary


def test_closure_attribute_and_subscript_literals():
    def make(s):
        def inner(x):
            return x * s + x * CFG.scale - SETTINGS["lr"] + x * 7.0  # 7.0 is written here: not flagged

        return inner

    report = probes.hlo(make(1.5), 2.0, stage="jaxpr")
    assert {(lit.name, lit.kind) for lit in report.literals} == {
        ("s", "closure"),
        ("CFG.scale", "global"),
        ("SETTINGS['lr']", "global"),
    }


def test_parameter_named_like_a_global_is_not_flagged():
    x = 5.0  # noqa: F841 - a local with the same value as the literal below

    def p(x):
        return x * 5.0

    assert probes.hlo(p, 1.0, stage="jaxpr", namespace={"x": 5.0}).literals == []
    assert probes.hlo(lambda v: v * 2.0, 1.0, stage="jaxpr").literals == []


def test_captured_global_array_is_a_constant():
    def lookup(x):
        return (x + TABLE).sum()

    report = probes.hlo(lookup, jnp.float32(1.0), stage="jaxpr")
    (const,) = report.constants
    assert (const.name, const.kind, const.shape, const.nbytes) == ("TABLE", "global", (512, 512), 512 * 512 * 4)
    assert const.line.code == "return (x + TABLE).sum()"
    assert "jit cache keeps them alive" in report.summary


def test_large_constant_made_inside_the_function():
    def g(x):
        return x + jnp.asarray(np.full((600, 600), 3.0, np.float32))

    report = probes.hlo(g, jnp.ones((600, 600)), stage="jaxpr")
    (const,) = report.constants
    assert const.name == "" and const.large and report.status is Status.PROBLEM


# -- memory, cost, sweep -------------------------------------------------------


def per_example_loss(w, x, y):
    return (jnp.dot(x, w) - y) ** 2


def test_memory_analysis_with_shape_dtype_structs():
    spec_w = jax.ShapeDtypeStruct((4096,), jnp.float32)
    spec_x, spec_y = jax.ShapeDtypeStruct((64, 4096), jnp.float32), jax.ShapeDtypeStruct((64,), jnp.float32)
    per_ex_grad = jax.jit(jax.vmap(jax.grad(per_example_loss), in_axes=(None, 0, 0)))
    report = probes.hlo(per_ex_grad, spec_w, spec_x, spec_y)
    assert report.memory.output_bytes == 64 * 4096 * 4
    assert report.memory.argument_bytes == (4096 + 64 * 4096 + 64) * 4
    assert report.cost["flops"] > 0
    assert report.inputs[1] == "x: f32[64,4096]" and report.outputs == ["f32[64,4096]"]


def test_sweep_tabulates_memory_per_value():
    spec_w = jax.ShapeDtypeStruct((256,), jnp.float32)
    per_ex_grad = jax.jit(jax.vmap(jax.grad(per_example_loss), in_axes=(None, 0, 0)))

    def build(batch):
        return (
            per_ex_grad,
            (spec_w, jax.ShapeDtypeStruct((batch, 256), jnp.float32), jax.ShapeDtypeStruct((batch,), jnp.float32)),
            {},
        )

    fn, args, _ = build(8)
    report = probes.hlo(fn, *args, sweep=Sweep("B", [8, 32, 128], build))
    assert [p.value for p in report.sweep] == ["8", "32", "128"]
    assert [p.memory.output_bytes for p in report.sweep] == [b * 256 * 4 for b in (8, 32, 128)]
    assert "\u00d716.00" in str(report)  # outputs grow with B: 8 -> 128


def test_stage_jaxpr_only_does_not_compile():
    report = probes.hlo(scoped_mlp, P, X, stage="jaxpr")
    assert report.stages == ["jaxpr"] and report.memory is None and "compile" not in report.seconds


def test_failure_is_reported_with_the_users_line():
    def broken(x):
        return x.reshape(7)  # BROKEN

    report = probes.hlo(broken, jnp.ones(3))
    assert report.status is Status.ERROR and report.failure.startswith("TypeError")
    assert report.failure_stage == "jaxpr" and "BROKEN" in report.failure_line.code
    assert "could not be traced" in report.summary


def test_report_keeps_no_array_and_is_json():
    x = jnp.ones((3, 4))
    ref = weakref.ref(x)
    report = probes.hlo(scoped_mlp, P, x, scope="encoder")
    del x
    gc.collect()
    assert ref() is None
    json.dumps(report.to_dict())


# -- through IPython ------------------------------------------------------------


def test_magic_scope_sweep_and_usage_errors(ip):
    from IPython.core.error import UsageError

    ip.user_ns.update(scoped_mlp=scoped_mlp, P=P, per_example_loss=per_example_loss)
    ip.run_cell("%jax_hlo encoder/attn scoped_mlp(P, jnp.ones((N, 4))) --sweep N=3,30 -o hlo_rep")
    report = ip.user_ns["hlo_rep"]
    assert report.scope == "encoder/attn" and {op.op for op in report.ops} == {"mul"}
    assert [p.value for p in report.sweep] == ["3", "30"] and report.inputs[-1] == "x: f32[3,4]"
    assert [p.memory.argument_bytes for p in report.sweep] == [(32 + 16 + n * 4) * 4 for n in (3, 30)]
    assert "N" not in ip.user_ns  # the sweep name is bound for the magic only
    for line, message in [
        ("%jax_hlo", "needs a call"),
        ("%jax_hlo scoped_mlp(P, X) --stage xla", "unknown stage"),
        ("%jax_hlo scoped_mlp(P, X) --sweep 3,30", "NAME=V1"),
        ("%jax_hlo f(x) g(y)", "two expressions"),
        ("%jax_hlo nope(1)", "does not evaluate"),
    ]:
        result = ip.run_cell(line)
        assert isinstance(result.error_in_exec, UsageError) and message in str(result.error_in_exec), line


# -- shapes from public issue threads: NumPy arrays built while tracing -------------------


def test_numpy_array_built_inside_a_jitted_function_is_a_constant():
    # jax-ml/jax#2515-style code: NumPy inside the traced function runs once, at trace time
    def add_noise(x):
        noise = np.random.rand(32000).astype(np.float32)
        return x + noise

    report = probes.hlo(add_noise, jnp.ones(32000))
    [constant] = [c for c in report.constants if c.made_while_tracing]
    assert constant.numpy and constant.shape == (32000,) and constant.nbytes == 128000
    assert constant.line.code == "return x + noise"
    assert report.status is Status.PROBLEM
    assert "NumPy array of 125 KiB (float32[32000]) while it is traced" in report.summary
    assert "same numbers on every call" in report.summary
    assert "jax.random with a key argument" in " ".join(str(report).split())


def test_small_numpy_constants_are_ordinary():
    def shift(x):
        return x + np.arange(4, dtype=np.float32)

    report = probes.hlo(shift, jnp.ones(4))
    assert not any(c.made_while_tracing for c in report.constants)


# -- where a constant built while tracing was made (issue 23, class 2) --------------------


@pytest.fixture
def allocations_recorded():
    import tracemalloc

    started = not tracemalloc.is_tracing()
    if started:
        tracemalloc.start(25)
    yield
    if started:
        tracemalloc.stop()


_GRID = [float(i) / 7 for i in range(6000)]


def test_numpy_table_built_while_tracing_is_reported_at_the_building_line(allocations_recorded):
    """jax#553-style: `np.asarray(table)` / `np.arange(n)` inside a jitted function becomes a
    constant of the program; JAX records only its first use, tracemalloc the line that built it."""

    def interpolate(x):
        grid = np.asarray(_GRID, dtype=np.float32)  # builds the table
        scaled = x * 2.0
        return scaled + grid  # first use

    report = probes.hlo(interpolate, jnp.ones(6000), stage="jaxpr")
    data = report.to_dict()
    (constant,) = [c for c in data["constants"] if c["nbytes"] == 6000 * 4]
    assert constant["line"]["code"] == "return scaled + grid  # first use"
    made = constant["provenance"]["made_at"]
    assert made["code"] == "grid = np.asarray(_GRID, dtype=np.float32)  # builds the table"
    assert made["function"] == "interpolate" and constant["provenance"]["function"] == "interpolate"
    assert constant["provenance"]["unknown"] == ""
    assert (
        f"built at {__file__}:{made['lineno']}, first used at {__file__}:{constant['line']['lineno']}" in report.summary
    )
    assert "The line that made the float32[6000] array:" in str(report)


def test_a_copy_jax_made_says_it_could_not_tell_and_names_the_first_use(allocations_recorded):
    """`np.arange(n)` is float64: JAX keeps its float32 copy, made by JAX, so the NumPy line is
    not recorded - never the first use or the call presented as the building line."""

    def positions(x):
        steps = np.arange(6007.0)  # float64
        return x + steps

    report = probes.hlo(positions, jnp.ones(6007), stage="jaxpr")
    (constant,) = [c for c in report.to_dict()["constants"] if c["shape"] == [6007]]
    provenance = constant["provenance"]
    assert provenance["made_at"] is None
    assert "a copy JAX made of it" in provenance["unknown"]
    assert constant["line"]["code"] == "return x + steps"
    assert f"first used at {__file__}, line {constant['line']['lineno']}, in " in provenance["unknown"]
    assert "could not be told" in report.summary


def test_a_function_already_traced_gets_the_building_line_from_a_fresh_trace():
    """The usual notebook order: the jitted function ran (its trace is cached, tracemalloc was off),
    then %jax_hlo looks at it. A fresh copy is traced once with tracemalloc on; static arguments kept."""
    import functools
    import tracemalloc

    was_tracing = tracemalloc.is_tracing()

    @functools.partial(jax.jit, static_argnums=1)
    def lookup(x, n):
        table = np.linspace(0.0, 1.0, n, dtype=np.float32)  # builds the table
        return x * table

    lookup(jnp.ones(6011), 6011)  # traced and cached before the probe
    report = probes.hlo(lookup, jnp.ones(6011), 6011, stage="jaxpr")
    (constant,) = [c for c in report.constants if c.shape == (6011,)]
    assert constant.line.code == "return x * table"
    made = constant.provenance.made_at
    assert made is not None and made.code == "table = np.linspace(0.0, 1.0, n, dtype=np.float32)  # builds the table"
    assert made.function == "lookup" and constant.provenance.unknown == ""
    assert tracemalloc.is_tracing() == was_tracing  # switched on for the fresh trace only


def test_several_cached_constants_each_get_their_own_answer():
    """A cached trace with a float64 table (JAX keeps its float32 copy) and a float32 table: the
    fresh trace names the line of the one NumPy built, and says why not for the copy."""

    @jax.jit
    def features(x):
        ramp = np.arange(6029.0)  # float64: JAX keeps a copy
        ones = np.ones(6029, np.float32)  # kept as built
        return x * ramp + ones

    features(1.0)
    report = probes.hlo(features, 1.0, stage="jaxpr")
    constants = [c for c in report.constants if c.shape == (6029,)]
    made = sorted((c.provenance.made_at.code if c.provenance.made_at else "") for c in constants)
    assert made == ["", "ones = np.ones(6029, np.float32)  # kept as built"]
    (copy,) = [c for c in constants if c.provenance.made_at is None]
    assert "a copy JAX made of it" in copy.provenance.unknown and "first used at" in copy.provenance.unknown


TEMPERATURE = 0.7


def test_baked_global_under_vmap_names_its_line_function_and_transformation():
    """A sampling temperature read as a global inside a vmapped function (a common Flax/Haiku
    sampler shape): baked into the program as a literal, at the line that read it, under vmap."""

    def logits_fn(x):
        return jnp.tanh(x) / TEMPERATURE  # reads the global

    def batched(xs):
        return jax.vmap(logits_fn)(xs).sum()

    report = probes.hlo(batched, jnp.ones((4, 3)), stage="jaxpr")
    (literal,) = [lit for lit in report.to_dict()["literals"] if lit["name"] == "TEMPERATURE"]
    provenance = literal["provenance"]
    assert provenance["made_at"]["code"] == "return jnp.tanh(x) / TEMPERATURE  # reads the global"
    assert provenance["function"] == "logits_fn" and provenance["transforms"] == ["vmap"]
    assert literal["line"] == provenance["made_at"]


def test_compile_time_on_a_cache_hit_says_cached_not_a_bare_zero():
    # "compile time 0.0 ms" for a function the notebook had already run: the compile came from JAX's
    # cache. The report says so; a function never compiled before gets a plain, measured time.
    @jax.jit
    def scale_then_shift(x):
        return x * 3.25 + 0.75

    x = jnp.arange(5.0)
    fresh = probes.hlo_of_call(scale_then_shift, (x,))
    assert "compile" in fresh.to_dict()["seconds"] and "compile" not in fresh.to_dict()["cached"]
    scale_then_shift(x)  # the user runs it; now %jax_hlo on the same call compiles nothing
    again = probes.hlo_of_call(scale_then_shift, (x,))
    data = again.to_dict()
    assert "compile" in data["cached"]
    facts = dict(next(s for s in again.document().sections if s.title == "Program").blocks[0].pairs)
    assert facts["compile time"].startswith("cached (compiled before in this process;")
    assert "not a compile" in facts["compile time"]
    fresh_facts = dict(next(s for s in fresh.document().sections if s.title == "Program").blocks[0].pairs)
    assert fresh_facts["compile time"].endswith(" ms") and "cached" not in fresh_facts["compile time"]


def test_equations_keep_the_variable_names_of_the_printed_jaxpr():
    # The report quoted `a:f32[] = mul b 2.0` beside the printed jaxpr's `b:f32[] = mul a 2.0`:
    # each equation was printed alone, so JAX named its output first. It now uses the jaxpr's names.
    from jaxmagic.report.wording import strip_ansi

    LR = 2.0

    def step(w, g):
        with jax.named_scope("update"):
            return w - g * LR

    w, g = jnp.float32(1.0), jnp.float32(0.5)
    printed = strip_ansi(str(jax.jit(step).trace(w, g).jaxpr))
    report = probes.hlo_of_call(step, (w, g), scope="update", stage="jaxpr", namespace={"LR": LR})
    data = report.to_dict()
    (literal,) = data["literals"]
    assert literal["name"] == "LR" and literal["equation"] == "c:f32[] = mul b 2.0:f32[]"
    assert literal["equation"] in printed
    texts = [op["text"] for op in data["ops"] if op["stage"] == "jaxpr"]
    assert texts == ["c:f32[] = mul b 2.0:f32[]", "d:f32[] = sub a c"]
    assert all(t in printed for t in texts)


def test_a_compile_read_from_the_persistent_cache_is_not_called_a_compile():
    # Only the labelling, from the events JAX reports: with the persistent cache, the backend-compile
    # event wraps a disk read; the report must not call that a compile time.
    from jaxmagic.probes._hlo.probe import _note_cached
    from jaxmagic.probes._hlo.report import HloReport

    report = HloReport(call="f(x)", seconds={"compile": 0.004})
    _note_cached(
        report,
        "compile",
        {"/jax/core/compile/backend_compile_duration", "/jax/compilation_cache/cache_retrieval_time_sec"},
    )
    assert report.to_dict()["cached"] == [] and report.to_dict()["compile_from_disk"] is True
    facts = dict(next(s for s in report.document().sections if s.title == "Program").blocks[0].pairs)
    assert facts["compile time"] == "4.0 ms, reading the program from JAX's persistent compilation cache (not compiled)"
