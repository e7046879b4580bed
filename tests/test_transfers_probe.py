"""The transfer probe: implicit host-to-device transfers with the line that made them."""

from __future__ import annotations

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmagic import probes
from jaxmagic._jax.monitoring_tool import watchers_held
from jaxmagic._jax.restore import take_snapshot
from jaxmagic.probes._transfers import capture_file, parse_transfer


@pytest.fixture(scope="module")
def double():
    f = jax.jit(lambda x: x * 2)
    f(jnp.ones(3))
    return f


def _lines(report):
    return {(t.line.code if t.line else None): t for t in report.transfers}


def test_log_lists_numpy_and_scalar_arguments_with_their_lines(double):
    x_dev = jnp.ones(3)
    np_x = np.ones(3, np.float32)
    with probes.transfers() as rep:
        for _ in range(4):
            double(np_x)  # numpy argument
        double(1.0)  # python scalar
        double(x_dev)  # device array: no transfer
        double(jax.device_put(np_x))  # explicit: allowed, not listed
    by_line = _lines(rep)
    assert set(by_line) == {"double(np_x)  # numpy argument", "double(1.0)  # python scalar"}
    numpy_group = by_line["double(np_x)  # numpy argument"]
    assert numpy_group.count == 4 and numpy_group.value == "f32[3]"
    assert numpy_group.what == "a NumPy array or other host data"
    assert by_line["double(1.0)  # python scalar"].value == "f32[] weak"
    assert by_line["double(1.0)  # python scalar"].what == "a Python scalar"
    assert rep.total == 5 and rep.status.value == "problem" and not rep.blocked


def test_transfer_inside_a_helper_is_blamed_on_the_helpers_line(double):
    def helper(v):
        return double(v)  # the helper's line

    with probes.transfers() as rep:
        helper(np.zeros(3, np.float32))
    [group] = rep.transfers
    assert group.line.code == "return double(v)  # the helper's line" and group.line.function == "helper"


def test_eager_operations_on_host_values(double):
    # JAX describes the copied value only on its slow path: an eager `x + 1` another test ran before takes
    # the fast path (that limit is the probe's, said in its report); the test must not depend on the order
    jax.clear_caches()
    x = jnp.ones(3)
    with probes.transfers() as rep:
        y = x + 1  # the Python int 1
        z = jnp.array([1.0] * 13)  # a Python list
    by_line = _lines(rep)
    assert by_line["y = x + 1  # the Python int 1"].value == "i32[] weak"
    # a shape no other test makes: a list of a shape made before takes JAX's fast path, which describes no value
    assert by_line["z = jnp.array([1.0] * 13)  # a Python list"].value == "f32[13]"
    del y, z


def test_clean_block_is_ok(double):
    x = jnp.ones(3)
    with probes.transfers() as rep:
        double(x)
        float(double(x).sum())  # device-to-host: not intercepted on CPU
    assert rep.total == 0 and rep.status.value == "ok"
    assert "No implicit" in rep.summary
    if jax.default_backend() == "cpu":
        assert "not intercepted" in str(rep)


def test_other_stderr_output_is_passed_on(double, capfd):
    with probes.transfers() as rep:
        os.write(2, b"a line of someone else's\n")
        double(np.ones(3, np.float32))
        print("python stderr too", file=sys.stderr)
    captured = capfd.readouterr()
    assert "a line of someone else's" in captured.err and "python stderr too" in captured.err
    assert "guard_lib" not in captured.err and rep.total == 1


def test_disallow_stops_at_the_first_uncaught_transfer(double):
    with pytest.raises(Exception, match="Disallowed host-to-device transfer") as info:
        with probes.transfers(mode="disallow") as rep:
            for value in (np.ones(3, np.float32), 1.0):
                try:
                    double(value)  # blocked, and caught here
                except Exception:
                    pass
            double(jax.device_put(np.ones(3, np.float32)))  # explicit: allowed
            double(np.zeros(2, np.float32))  # blocked, not caught
    assert type(info.value).__name__ == "JaxRuntimeError"
    assert rep.blocked and rep.total == 3
    assert [t.value for t in rep.transfers] == ["f32[3]", "f32[] weak", "f32[2]"]
    assert rep.transfers[0].line.code == "double(value)  # blocked, and caught here"
    assert rep.transfers[-1].line.code == "double(np.zeros(2, np.float32))  # blocked, not caught"
    assert rep.summary.startswith("Stopped at an implicit host-to-device transfer of f32[2]")
    assert "2 earlier one(s) blocked and caught" in rep.summary


def test_state_is_left_as_found(double):
    before = take_snapshot()
    fd_before = os.fstat(2)
    with probes.transfers():
        double(np.ones(3, np.float32))
    with pytest.raises(KeyboardInterrupt):
        with probes.transfers():
            raise KeyboardInterrupt
    with pytest.raises(Exception):  # noqa: B017 - whatever JAX raises for a disallowed transfer
        with probes.transfers(mode="disallow"):
            double(np.ones(3, np.float32))
    assert before.differences(take_snapshot()) == []
    assert jax.config.values["jax_transfer_guard"] is None
    after = os.fstat(2)
    assert (after.st_dev, after.st_ino) == (fd_before.st_dev, fd_before.st_ino)
    assert watchers_held() == []


def test_other_errors_are_reported_and_raised():
    with pytest.raises(ValueError):
        with probes.transfers() as rep:
            raise ValueError("mine")
    assert rep.other_error == "ValueError: mine" and rep.status.value == "error"


def test_parse_transfer_messages():
    log_line = (
        "W1129 08:37:07.491211   28130 guard_lib.cc:154] host-to-device transfer: "
        "aval=ShapedArray(float32[], weak_type=True), dst_sharding=SingleDeviceSharding(device=CpuDevice(id=0))"
    )
    assert parse_transfer(log_line) == ("host-to-device", "f32[] weak")
    assert parse_transfer("W1129 08:37:58.905025   28456 guard_lib.cc:154] host-to-device transfer: ") == (
        "host-to-device",
        "",
    )
    error = (
        "INVALID_ARGUMENT: Disallowed host-to-device transfer: aval=ShapedArray(int32[3]), "
        "dst_sharding=SingleDeviceSharding(device=CpuDevice(id=0), memory_kind=device)"
    )
    assert parse_transfer(error) == ("host-to-device", "i32[3]")
    assert parse_transfer("some other warning") is None


def test_report_is_plain_data(double):
    with probes.transfers() as rep:
        double(np.ones(3, np.float32))
    data = json.loads(json.dumps(rep.to_dict()))
    assert data["kind"] == "jax_transfers" and data["total"] == 1


def test_magic_in_both_modes(ip):
    ip.run_cell("import numpy as np\ntf_double = jax.jit(lambda v: v * 2)\ntf_double(jnp.ones(2))")
    result = ip.run_cell("%%jax_transfers -o tr_log\nfor step in range(3):\n    tf_double(np.ones(2, np.float32))")
    assert result.success
    [group] = ip.user_ns["tr_log"].transfers
    assert group.count == 3 and group.line.code == "tf_double(np.ones(2, np.float32))"
    result = ip.run_cell("%%jax_transfers --mode disallow -o tr_dis\ntf_double(1.0)")
    assert type(result.error_in_exec).__name__ == "JaxRuntimeError"
    assert ip.user_ns["tr_dis"].blocked and ip.user_ns["tr_dis"].transfers[0].line.code == "tf_double(1.0)"
    from IPython.core.error import UsageError

    assert isinstance(ip.run_cell("%%jax_transfers --mode allow\n1").error_in_exec, UsageError)


def test_long_cells_keep_the_capture_file_small(double, monkeypatch):
    monkeypatch.setattr(capture_file, "TRUNCATE_AT", 300)  # about two guard lines
    np_x = np.ones(3, np.float32)
    with probes.transfers() as rep:
        for _ in range(25):
            double(np_x)
    assert rep.total == 25 and rep.transfers[0].count == 25


def test_output_past_the_mapped_part_of_the_capture_file_is_passed_on(double, monkeypatch, capfd):
    monkeypatch.setattr(capture_file, "MAPPED_BYTES", 1024)
    monkeypatch.setattr(capture_file, "TRUNCATE_AT", 300)
    np_x = np.ones(3, np.float32)
    with probes.transfers() as rep:
        os.write(2, b"x" * 3000 + b"\n")  # one write longer than the mapped part
        for _ in range(5):
            double(np_x)
    assert capfd.readouterr().err.count("x") >= 3000
    assert rep.total == 5 and rep.transfers[0].count == 5


def test_lines_are_followed_without_a_memory_map(double, monkeypatch):
    import mmap

    def no_map(*args, **kwargs):
        raise OSError("no mmap here")

    monkeypatch.setattr(mmap, "mmap", no_map)
    np_x = np.ones(3, np.float32)
    with probes.transfers() as rep:
        double(np_x)  # the first line
        for _ in range(3):
            double(1.0)  # the second line
    assert {t.line.code: t.count for t in rep.transfers} == {
        "double(np_x)  # the first line": 1,
        "double(1.0)  # the second line": 3,
    }


# -- a call that is traced and run at once (issue 23, class 2) ----------------------------


def test_numpy_argument_of_a_call_traced_first_is_on_the_call_line():
    """The copy of a NumPy batch made by the first call of a jitted loss was put on the last line
    traced inside the loss (`return (err ** 2).mean()`), not on the call that passed it."""

    def loss(w, batch):
        pred = batch @ w
        err = pred - 1.0
        return (err**2).mean()  # the last line traced

    step = jax.jit(loss)
    w = jnp.ones((5,))
    batch = np.ones((8, 5), np.float32)
    with probes.transfers() as rep:
        for _ in range(3):
            value = step(w, batch)  # the call
    assert value.shape == ()
    data = rep.to_dict()["transfers"]
    assert [t["line"]["code"] for t in data] == ["value = step(w, batch)  # the call"]
    (group,) = data
    assert group["count"] == 3 and group["value"] == "f32[8,5]"
    assert group["argument"] == "batch" and group["traced"] == "loss"
    provenance = group["provenance"]
    assert provenance["made_at"]["code"] == "value = step(w, batch)  # the call"
    assert provenance["started_by"]["function"] == "test_numpy_argument_of_a_call_traced_first_is_on_the_call_line"
    assert "argument `batch`" in rep.summary
    assert "This call traced `loss` first; its argument `batch` was copied" in " ".join(str(rep).split())


@jax.jit
def _project(a, x):
    return a @ x


class _Basis:
    """DESC-style (PlasmaControl/DESC#1051): a NumPy matrix kept on an object and handed to a
    jitted function on every recover() call - a host-to-device copy per iteration."""

    def __init__(self):
        self.Ainv = np.eye(6, dtype=np.float32)

    def recover(self, x):
        return _project(self.Ainv, x)  # Ainv is copied here


def test_numpy_attribute_passed_from_a_method_names_the_attribute_and_the_outer_call():
    basis = _Basis()
    x = jnp.ones((6,))
    with probes.transfers() as rep:
        for _ in range(2):
            x = basis.recover(x)  # the outer call
    (group,) = rep.to_dict()["transfers"]
    assert group["line"]["code"] == "return _project(self.Ainv, x)  # Ainv is copied here"
    assert group["line"]["function"] == "recover" and group["count"] == 2
    assert group["argument"] == "self.Ainv" and group["value"] == "f32[6,6]" and group["traced"] == "_project"
    assert group["provenance"]["started_by"]["code"] == "x = basis.recover(x)  # the outer call"


def test_two_numpy_arguments_of_one_type_are_told_apart_by_the_observed_call():
    """The guard's log says only "f32[4]" twice; the jitted call's own arguments say which is which."""
    f = jax.jit(lambda a, b: a - b)
    a, b = np.ones(4, np.float32), np.zeros(4, np.float32)
    with probes.transfers() as rep:
        f(a, b)
    rows = [(t["argument"], t["count"], t["value"]) for t in rep.to_dict()["transfers"]]
    assert rows == [("a", 1, "f32[4]"), ("b", 1, "f32[4]")] and rep.total == 2


def test_two_numpy_arguments_of_one_type_not_observed_are_both_named_as_candidates():
    f = jax.jit(lambda a, b: a - b)
    a, b = np.ones(4, np.float32), np.zeros(4, np.float32)
    with probes.keys(record=True), probes.transfers() as rep:  # %%jax_keys observes the calls: not twice
        f(a, b)
    assert rep.calls_unobserved
    (group,) = rep.to_dict()["transfers"]
    assert group["count"] == 2 and group["argument"] == "" and group["candidates"] == ["a", "b"]
    assert "one of a, b" in str(rep)


def test_a_scalar_added_on_the_call_line_is_not_named_as_an_argument():
    """`loss = step(w, batch) + 1.0`: the batch is the call's argument; the 1.0 is copied on the same
    line by the addition, and no argument of the call is named for it."""
    step = jax.jit(lambda w, b: (b @ w).sum())
    w, batch = jnp.ones((3,)), np.ones((2, 3), np.float32)
    jax.clear_caches()  # an f32 scalar + 1.0 run before takes JAX's fast path, which describes no value
    with probes.transfers() as rep:
        loss = step(w, batch) + 1.0
    assert loss.shape == ()
    by_value = {t["value"]: t for t in rep.to_dict()["transfers"]}
    assert by_value["f32[2,3]"]["argument"] == "batch"
    assert by_value["f32[] weak"]["argument"] == "" and by_value["f32[] weak"]["candidates"] == []
    assert by_value["f32[] weak"]["line"]["code"] == "loss = step(w, batch) + 1.0"


def test_a_nested_one_line_lambda_is_not_seen_traced_and_nothing_is_guessed():
    """CPython gives no LINE event to a one-line lambda made inside a function, so its trace is not
    seen: the copy is still on the line that made the call, and no traced function is named."""

    class Holder:
        def __init__(self):
            self.table = np.ones((5, 5), np.float32)
            self.apply = jax.jit(lambda t, v: t @ v)

        def step(self, v):
            return self.apply(self.table, v)  # the call

    holder, v = Holder(), jnp.ones((5,))
    with probes.transfers() as rep:
        holder.step(v)
    (group,) = rep.to_dict()["transfers"]
    assert group["line"]["code"] == "return self.apply(self.table, v)  # the call"
    assert group["traced"] == "" and group["provenance"]["made_at"] == group["line"]


def test_lines_in_loops_nested_functions_and_lambdas_are_the_ones_that_transferred(double):
    """Each transfer is on the line that made it, whatever ran before and after it: a loop's lines
    alternating with clean ones, a nested function's line, and the line that called a lambda (which
    has no line events of its own)."""
    x_dev, np_x = jnp.ones(3), np.ones(3, np.float32)

    def outer(v):
        def inner(w):
            return double(w)  # inner's transfer

        clean = double(x_dev)  # clean, in outer
        return inner(v) + clean

    through_lambda = lambda v: double(v)  # noqa: E731

    with probes.transfers() as rep:
        for i in range(3):
            double(x_dev)  # clean, in the loop
            outer(np_x)  # the helper's line: nothing of its own
            through_lambda(np_x)  # the lambda's caller
            y = double(x_dev) + i  # a Python int, added
            double(x_dev)  # clean again
        del y
    by_line: dict[str, int] = {}
    for group in rep.transfers:  # a value JAX's fast path did not describe may be a group of its own
        by_line[group.line.code] = by_line.get(group.line.code, 0) + group.count
    assert by_line == {
        "return double(w)  # inner's transfer": 3,
        "through_lambda(np_x)  # the lambda's caller": 3,
        "y = double(x_dev) + i  # a Python int, added": 3,
    }, by_line
    assert rep.total == 9
    [inner_group] = [t for t in rep.transfers if t.line.function == "inner"]
    assert inner_group.line.code.startswith("return double(w)")


@pytest.fixture
def quick_quiet(monkeypatch):
    """Lines go quiet after 30 clean lines in a row and 3 runs each (1,000 and 20 by default). The call
    sampler looks at every call here: what these tests follow is which line made a copy, and on a busy
    machine the sampler (3% of the block's time after each function's first 40 calls) skipped the every-50th
    call's NumPy argument - the copies were then on the right line but not named by the array (1 + 3)."""
    module = sys.modules["jaxmagic.probes._transfers.probe"]
    monkeypatch.setattr(module, "QUIET_LINES", 30)
    monkeypatch.setattr(module, "QUIET_RUNS", 3)
    sampler = sys.modules["jaxmagic._jax.call_sampling"].CallSampler
    monkeypatch.setattr(module, "CallSampler", lambda: sampler(share=None))  # share None: every call


def test_an_if_taken_now_and_then_in_a_quiet_loop_is_named_exactly(double, quick_quiet):
    """A loop goes quiet (its lines' events off); the body of an `if` taken every 50th step (a metric
    logged with NumPy data) has run too few times to be quiet, so it switches the events on again and
    its transfers are on its own line."""
    x_dev, np_x = jnp.ones(3), np.ones(3, np.float32)
    with probes.transfers() as rep:
        for i in range(200):
            s = double(x_dev)  # clean
            if i % 50 == 49:
                double(np_x)  # every 50th step
    del s
    assert [(t.line.code, t.count) for t in rep.transfers] == [("double(np_x)  # every 50th step", 4)]
    assert rep.total == 4


def test_a_quiet_line_that_starts_transferring_is_listed_among_the_loops_lines(double, quick_quiet):
    """A line clean for many runs that then passes a NumPy array is found late (its event was off): the
    report lists the lines that may have made it - never one line it did not see - and later blocks
    follow every line again."""
    x_dev, np_x = jnp.ones(3), np.ones(3, np.float32)
    with probes.transfers() as rep:
        for i in range(100):
            v = np_x if i >= 60 else x_dev  # NumPy from step 60
            double(v)  # transfers from step 60
    [group] = rep.transfers
    assert group.line is None and group.count == 40 and rep.total == 40
    assert "double(v)  # transfers from step 60" in [line.code for line in group.among]
    # the log's line is not known (its event was off); the call's observer saw the call and its line, and
    # the headline is that finding, as the doctor and the watch tell it
    assert rep.summary.startswith("`<lambda>` was given a NumPy array (f32[3], argument `v`) in 40 calls")
    assert "switched off" in group.provenance.unknown
    # The lines switched off in that block are followed in the next one.
    with probes.transfers() as again:
        for _ in range(5):
            v = np_x
            double(v)  # transfers from step 60
    assert [(t.line.code, t.count) for t in again.transfers] == [("double(v)  # transfers from step 60", 5)]


def test_a_function_whose_lines_went_quiet_is_followed_in_the_next_block(double, quick_quiet):
    x_dev, np_x = jnp.ones(3), np.ones(3, np.float32)

    def step(v):
        return double(v)  # the step's call

    with probes.transfers() as clean:
        for _ in range(100):
            step(x_dev)
    assert not clean.transfers
    with probes.transfers() as rep:
        step(np_x)
    assert [(t.line.code, t.count) for t in rep.transfers] == [("return double(v)  # the step's call", 1)]
