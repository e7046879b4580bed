"""%jax_gather: programs that differ between processes, and values that drift apart.

The shapes are those of the threads issue 42 cites: processes that compiled different
programs and deadlock in their next collective (openxla/xla#7716; marin#9042: a shape
or a branch that depends on the process index), and replicated parameters that silently
differ on one process. Here the "processes" are reports made in this process (and a
view whose engines run here); tests/test_gather.py runs the same on real engines.
"""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import jaxmagic.probes as probes
from jaxmagic._jax.program_prints import print_of_text
from jaxmagic.probes._gather import ProcessEntry, entry_of, merge
from jaxmagic.probes._gather.values import differing_leaves, largest_difference, value_finding

pytest.importorskip("ipyparallel", reason="ipyparallel is the optional extra jaxmagic[parallel]")


@pytest.fixture
def on_an_engine(monkeypatch):
    """The compilation probe digests programs only in a multi-process job: here, as on an ipyparallel engine."""
    monkeypatch.setitem(sys.modules, "ipyparallel.engine", types.ModuleType("ipyparallel.engine"))


def _compiled_on(processes: list[dict]) -> list:
    """A %%jax_compiles report per "process": ``step`` made anew (so it compiles) and called as each says."""
    import jax
    import jax.numpy as jnp

    def make(scale):
        @jax.jit
        def step(w, x):
            h = x @ w
            if scale != 1.0:  # a Python branch on per-process configuration: another program
                h = h * scale
            return w - 0.01 * (x.T @ h)

        return step

    reports = []
    for process in processes:
        jitted = make(process.get("scale", 1.0))
        with probes.compiles() as report:
            for rows in process["rows"]:
                jitted(jnp.ones(3), jnp.ones((rows, 3)))
        reports.append(report)
    return reports


def _merged(reports):
    return merge([entry_of(r, process=i) for i, r in enumerate(reports)], "rep").to_dict()


# -- programs ------------------------------------------------------------------------------------


def test_a_ragged_last_batch_on_one_process_names_it_with_the_operation_where_the_shape_enters(on_an_engine):
    data = _merged(_compiled_on([{"rows": [8, 8]}, {"rows": [8, 8]}, {"rows": [8, 6]}]))
    (finding,) = [f for f in data["findings"] if f["function"] == "step"]
    assert finding["area"] == "divergence" and finding["processes"] == [2], finding
    assert "first differing operation is `stablehlo.dot_general`" in finding["summary"], finding
    assert "h = x @ w" in finding["line"] and "line" in finding["line"]
    program = [d for d in finding["details"] if "program 2 of `step`" in d]
    assert program and "tensor<6x3xf32>" in program[0] and "tensor<8x3xf32>" in program[0], finding["details"]


def test_a_branch_on_per_process_configuration_inside_jit_is_another_program_with_the_same_signature(on_an_engine):
    data = _merged(_compiled_on([{"rows": [8]}, {"rows": [8], "scale": 2.0}, {"rows": [8]}]))
    (finding,) = [f for f in data["findings"] if f["function"] == "step"]
    # the argument types and counts agree: only the programs tell the processes apart
    assert finding["area"] == "program" and finding["processes"] == [1], finding
    assert "first differing operation is `stablehlo." in finding["summary"] and "h = h * scale" in finding["line"], (
        finding
    )
    assert "collective" in finding["fix"] and "process_index" in finding["fix"]


def test_the_same_programs_everywhere_give_no_program_finding(on_an_engine):
    data = _merged(_compiled_on([{"rows": [8, 6]}, {"rows": [8, 6]}]))
    assert not [f for f in data["findings"] if f["function"] == "step"], data["findings"]
    programs = data["processes"][0]["report"]["functions"][0]["programs"]
    assert len(programs) == 2 and programs[0]["digest"] != programs[1]["digest"]


def test_a_single_process_digests_no_program():
    assert not [
        p for f in _merged(_compiled_on([{"rows": [8]}]))["processes"][0]["report"]["functions"] for p in f["programs"]
    ]


def test_program_prints_ignore_locations_a_cell_file_differs_by_process():
    text = """module @jit_f {
  func.func public @main(%arg0: tensor<3xf32> loc("w")) -> (tensor<3xf32>) {
    %0 = stablehlo.tanh %arg0 : tensor<3xf32> loc(#loc3)
    return %0 : tensor<3xf32> loc(#loc)
  } loc(#loc)
} loc(#loc)
#loc = loc(unknown)
#loc1 = loc("/tmp/ipykernel_{pid}/1234.py":4:8 to :20)
#loc2 = loc("f"(#loc1))
#loc3 = loc("jit(f)/tanh"(#loc2))
"""
    printed = [print_of_text(text.replace("{pid}", pid), lambda f, n: f"{f}:{n}") for pid in ("101", "202")]
    assert printed[0].digest == printed[1].digest
    assert printed[0].lines == ["/tmp/ipykernel_101/1234.py:4"] and printed[0].ops[1][2] == 0


# -- values ----------------------------------------------------------------------------------


def _rows(trees: list[dict]) -> tuple[list, dict]:
    from jaxmagic.probes._gather.values import leaf_digest, leaves_of

    rows, values = [], {}
    for index, tree in enumerate(trees):
        leaves = leaves_of(tree)
        rows.append((ProcessEntry(index), [leaf_digest(path, leaf) for path, leaf in leaves]))
        values[index] = {path: np.asarray(leaf) for path, leaf in leaves}
    return rows, values


def _params(w_shift=0.0, step=10):
    return {"w": np.ones((4, 3), np.float32) + w_shift, "b": np.zeros(3, np.float32), "step": np.int32(step)}


def test_one_process_perturbed_names_its_leaf_and_the_largest_difference_and_not_the_others():
    shifted = _params()
    shifted["w"][2, 1] += 0.5
    rows, values = _rows([_params(), _params(), shifted])
    differing = differing_leaves(rows)
    assert list(differing) == ["['w']"] and [e.process for e in differing["['w']"]] == [2]
    finding = value_finding("params", rows, differing, values)
    assert finding is not None and finding.processes == [2]
    assert "1 of 3 leaves differ on process 2" in finding.summary and "0.5 in `params['w']`" in finding.summary
    assert "[2, 1]" in finding.details[0] and "1 of 12 element(s)" in finding.details[0]
    assert "larger than rounding" in finding.fix and "random key" in finding.fix


def test_a_step_counter_that_differs_says_steps_differ_and_rounding_size_says_order_of_arithmetic():
    rows, values = _rows([_params(step=10), _params(w_shift=1e-7, step=11)])
    finding = value_finding("state", rows, differing_leaves(rows), values)
    assert finding is not None and finding.processes == [0, 1]  # two processes: no majority, both named
    assert "same number of updates" in finding.fix and "rounding size" in finding.fix, finding.fix


def test_a_leaf_missing_on_one_process_is_named_with_the_structure_difference():
    other = _params()
    del other["b"]
    rows, values = _rows([_params(), _params(), other])
    finding = value_finding("params", rows, differing_leaves(rows), values)
    assert finding is not None and "no such leaf" in finding.details[0], finding.details


def test_the_largest_difference_treats_nan_in_both_as_equal_and_nan_on_one_as_infinite():
    both = largest_difference(np.array([np.nan, 1.0]), np.array([np.nan, 1.0]))
    one = largest_difference(np.array([np.nan, 1.0]), np.array([0.0, 1.0]))
    assert both["difference"] == 0.0 and one["difference"] == float("inf") and one["index"] == [0]


class PerEngineView:
    """A view whose engines run here, each with its own value of ``params`` in the shell's namespace."""

    class Result:
        def __init__(self, value):
            self.value = value

        def get(self, timeout=None):
            return self.value

    def __init__(self, shell, params_by_engine):
        self.shell, self.params = shell, params_by_engine
        self.targets, self.client = list(range(len(params_by_engine))), self

    def __getitem__(self, engine):
        self.engine = engine
        return self

    def apply_async(self, fn, *args):
        self.shell.user_ns["params"] = self.params[self.engine]
        return PerEngineView.Result(fn(*args))


def test_jax_gather_values_fetches_only_the_leaves_that_differ_and_forgets_the_kept_tree(ip):
    import jax.numpy as jnp

    from jaxmagic.probes._gather import values as values_module

    replicated = [{"w": jnp.ones((4, 3)), "b": jnp.zeros(3)} for _ in range(3)]
    replicated[1]["w"] = replicated[1]["w"].at[0, 0].set(3.0)
    ip.user_ns["view3"] = PerEngineView(ip, replicated)
    ip.run_line_magic("jax_gather", "--values params --view view3 -o merged")
    data = ip.user_ns["merged"].to_dict()
    (finding,) = data["findings"]
    assert finding["area"] == "values" and finding["processes"] == [None], finding  # no jax.distributed here
    assert "`params['w']` on engine 1: largest difference 2" in finding["details"][0], finding["details"]
    assert "1 of 2 leaves differ on engine 1" in finding["summary"]
    assert values_module._KEPT == {}  # every engine forgot the tree it kept between the rounds
    text = str(ip.user_ns["merged"])
    assert text.splitlines()[0].startswith("%jax_gather [FOUND] `params`: 1 of 2 leaves differ"), text


def test_jax_gather_without_a_report_or_values_is_a_usage_error(ip):
    from IPython.core.error import UsageError

    with pytest.raises(UsageError, match="--values"):
        ip.run_line_magic("jax_gather", "")


SCRIPT = """
import sys, jax, jax.numpy as jnp, jaxmagic
port, me = sys.argv[1], int(sys.argv[2])
jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=2, process_id=me)
params = {"w": jnp.ones((2, 2)), "count": jnp.int32(7 + me)}   # process 1 ran one step more
merged = jaxmagic.gather(None, timeout=60, values=params, values_name="params")
if me == 0:
    (finding,) = merged.to_dict()["findings"]
    print("MERGED", finding["summary"], "|", finding["details"][0], "|", finding["fix"][:60])
else:
    print("MERGED", merged)
"""


def test_a_script_compares_values_through_the_key_value_store_and_names_the_counter(tmp_path):
    import os
    import socket
    import subprocess
    import sys

    script = tmp_path / "drift.py"
    script.write_text(SCRIPT)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    procs = [
        subprocess.Popen([sys.executable, str(script), port, str(i)], stdout=subprocess.PIPE, text=True, env=env)
        for i in range(2)
    ]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert (
        "`params`: 1 of 2 leaves differ on process 0, process 1 - largest difference 1 in `params['count']`" in outs[0]
    )
    assert "`params['count']` on process 1: largest difference 1 (8 where process 0 has 7" in outs[0], outs[0]
    assert "An integer leaf differs" in outs[0] and "MERGED None" in outs[1]


def test_an_expression_that_fails_on_the_engines_is_named_per_engine_not_raised(ip):
    ip.user_ns["view2"] = PerEngineView(ip, [{"w": 1.0}, {"w": 1.0}])
    ip.run_line_magic("jax_gather", "--values params['<b>missing</b>'] --view view2 -o merged")
    data = ip.user_ns["merged"].to_dict()
    (failed,) = data["findings"]  # the engines answered: what failed, not a hang (issue 52, 7b)
    assert failed["area"] == "values" and "KeyError" in failed["summary"], failed
    html = ip.user_ns["merged"]._repr_mimebundle_()["text/html"]
    assert "<b>missing" not in html and "KeyError" in html  # the expression's text is escaped


def test_a_leaf_split_across_processes_is_not_compared_and_is_named_in_the_notes():
    from jaxmagic.probes._gather.values import leaf_digest, split_note

    class RowsOfAGlobalArray:  # the shape of a jax.Array sharded over the processes of a job
        shape, dtype, is_fully_addressable = (8, 3), "float32", False
        sharding = types.SimpleNamespace(is_fully_replicated=False)

    rows = [(ProcessEntry(i), [leaf_digest("['batch']", RowsOfAGlobalArray())]) for i in range(2)]
    assert differing_leaves(rows) == {}
    assert (
        "split across processes" in split_note("state", rows)[0] and "`state['batch']`" in split_note("state", rows)[0]
    )
