"""Every NaN fix rule is declared once (``nans.fix_rule.FixRule``) and ordered in ``nans.fixes.RULES``:
each key here has an example producer the rule is the first to apply to, and what the rule says of it
holds the phrase the rule declares - so a rule cannot be added without its words, its condition and a
place in the order, nor renamed apart from them. (The rules' wording on real programs is tested in
test_nans_fix_trials.py, test_nan_float16.py, test_nans_numerics.py and the library tests.)
"""

from __future__ import annotations

import dataclasses

import pytest

from jaxmagic.probes._nans.fixes.fix_keys import FixKey
from jaxmagic.probes._nans.fixes.fix_rule import FixRule
from jaxmagic.probes._nans.fixes.lost_constant import LostConstant
from jaxmagic.probes._nans.fixes.rules import RULES, nan_fix, rule_for
from jaxmagic.probes._nans.fixes.value_fixes import FixTrial
from jaxmagic.probes._nans.report import NanReport
from jaxmagic.probes._nans.search.found import NanProducer, OperandValue
from jaxmagic.probes._nans.search.integer_overflow import IntegerOverflow
from jaxmagic.report import SourceLine


def _op(value: str, dtype: str = "float32", made_by: str = "", made_from: tuple[str, ...] = ()) -> OperandValue:
    return OperandValue("operand", value, [], dtype, made_by=made_by, made_from=list(made_from))


def _line(code: str) -> SourceLine:
    return SourceLine("<cell>", 3, "f", code)


def _finite(key: str, code: str) -> FixTrial:
    return FixTrial(key, code, tried=True, finite=True, result="finite", call_result="finite")


# rule key -> the producer of a NaN it is the rule for
EXAMPLES: dict[str, NanProducer] = {
    "integer_overflow": NanProducer(
        "div",
        "inf",
        line=_line("s = 1 / 256 ** k"),
        operands=[_op("1.0"), _op("0.0", made_by="convert_element_type")],
        integer_overflow=IntegerOverflow("mul", "int32", "2147483647", "4294967296", "0", [3], None, "256 ** k"),
        fix_trials=[_finite(FixKey.WIDER, "float32")],
    ),
    "narrowed_overflow": NanProducer(
        "convert_element_type",
        "inf",
        line=_line("t = jnp.sum(x)"),
        library_function="jnp.sum",
        output_dtype="float16",
        operands=[_op("78000.0", made_by="reduce_sum")],
        fix_trials=[_finite("float32", "v (kept in float32)")],
    ),
    "lost_constant": NanProducer(
        "div",
        "nan",
        line=_line("y = x / (s + 1e-8)"),
        operands=[_op("0.0", "float16"), _op("0.0", "float16", made_by="add")],
        lost_constant=LostConstant("add", 1, "float16", "0.0", "1e-8", 1e-8, 5.96e-8, replacement=1e-4),
        fix_trials=[_finite("constant", "s + 1e-4")],
    ),
    "derivative_overflow": NanProducer(
        "reduce_sum",
        "inf",
        phase="backward",
        derivative=True,
        line=_line("loss = jax.nn.log_softmax(x).sum()"),
        operands=[_op("f16[65546] in [1.0, 1.0]", "float16")],
        fix_trials=[FixTrial(FixKey.LINE_IN_FLOAT32, "x.astype(jnp.float32)", True, True, "line in float32", "finite")],
    ),
    "half_overflow": NanProducer("exp", "inf", line=_line("e = jnp.exp(x)"), operands=[_op("12.0", "float16")]),
    "written_inf": NanProducer(
        "sub",
        "nan",
        line=_line("y = masked - masked"),
        written_inf=_line("masked = jnp.where(m, x, -jnp.inf)"),
        operands=[_op("-inf"), _op("-inf")],
    ),
    "masked_row": NanProducer(
        "sub", "nan", line=_line("p = jax.nn.softmax(s)"), neg_inf_rows="1 of 2 rows (axis 1)", operands=[_op("-inf")]
    ),
    "discarded_branch": NanProducer(
        "log",
        "nan",
        line=_line("y = jnp.where(x > 0, jnp.log(x), 0.0)"),
        discarded_by="jnp.where",
        operands=[_op("-1.0")],
    ),
    "std_at_zero": NanProducer(
        "div", "inf", derivative=True, library_function="jnp.std", operands=[_op("1.0"), _op("0.0")]
    ),
    "arc_derivative": NanProducer(
        "div", "inf", derivative=True, expression="jnp.arccos(c)", operands=[_op("1.0"), _op("0.0")]
    ),
    "arctan2_derivative": NanProducer(
        "div", "nan", derivative=True, expression="jnp.arctan2(y, x)", operands=[_op("0.0"), _op("0.0")]
    ),
    "root_derivative": NanProducer(
        "div", "inf", derivative=True, expression="jnp.sqrt(x)", operands=[_op("0.5"), _op("0.0", made_by="sqrt")]
    ),
    "log_derivative": NanProducer(
        "div",
        "nan",
        derivative=True,
        phase="backward",
        line=_line("h = -jnp.sum(p * jnp.log(p))"),
        primal="log",
        primal_value="0.0",
        operands=[_op("0.0"), _op("0.0")],
        fix_trials=[_finite("double_where", "jnp.where(v > 0, jnp.log(jnp.where(v > 0, v, 1.0)), 0.0)")],
    ),
    "cholesky": NanProducer("cholesky", "nan", operands=[_op("f32[2,2] not positive definite")]),
    "root_of_negative": NanProducer("sqrt", "nan", line=_line("r = jnp.sqrt(v)"), operands=[_op("-1.0")]),
    "negative_power": NanProducer("pow", "nan", line=_line("r = v ** 0.5"), operands=[_op("-2.0"), _op("0.5")]),
    "zero_denominator": NanProducer("div", "nan", line=_line("m = t / n"), operands=[_op("0.0"), _op("0.0")]),
    "log_probability": NanProducer(
        "log", "-inf", line=_line("jnp.log(jax.nn.sigmoid(z))"), operands=[_op("0.0", made_by="logistic")]
    ),
    "log_out_of_domain": NanProducer(
        "log",
        "nan",
        line=_line("y = jnp.log(v)"),
        operands=[_op("-1.0")],
        fix_trials=[_finite("clamp", "jnp.maximum(v, 1e-06)")],
    ),
    "out_of_domain": NanProducer(
        "acos",
        "nan",
        line=_line("a = jnp.arccos(c)"),
        operands=[_op("1.0000001")],
        fix_trials=[_finite("clip", "jnp.clip(v, -1.0, 1.0)")],
    ),
    "passed_on_inf": NanProducer(
        "mul",
        "inf",
        line=_line("return jnp.sum(jnp.where(x > 0, 0.0, x * jnp.inf))"),
        operands=[_op("1.0"), dataclasses.replace(_op("inf"), role="right", constant=True)],
    ),
    "forward_cause": NanProducer("mul", "nan", operands=[_op("0.0"), _op("inf")]),
}


def test_every_rule_has_one_key_and_an_example():
    keys = [rule.key for rule in RULES]
    assert len(keys) == len(set(keys)), "two rules share a key"
    assert set(keys) == set(EXAMPLES), "a rule without an example here, or an example of no rule"
    assert all(isinstance(rule, FixRule) and rule.says for rule in RULES)


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.key)
def test_a_rule_is_the_first_to_speak_for_its_example_and_says_what_it_declares(rule: FixRule):
    producer = EXAMPLES[rule.key]
    assert rule.applies(producer)
    spoke, said = rule_for(NanReport(found=True, producer=producer), producer)
    assert spoke is rule, f"{rule.key}'s example is taken by {spoke.key if spoke else None}: a rule before it"
    assert rule.says in said, said


def test_the_fix_report_says_is_the_rules():
    producer = EXAMPLES["masked_row"]
    assert "every entry is -inf (a fully masked row)" in nan_fix(NanReport(found=True, producer=producer))


def test_without_a_producer_only_the_forward_cause_is_said():
    said = nan_fix(NanReport(found=True, primitive="log", phase="forward", value="nan"))
    assert said == "`log` produced nan: typically log of a negative number gives NaN, log(0) gives -inf."
    assert nan_fix(NanReport(found=True, primitive="log", phase="backward")) == ""
