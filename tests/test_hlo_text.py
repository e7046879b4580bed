"""jaxmagic.probes._hlo.hlo_text: the one parser of optimized-HLO text, on fixed samples.

The samples are real ``Compiled.as_text()`` output of JAX 0.12 (paths changed)
plus a hand-written module in the older inline-metadata format, so these tests
do not depend on what XLA decides to fuse today.
"""

from __future__ import annotations

import pytest

from jaxmagic.probes._hlo.hlo_text import HloFrame, parse_hlo_module

# jax.jit(f) of a scan inside named_scope("outer") whose body is in named_scope("inner"):
#     def f(x, w):                                              # line 2
#         with jax.named_scope("outer"):
#             def body(c, xi):
#                 with jax.named_scope("inner"):
#                     return c + jnp.sum(jnp.sin(xi * w)), None   # line 6
#             return jax.lax.scan(body, 0.0, x)[0]              # line 7
#     print(jax.jit(f).lower(...).compile().as_text())          # line 8
SCAN_MODULE = """HloModule jit_f, is_scheduled=true, entry_computation_layout={(f32[4,3]{1,0}, f32[3]{0})->f32[]}, allow_spmd_sharding_propagation_to_parameters={true,true}, allow_spmd_sharding_propagation_to_output={true}

FileNames
1 "/home/me/model.py"

FunctionNames
1 "f"
2 "<module>"
3 "f.<locals>.body"

FileLocations
1 {file_name_id=1 function_name_id=1 line=7 end_line=7 column=15 end_column=41}
2 {file_name_id=1 function_name_id=2 line=8 end_line=8 column=6 end_column=53}
3 {file_name_id=1 function_name_id=3 line=6 end_line=6 column=27 end_column=51}
4 {file_name_id=1 function_name_id=3 line=6 end_line=6 column=43 end_column=49}
5 {file_name_id=1 function_name_id=3 line=6 end_line=6 column=35 end_column=50}
6 {file_name_id=1 function_name_id=3 line=6 end_line=6 column=23 end_column=51}

StackFrames
1 {file_location_id=1 parent_frame_id=1}
2 {file_location_id=2 parent_frame_id=1}
3 {file_location_id=1 parent_frame_id=3}
4 {file_location_id=1 parent_frame_id=4}
5 {file_location_id=1 parent_frame_id=5}
6 {file_location_id=3 parent_frame_id=6}
7 {file_location_id=4 parent_frame_id=6}
8 {file_location_id=5 parent_frame_id=6}
9 {file_location_id=6 parent_frame_id=6}
10 {file_location_id=1 parent_frame_id=6}


%region_1.2 (reduce_sum.3: f32[], reduce_sum.4: f32[]) -> f32[] {
  %reduce_sum.3 = f32[] parameter(0), metadata={op_name="reduce_sum"}
  %reduce_sum.4 = f32[] parameter(1), metadata={op_name="reduce_sum"}
  ROOT %reduce_sum.5 = f32[] add(%reduce_sum.3, %reduce_sum.4), metadata={op_name="jit(f)/outer/while/body/eval_jaxpr/inner/reduce_sum" stack_frame_id=6}
}

%fused_computation (param_0: f32[], param_1.4: f32[3], param_2.3: f32[4,3], param_3: s32[]) -> f32[] {
  %param_0 = f32[] parameter(0)
  %param_2.3 = f32[4,3]{1,0} parameter(2)
  %param_3 = s32[] parameter(3)
  %constant.2 = s32[] constant(0), metadata={op_name="jit(f)/outer/while/body/jit(dynamic_index_in_dim)" stack_frame_id=5}
  %dynamic_slice.2 = f32[1,3]{1,0} dynamic-slice(%param_2.3, %param_3, %constant.2), dynamic_slice_sizes={1,3}, metadata={op_name="jit(f)/outer/while/body/jit(dynamic_index_in_dim)/dynamic_slice" stack_frame_id=10}
  %bitcast.1 = f32[3]{0} bitcast(%dynamic_slice.2), metadata={op_name="jit(f)/outer/while/body/jit(dynamic_index_in_dim)/dynamic_slice" stack_frame_id=10}
  %param_1.4 = f32[3]{0} parameter(1)
  %mul.0 = f32[3]{0} multiply(%bitcast.1, %param_1.4), metadata={op_name="jit(f)/outer/while/body/eval_jaxpr/inner/mul" stack_frame_id=7}
  %sin.0 = f32[3]{0} sine(%mul.0), metadata={op_name="jit(f)/outer/while/body/eval_jaxpr/inner/sin" stack_frame_id=8}
  %constant.1 = f32[] constant(0)
  %reduce_sum.0 = f32[] reduce(%sin.0, %constant.1), dimensions={0}, to_apply=%region_1.2, metadata={op_name="jit(f)/outer/while/body/eval_jaxpr/inner/reduce_sum" stack_frame_id=6}
  ROOT %add.0 = f32[] add(%param_0, %reduce_sum.0), metadata={op_name="jit(f)/outer/while/body/eval_jaxpr/inner/add" stack_frame_id=9}
}

%wrapped_add_computation (param_0.1: s32[], param_1.5: s32[]) -> s32[] {
  %param_0.1 = s32[] parameter(0)
  %param_1.5 = s32[] parameter(1)
  ROOT %add.1 = s32[] add(%param_0.1, %param_1.5), metadata={op_name="jit(f)/outer/while/body/add" stack_frame_id=5}
}

%region_0.3 (arg_tuple.1: (s32[], f32[], f32[4,3], f32[3])) -> (s32[], f32[], f32[4,3], f32[3]) {
  %arg_tuple.1 = (s32[], f32[], f32[4,3]{1,0}, f32[3]{0}) parameter(0), metadata={op_name="jit(f)/outer/while" stack_frame_id=4}
  %constant.6 = s32[] constant(1), metadata={op_name="jit(f)/outer/while" stack_frame_id=4}
  %get-tuple-element.19 = f32[3]{0} get-tuple-element(%arg_tuple.1), index=3, metadata={op_name="jit(f)/outer/while" stack_frame_id=4}
  %get-tuple-element.18 = f32[4,3]{1,0} get-tuple-element(%arg_tuple.1), index=2, metadata={op_name="jit(f)/outer/while" stack_frame_id=4}
  %get-tuple-element.9 = f32[] get-tuple-element(%arg_tuple.1), index=1, metadata={op_name="jit(f)/outer/while" stack_frame_id=4}
  %get-tuple-element.8 = s32[] get-tuple-element(%arg_tuple.1), index=0, metadata={op_name="jit(f)/outer/while" stack_frame_id=4}
  %copy.2 = s32[] copy(%get-tuple-element.8), metadata={op_name="jit(f)/outer/while" stack_frame_id=4}
  %reduce_add_fusion = f32[] fusion(%get-tuple-element.9, %get-tuple-element.19, %get-tuple-element.18, %copy.2), kind=kLoop, calls=%fused_computation, metadata={op_name="jit(f)/outer/while/body/eval_jaxpr/inner/add" stack_frame_id=9}
  %wrapped_add = s32[] fusion(%copy.2, %constant.6), kind=kLoop, calls=%wrapped_add_computation, metadata={op_name="jit(f)/outer/while/body/add" stack_frame_id=5}
  ROOT %tuple.3 = (s32[], f32[], f32[4,3]{1,0}, f32[3]{0}) tuple(%wrapped_add, %reduce_add_fusion, %get-tuple-element.18, %get-tuple-element.19), metadata={op_name="jit(f)/outer/while" stack_frame_id=4}
}

%wrapped_compare_computation (param_0.2: s32[], param_1.6: s32[]) -> pred[] {
  %param_0.2 = s32[] parameter(0)
  %param_1.6 = s32[] parameter(1)
  ROOT %lt.0 = pred[] compare(%param_0.2, %param_1.6), direction=LT, metadata={op_name="jit(f)/outer/while/cond/lt" stack_frame_id=5}
}

%region_2.4 (arg_tuple.3: (s32[], f32[], f32[4,3], f32[3])) -> pred[] {
  %arg_tuple.3 = (s32[], f32[], f32[4,3]{1,0}, f32[3]{0}) parameter(0), metadata={op_name="jit(f)/outer/while" stack_frame_id=4}
  %constant.9 = s32[] constant(4), metadata={op_name="jit(f)/outer/while" stack_frame_id=4}
  %get-tuple-element.12 = s32[] get-tuple-element(%arg_tuple.3), index=0, metadata={op_name="jit(f)/outer/while" stack_frame_id=4}
  ROOT %wrapped_compare = pred[] fusion(%get-tuple-element.12, %constant.9), kind=kLoop, calls=%wrapped_compare_computation, metadata={op_name="jit(f)/outer/while/cond/lt" stack_frame_id=5}
}

%while.5_computation (tuple.4: (s32[], f32[], f32[4,3], f32[3])) -> (s32[], f32[], f32[4,3], f32[3]) {
  %tuple.4 = (s32[], f32[], f32[4,3]{1,0}, f32[3]{0}) parameter(0), metadata={op_name="jit(f)/outer/while" stack_frame_id=4}
  ROOT %while.0 = (s32[], f32[], f32[4,3]{1,0}, f32[3]{0}) while(%tuple.4), condition=%region_2.4, body=%region_0.3, metadata={op_name="jit(f)/outer/while" stack_frame_id=4}, backend_config={"dynamic_variables":[],"known_induction_variable":{"tuple_index":"0"},"known_init_step":{"init":"0","step":"1"},"known_trip_count":{"n":"4"}}
}

ENTRY %main.5 (x.1: f32[4,3], w.1: f32[3]) -> f32[] {
  %x.1 = f32[4,3]{1,0} parameter(0), metadata={op_name="x"}
  %w.1 = f32[3]{0} parameter(1), metadata={op_name="w"}
  %constant.10 = f32[] constant(0)
  %constant.11 = s32[] constant(0)
  %copy.6 = f32[] copy(%constant.10)
  %copy.7 = s32[] copy(%constant.11)
  %tuple = (s32[], f32[], f32[4,3]{1,0}, f32[3]{0}) tuple(%copy.7, %copy.6, %x.1, %w.1)
  %call = (s32[], f32[], f32[4,3]{1,0}, f32[3]{0}) call(%tuple), to_apply=%while.5_computation, frontend_attributes={xla_cpu_small_call="true"}, metadata={op_name="jit(f)/outer/while" stack_frame_id=4}
  ROOT %while.7 = f32[] get-tuple-element(%call), index=1, metadata={op_name="jit(f)/outer/while" stack_frame_id=4}
}


"""

# The format before the FileNames/StackFrames tables: the location inline, op_names
# merged with ";", quotes escaped, a tuple-shaped result, nested fusions.
OLD_FORMAT = r"""HloModule jit_g, entry_computation_layout={(f32[8]{0})->(f32[8]{0}, f32[])}

%inner_fusion (p0: f32[8]) -> f32[8] {
  %p0 = f32[8]{0} parameter(0)
  ROOT %exp.1 = f32[8]{0} exponential(%p0), metadata={op_type="exp" op_name="jit(g)/block/exp" source_file="/home/me/g.py" source_line=12}
}

%outer_fusion (p1: f32[8]) -> f32[8] {
  %p1 = f32[8]{0} parameter(0)
  %inner = f32[8]{0} fusion(%p1), kind=kLoop, calls=%inner_fusion, metadata={op_name="jit(g)/block/exp"}
  ROOT %neg.2 = f32[8]{0} negate(%inner), metadata={op_name="jit(g)/head/neg;jit(g)/head/mul" source_file="/home/me/g.py" source_line=14}
}

%add_reducer (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %add.3 = f32[] add(%a, %b), metadata={op_name="jit(g)/head/reduce_sum"}
}

ENTRY %main (x: f32[8]) -> (f32[8], f32[]) {
  %x = f32[8]{0} parameter(0), metadata={op_name="x[\'a\']"}
  %fused = f32[8]{0} fusion(%x), kind=kLoop, calls=%outer_fusion, metadata={op_name="jit(g)/head/neg" source_file="/home/me/g.py" source_line=14}
  %zero = f32[] constant(0)
  %sum = f32[] reduce(%fused, %zero), dimensions={0}, to_apply=%add_reducer, metadata={op_name="jit(g)/head/reduce_sum" source_file="/home/me/g.py" source_line=15}
  ROOT %out = (f32[8]{0}, f32[]) tuple(%fused, %sum)
}
"""


def test_computations_and_instructions_of_a_real_module():
    module = parse_hlo_module(SCAN_MODULE)
    assert module.name == "jit_f"
    assert module.entry is not None and module.entry.name == "main.5"
    names = {i.name: i for i in module.instructions()}
    mul = names["mul.0"]
    assert (mul.opcode, mul.shape, mul.computation) == ("multiply", "f32[3]{0}", "fused_computation")
    assert mul.op_names == ("jit(f)/outer/while/body/eval_jaxpr/inner/mul",)
    assert mul.stack_frame_id == 7
    assert names["while.0"].called == (("condition", "region_2.4"), ("body", "region_0.3"))
    assert names["reduce_add_fusion"].fusion_kind == "kLoop"
    assert names["tuple.3"].shape.startswith("(s32[], f32[]") and names["tuple.3"].is_root
    # backend_config and frontend_attributes do not confuse the attribute parser
    assert names["call"].called == (("to_apply", "while.5_computation"),)


def test_roles_and_kernels():
    module = parse_hlo_module(SCAN_MODULE)
    assert module.role("main.5") == "entry"
    assert module.role("region_0.3") == "control"  # the loop body runs as code
    assert module.role("while.5_computation") == "control"  # reached through call(to_apply=...)
    assert module.role("fused_computation") == "fused"
    assert module.role("region_1.2") == "applied"  # the reducer of reduce_sum
    names = {i.name: i for i in module.instructions()}
    # an instruction inside a fusion runs in the fusion instruction that calls it
    assert module.kernel_of(names["sin.0"]).name == "reduce_add_fusion"
    # an instruction of a loop body runs as itself
    assert module.kernel_of(names["reduce_add_fusion"]).name == "reduce_add_fusion"
    # a reducer's add runs inside the reduce, which runs inside its fusion
    assert module.kernel_of(names["reduce_sum.5"]).name == "reduce_add_fusion"


def test_stack_frames_from_the_compact_tables():
    module = parse_hlo_module(SCAN_MODULE)
    names = {i.name: i for i in module.instructions()}
    stack = module.stack(names["mul.0"])
    # innermost first: the body's line, then f's scan call (three times: scan's own frames), then the module
    assert stack[0] == HloFrame("/home/me/model.py", "f.<locals>.body", 6)
    assert stack[1:4] == [HloFrame("/home/me/model.py", "f", 7)] * 3
    assert stack[-1] == HloFrame("/home/me/model.py", "<module>", 8)
    assert module.stack(names["x.1"]) == []  # parameters carry no location


def test_older_inline_format():
    module = parse_hlo_module(OLD_FORMAT)
    names = {i.name: i for i in module.instructions()}
    assert names["exp.1"].op_type == "exp"
    assert module.stack(names["exp.1"]) == [HloFrame("/home/me/g.py", "", 12)]
    assert names["neg.2"].op_names == ("jit(g)/head/neg", "jit(g)/head/mul")  # merged with ";"
    assert names["x"].op_names == ("x['a']",)  # escapes undone
    # nested fusions: the inner fusion's instructions run in the outermost fusion
    assert module.kernel_of(names["exp.1"]).name == "fused"
    assert module.role("add_reducer") == "applied"
    assert names["out"].shape == "(f32[8]{0}, f32[])"


@pytest.mark.parametrize("garbage", ["", "not hlo at all", "HloModule m\n\nENTRY %main {\n  ???\n}\n"])
def test_tolerates_text_it_does_not_understand(garbage):
    module = parse_hlo_module(garbage)
    assert list(module.instructions()) == []


def test_unshifted_parent_ids():
    # A printer that writes the parent's own row number (0 = none) is read too.
    text = """HloModule m

FileNames
1 "a.py"

FunctionNames
1 "f"
2 "g"

FileLocations
1 {file_name_id=1 function_name_id=1 line=3}
2 {file_name_id=1 function_name_id=2 line=9}

StackFrames
1 {file_location_id=2 parent_frame_id=0}
2 {file_location_id=1 parent_frame_id=1}

ENTRY %main (x: f32[]) -> f32[] {
  ROOT %x = f32[] parameter(0), metadata={op_name="x" stack_frame_id=2}
}
"""
    module = parse_hlo_module(text)
    (x,) = module.instructions()
    assert module.stack(x) == [HloFrame("a.py", "f", 3), HloFrame("a.py", "g", 9)]


def test_quoted_braces_and_equals_do_not_end_the_metadata():
    text = r"""HloModule m

ENTRY %main (x: f32[2]) -> f32[2] {
  %x = f32[2]{0} parameter(0)
  ROOT %neg = f32[2]{0} negate(%x), metadata={op_name="jit(f)/odd {scope} = \"x\"/neg" stack_frame_id=3}, backend_config={"a":{"b":1}}
}
"""
    (_, neg) = parse_hlo_module(text).instructions()
    assert neg.op_names == ('jit(f)/odd {scope} = "x"/neg',) and neg.stack_frame_id == 3
    assert neg.called == ()


# XLA:CPU of jaxlib 0.12, a scan's forward loop under jax.grad (trimmed): six tuple elements, numbered by XLA in
# comments, and tuple elements read inline (``%while.14#2``).
LONG_TUPLE_LOOP = """HloModule jit_loss, is_scheduled=true

%region_0.3 (arg_tuple.1: (s32[], f32[4,4], f32[8,4,4], f32[8,4,4], f32[8,4,4], /*index=5*/f32[8,4,4])) -> (s32[], f32[4,4], f32[8,4,4], f32[8,4,4], f32[8,4,4], /*index=5*/f32[8,4,4]) {
  %arg_tuple.1 = (s32[], f32[4,4]{1,0}, f32[8,4,4]{2,1,0}, f32[8,4,4]{2,1,0}, f32[8,4,4]{2,1,0}, /*index=5*/f32[8,4,4]{2,1,0}) parameter(0)
  %copy.11 = f32[4,4]{1,0} copy(%arg_tuple.1#1)
  ROOT %tuple.19 = (s32[], f32[4,4]{1,0}, f32[8,4,4]{2,1,0}, f32[8,4,4]{2,1,0}, f32[8,4,4]{2,1,0}, /*index=5*/f32[8,4,4]{2,1,0}) tuple(%arg_tuple.1#0, %copy.11, %arg_tuple.1#2, %arg_tuple.1#3, %arg_tuple.1#4, /*index=5*/%arg_tuple.1#5)
}

ENTRY %main.7 (t: (s32[], f32[4,4], f32[8,4,4], f32[8,4,4], f32[8,4,4], /*index=5*/f32[8,4,4])) -> f32[8,4,4] {
  %t = (s32[], f32[4,4]{1,0}, f32[8,4,4]{2,1,0}, f32[8,4,4]{2,1,0}, f32[8,4,4]{2,1,0}, /*index=5*/f32[8,4,4]{2,1,0}) parameter(0)
  %while.14 = (s32[], f32[4,4]{1,0}, f32[8,4,4]{2,1,0}, f32[8,4,4]{2,1,0}, f32[8,4,4]{2,1,0}, /*index=5*/f32[8,4,4]{2,1,0}) while(%t), condition=%region_1.4, body=%region_0.3, metadata={op_name="jit(loss)/jvp()/while"}
  ROOT %copy.3 = f32[8,4,4]{2,1,0} copy(%while.14#5)
}
"""


def test_a_loop_carrying_six_values_and_its_elements_read_inline():
    """XLA's `/*index=5*/` holds an "=", which the shape pattern stopped at: the while, its body's parameter and
    root were not read at all. Each operand's tuple element is kept (`%while.14#5` reads element 5)."""
    module = parse_hlo_module(LONG_TUPLE_LOOP)
    names = {i.name: i for i in module.instructions()}
    assert {"while.14", "arg_tuple.1", "tuple.19", "t"} <= set(names)
    loop = names["while.14"]
    assert loop.opcode == "while" and ("body", "region_0.3") in loop.called and loop.operands == ("t",)
    assert module.callers["region_0.3"][1] is loop
    root = names["tuple.19"]
    assert root.is_root and root.operands[1] == "copy.11" and root.operand_indices[5] == 5
    assert names["copy.11"].operands == ("arg_tuple.1",) and names["copy.11"].operand_indices == (1,)
    assert names["copy.3"].operand_indices == (5,)


def test_a_get_tuple_element_says_its_index():
    names = {i.name: i for i in parse_hlo_module(SCAN_MODULE).instructions()}
    assert names["get-tuple-element.19"].tuple_index == 3 and names["get-tuple-element.8"].tuple_index == 0
    assert names["reduce_add_fusion"].tuple_index is None
