"""A non-finite value made by crossing a dtype's limit is told as that (issue 63.7): the dtype, its limit
(`jnp.finfo`/`jnp.iinfo`), the operation that crossed it, and the wider dtype tried on the failing values.

Shaped like public threads: numpy/numpy#7930 and tracel-ai/burn#4109 (a float16 sum past 65,504 is inf;
JAX sums float16 in float32 and converts back, so the conversion overflows), google-research/last#43 (a
float16 reduction of 65,536 terms), jax-ml/jax#8604 (`1 / 256 ** jnp.arange(1, 5)`: int32 wraps 256**4 to 0,
then 1/0 is inf) and jax-ml/jax#10692 (integer overflow in `jnp.power` is silent).
"""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from jaxmagic import probes


def _caught(function, *args, infs=True):
    with pytest.raises(FloatingPointError):
        with probes.nans(infs=infs) as report:
            function(*args)
    return report.to_dict()


def average_counts(counts):
    total = jnp.sum(counts)  # float16 in, float16 out: the float32 sum is converted back
    return total / counts.shape[0]


def test_float16_sum_past_its_largest_value_names_float16_and_tries_float32():
    data = _caught(average_counts, jnp.ones(78_000, jnp.float16))
    p = data["producer"]
    assert (p["primitive"], p["value"], p["output_dtype"]) == ("convert_element_type", "inf", "float16")
    assert (
        p["line"]["code"].strip()
        == "total = jnp.sum(counts)  # float16 in, float16 out: the float32 sum is converted back"
    )
    assert data["summary"].startswith("inf from an overflow: `jnp.sum(counts)` overflowed float16 (78000.0 > 65504")
    assert "`jnp.finfo(jnp.float16).max`" in data["fix"]
    assert "`jnp.sum(..., dtype=jnp.float32)`" in data["fix"]
    (offered,) = [f for f in data["fixes"] if f["offered"]]
    assert offered["tried"] and offered["finite"] and offered["key"] == "float32"
    assert "above float16's 65504" in offered["result"]


def log_partition(log_weights):
    # google-research/last#43's shape: a float16 log-sum-exp whose sum of exponentials overflows
    return jnp.log(jnp.sum(jnp.exp(log_weights)))


def test_float16_reduction_of_many_terms_is_an_overflow_not_a_log_domain_error():
    data = _caught(log_partition, jnp.zeros(65_536, jnp.float16))
    p = data["producer"]
    assert p["value"] == "inf" and p["output_dtype"] == "float16"
    assert "overflowed float16" in data["summary"]
    assert any(f["offered"] and f["tried"] and f["finite"] for f in data["fixes"])


def inverse_scales(k):
    return 1 / 256**k  # jax#8604


def test_int32_power_that_wrapped_to_zero_is_named_before_the_division_by_it():
    data = _caught(inverse_scales, jnp.arange(1, 5))
    p = data["producer"]
    assert (p["primitive"], p["value"]) == ("div", "inf")
    wrapped = p["integer_overflow"]
    assert (wrapped["dtype"], wrapped["limit"], wrapped["wrapped"]) == ("int32", "2147483647", "0")
    assert wrapped["expression"] == "256**k"
    assert data["summary"].startswith("inf from an overflow: `256**k` overflowed int32")
    assert "`jnp.iinfo(jnp.int32).max`" in data["fix"] and "Compute it in float32" in data["fix"]
    (offered,) = [f for f in data["fixes"] if f["offered"]]
    assert (offered["key"], offered["code"], offered["tried"], offered["finite"]) == (
        "wider_dtype",
        "float32",
        True,
        True,
    )
    # the guard of the division is tried too, and not offered: it would hide the wrap-around, not fix it
    assert any(f["key"] == "guard" and not f["offered"] for f in data["fixes"])


def cubes_root(n):
    return jnp.sqrt(n**3 * 1.0)  # 2000**3 wraps to a negative int32


def test_int32_cube_that_wrapped_negative_before_sqrt_is_an_overflow_not_a_negative_input():
    data = _caught(cubes_root, jnp.arange(2000, 2003, dtype=jnp.int32), infs=False)
    p = data["producer"]
    assert (p["primitive"], p["value"]) == ("sqrt", "nan")
    assert p["integer_overflow"]["dtype"] == "int32"
    assert "overflowed int32" in data["summary"] and "jnp.iinfo" in data["fix"]
    assert not any(f["offered"] and f["key"] == "clamp" for f in data["fixes"])


def test_without_an_overflow_no_dtype_limit_is_named():
    data = _caught(inverse_scales, jnp.array([0.0]) * jnp.inf)  # inf came from elsewhere: not an int wrap
    assert data["producer"] is None or data["producer"]["integer_overflow"] is None


def penalty(x):
    # issue 63.4's shape (a hinge written with jnp.inf): the inf is written in the code, no limit was crossed
    return jnp.sum(jnp.where(x > 0, 0.0, x * jnp.inf))


def test_an_inf_written_in_the_code_is_passed_on_not_an_overflow():
    with pytest.raises(FloatingPointError):
        with probes.nans(infs=True) as report:
            penalty(jnp.array([1.0, -1.0, 2.0]))
    data = report.to_dict()
    p = data["producer"]
    assert (p["primitive"], p["value"]) == ("mul", "inf")
    assert "overflow" not in data["summary"]
    assert data["fix"].startswith("`mul`: passed on an inf written into the program (`x * jnp.inf`)")
    assert "typically" not in data["fix"]  # `mul`'s usual cause (0 * inf) makes NaN, not this inf
    (tried,) = [f for f in data["fixes"] if f["tried"]]
    assert tried["code"] == "jnp.finfo(dtype).max in place of jnp.inf" and not tried["offered"]
    assert "The fix tried on the values did not make it finite" in report.fix_line  # not "No fix was tried"
