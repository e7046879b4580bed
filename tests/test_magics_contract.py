"""Contracts every registered magic keeps (DESIGN.md), checked for each one.

A new magic joins these tests by adding its example invocations to EXAMPLES;
a registered magic without examples fails ``test_every_magic_has_examples``.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap

import pytest
from IPython.core.error import UsageError

from jaxmagic._jax import monitoring_tool
from jaxmagic._jax.monitoring_tool import watchers_held
from jaxmagic._jax.restore import take_snapshot
from jaxmagic.ipython.magics import JaxMagics
from jaxmagic.render import static_bundle

EVIL = "<script>alert(1)</script><img src=x onerror=alert(2)>"

SETUP = f"""
import jax, jax.numpy as jnp
from jax.experimental import checkify
EVIL = {EVIL!r}
def f_ok(x):
    return jnp.sum(x * 2)
def f_evil(x):
    checkify.check(jnp.all(x < 0), EVIL)
    return x
def f_raises(x):
    raise ValueError(EVIL)
def f_interrupt(x):
    raise KeyboardInterrupt
def f_bool(x):
    if x > 0:  # {EVIL}
        return x
    return -x
try:
    jax.jit(f_bool)(1.0)
except Exception as _error:
    tracer_error = _error
import jaxmagic.probes
with jaxmagic.probes.nans() as rep_g:
    jnp.ones(3).sum()
class InProcessView:  # the shape of an ipyparallel view, its "engines" run here (%jax_gather's contract)
    class Result:
        def __init__(self, fn, args, fail):
            self.fn, self.args, self.fail = fn, args, fail
        def get(self, timeout=None):
            if self.fail:
                raise ValueError(self.fail)
            return self.fn(*self.args)
    def __init__(self, n, fail=""):
        self.targets, self.client, self.fail = list(range(n)), self, fail
    def __getitem__(self, engine):
        return self
    def apply_async(self, fn, *args):
        return InProcessView.Result(fn, args, self.fail)
local_view, evil_view = InProcessView(2), InProcessView(2, fail=EVIL)
"""


@dataclasses.dataclass
class MagicExample:
    ok: str  # a normal invocation storing its report in {out}
    raising: str  # the user's code raises (or reports) an error whose text is EVIL
    interrupt: str  # the user's code raises KeyboardInterrupt
    bad_option: str  # an unknown option
    malformed: str | None = None  # a malformed expression (line magics taking one)
    evil: str | None = None  # puts EVIL into the report; defaults to `raising`

    @property
    def escaping(self) -> str:
        return self.evil or self.raising


EXAMPLES = {
    "jax_nans": MagicExample(
        ok="%%jax_nans -o {out}\nx_ok = jnp.ones(3) * 2\nx_ok.sum()",
        raising="%%jax_nans -o {out}\nraise ValueError(EVIL)",
        interrupt="%%jax_nans -o {out}\nraise KeyboardInterrupt",
        bad_option="%%jax_nans --bogus\n1",
    ),
    "jax_stages": MagicExample(
        ok="%jax_stages f_ok(jnp.ones(3)) -n 3 -o {out}",
        raising="%jax_stages f_raises(jnp.ones(3)) -o {out}",
        interrupt="%jax_stages f_interrupt(jnp.ones(3)) -o {out}",
        bad_option="%jax_stages f_ok(jnp.ones(3)) --bogus",
        malformed="%jax_stages f_ok(jnp.ones(3)",
    ),
    "jax_transfers": MagicExample(
        ok="%%jax_transfers -o {out}\njax.jit(f_ok)(jnp.ones(3))\njax.jit(f_ok)(1.0)",
        raising="%%jax_transfers -o {out}\nraise ValueError(EVIL)",
        interrupt="%%jax_transfers -o {out}\njax.jit(f_ok)(2.0)\nraise KeyboardInterrupt",
        bad_option="%%jax_transfers --bogus\n1",
    ),
    "jax_check": MagicExample(
        ok="%jax_check f_ok(jnp.ones(3)) -o {out}",
        raising="%jax_check f_evil(jnp.ones(3)) -o {out}",
        interrupt="%jax_check f_interrupt(jnp.ones(3)) -o {out}",
        bad_option="%jax_check f_ok(jnp.ones(3)) --bogus",
        malformed="%jax_check f_ok(jnp.ones(3)",
    ),
    "jax_compiles": MagicExample(
        ok="%%jax_compiles -o {out}\njax.jit(f_ok)(jnp.ones(3))\njax.jit(f_ok)(jnp.ones(4))",
        raising="%%jax_compiles -o {out}\njax.jit(f_ok)(jnp.ones(5))\nraise ValueError(EVIL)",
        interrupt="%%jax_compiles -o {out}\njax.jit(f_ok)(jnp.ones(6))\nraise KeyboardInterrupt",
        bad_option="%%jax_compiles --bogus\n1",
    ),
    "jax_sharding": MagicExample(
        ok="%jax_sharding jnp.arange(6.0).reshape(2, 3) -o {out}",
        raising="%jax_sharding jax.jit(f_raises)(jnp.ones(3)) --collectives -o {out}",
        interrupt="%jax_sharding jax.jit(f_interrupt)(jnp.ones(3)) --collectives -o {out}",
        bad_option="%jax_sharding jnp.ones(3) --bogus",
        malformed="%jax_sharding jnp.ones(3",
    ),
    "jax_per_device": MagicExample(
        ok="%%jax_per_device -o {out}\njax.debug.print('x = {{x}}', x=jnp.ones(2))",
        raising="%%jax_per_device -o {out}\nraise ValueError(EVIL)",
        interrupt="%%jax_per_device -o {out}\nraise KeyboardInterrupt",
        bad_option="%%jax_per_device --bogus\n1",
    ),
    "jax_devices": MagicExample(
        ok="%jax_devices -o {out}",
        raising="%jax_devices f_raises(1) -o {out}",
        interrupt="%jax_devices f_interrupt(1) -o {out}",
        bad_option="%jax_devices 1 --bogus",
        malformed="%jax_devices (1",
        # XLA_FLAGS is shown in the report: a string from the user's environment.
        evil="import os\nos.environ['XLA_FLAGS'] = EVIL\n%jax_devices -o {out}\ndel os.environ['XLA_FLAGS']",
    ),
    "jax_leaks": MagicExample(
        ok="%%jax_leaks -o {out}\nx_ok = jax.jit(f_ok)(jnp.ones(3))",
        raising="%%jax_leaks -o {out}\nraise ValueError(EVIL)",
        interrupt="%%jax_leaks -o {out}\nraise KeyboardInterrupt",
        bad_option="%%jax_leaks --bogus\n1",
        # A leak into a dict under a user-chosen key: the key is part of the holder's name.
        evil="%%jax_leaks -o {out}\nevil_box = dict()\ndef evil_leak(x):\n    evil_box[EVIL] = x\n    return x\n"
        "jax.jit(evil_leak)(1.0)",
    ),
    "jax_explain": MagicExample(
        ok="%jax_explain tracer_error -o {out}",
        raising="%jax_explain f_raises(1) -o {out}",
        interrupt="%jax_explain f_interrupt(1) -o {out}",
        bad_option="%jax_explain tracer_error --bogus",
        malformed="%jax_explain tracer_error[",
        evil="%jax_explain tracer_error -o {out}",  # the failing line's comment holds EVIL
    ),
    "jax_config": MagicExample(
        ok="%jax_config -o {out}",
        raising="%jax_config -o {out}\nraise ValueError(EVIL)",
        interrupt="%jax_config -o {out}\nraise KeyboardInterrupt",
        bad_option="%jax_config --bogus",
        evil="jax.config.update('jax_hlo_source_file_canonicalization_regex', EVIL)\ntry:\n"
        "    %jax_config -o {out}\nfinally:\n    jax.config.update('jax_hlo_source_file_canonicalization_regex', None)",
    ),
    "jax_env": MagicExample(
        ok="%jax_env -o {out}",
        raising="%jax_env -o {out}\nraise ValueError(EVIL)",
        interrupt="%jax_env -o {out}\nraise KeyboardInterrupt",
        bad_option="%jax_env --bogus",
        evil="import os\nos.environ['JAX_JAXMAGIC_TEST'] = EVIL\ntry:\n    %jax_env -o {out}\n"
        "finally:\n    del os.environ['JAX_JAXMAGIC_TEST']",
    ),
    "jax_traceback": MagicExample(
        ok="%jax_traceback -o {out}",
        raising="%jax_traceback -o {out}\nraise ValueError(EVIL)",
        interrupt="%jax_traceback -o {out}\nraise KeyboardInterrupt",
        bad_option="%jax_traceback --bogus",
        # The last exception's message is shown.
        evil="import sys\ntry:\n    f_raises(1)\nexcept ValueError as _e:\n    sys.last_exc = sys.last_value = _e\n"
        "%jax_traceback -o {out}",
    ),
    "jax_hlo": MagicExample(
        ok="%jax_hlo f_ok(jnp.ones(3)) -o {out}",
        raising="%jax_hlo f_raises(jnp.ones(3)) -o {out}",
        interrupt="%jax_hlo f_interrupt(jnp.ones(3)) -o {out}",
        bad_option="%jax_hlo f_ok(jnp.ones(3)) --bogus",
        malformed="%jax_hlo f_ok(jnp.ones(3)",
    ),
    "jax_print": MagicExample(
        ok="%%jax_print -o {out}\njax.jit(lambda x: (jax.debug.print('x={{x}}', x=x), x)[1])(jnp.ones(2))",
        raising="%%jax_print -o {out}\njax.debug.print(EVIL)\nraise ValueError(EVIL)",
        interrupt="%%jax_print -o {out}\njax.debug.print('before')\nraise KeyboardInterrupt",
        bad_option="%%jax_print --bogus\n1",
    ),
    "jax_bisect": MagicExample(
        ok="%jax_bisect f_ok(jnp.arange(3.0)) -o {out}",
        raising="%jax_bisect f_raises(jnp.ones(3)) -o {out}",
        interrupt="%jax_bisect f_interrupt(jnp.ones(3)) -o {out}",
        bad_option="%jax_bisect f_ok(jnp.ones(3)) --bogus",
        malformed="%jax_bisect f_ok(jnp.ones(3)",
    ),
    "jax_keys": MagicExample(
        ok="%%jax_keys -o {out}\nk_ok, sub_ok = jax.random.split(jax.random.key(0))\njax.random.normal(sub_ok, (2,))",
        raising="%%jax_keys -o {out}\nraise ValueError(EVIL)",
        interrupt="%%jax_keys -o {out}\nraise KeyboardInterrupt",
        bad_option="%%jax_keys --bogus\n1",
        # The reused key's line (a comment holding EVIL) is shown.
        evil="%%jax_keys -o {out}\nk_evil = jax.random.key(1)\njax.random.normal(k_evil)\n"
        "jax.random.normal(k_evil)  # EVIL: <script>alert(1)</script><img src=x onerror=alert(2)>",
    ),
    "jax_doctor": MagicExample(
        ok="%%jax_doctor -o {out}\nx_doc = jax.jit(f_ok)(jnp.ones(3))",
        raising="%%jax_doctor -o {out}\nraise ValueError(EVIL)",
        interrupt="%%jax_doctor -o {out}\njax.jit(f_ok)(jnp.ones(2))\nraise KeyboardInterrupt",
        bad_option="%%jax_doctor --bogus\n1",
    ),
    "jax_profile": MagicExample(
        ok="%%jax_profile -o {out}\njax.jit(f_ok)(jnp.ones(3)).block_until_ready()",
        raising="%%jax_profile -o {out}\njax.jit(f_ok)(jnp.ones(4))\nraise ValueError(EVIL)",
        interrupt="%%jax_profile -o {out}\njax.jit(f_ok)(jnp.ones(2))\nraise KeyboardInterrupt",
        bad_option="%%jax_profile --bogus\n1",
    ),
    "jax_live": MagicExample(  # a line and a cell magic: the line form here, the cell form in the others
        ok="%jax_live -o {out}",
        raising="%%jax_live -o {out}\nheld_evil = {{EVIL: jnp.ones(3)}}\nraise ValueError(EVIL)",
        interrupt="%%jax_live -o {out}\nraise KeyboardInterrupt",
        bad_option="%jax_live --bogus",
    ),
    "jax_memory": MagicExample(  # a line and a cell magic: the line form for ok, the cell form in the others
        ok="%jax_memory f_ok(jnp.ones(3)) -o {out}",
        raising="%%jax_memory -o {out}\njax.jit(f_ok)(jnp.ones(5))\nraise ValueError(EVIL)",
        interrupt="%%jax_memory -o {out}\njax.jit(f_ok)(jnp.ones(2))\nraise KeyboardInterrupt",
        bad_option="%jax_memory f_ok(jnp.ones(3)) --bogus",
        malformed="%jax_memory f_ok(jnp.ones(3)",
    ),
    "jax_gather": MagicExample(
        ok="%jax_gather rep_g --view local_view -o {out}",
        raising="%jax_gather rep_g --view local_view -o {out}\nraise ValueError(EVIL)",
        interrupt="%jax_gather rep_g --view local_view -o {out}\nraise KeyboardInterrupt",
        bad_option="%jax_gather rep_g --bogus",
        evil="%jax_gather rep_g --view evil_view -o {out}",  # an engine's error, shown
    ),
    "jax_debug": MagicExample(  # a line and a cell magic: the cell form here; the line form debugs `evil`
        ok="%%jax_debug -o {out}\njax.jit(f_ok)(jnp.ones(3))",
        raising="%%jax_debug -o {out}\nraise ValueError(EVIL)",
        interrupt="%%jax_debug -o {out}\njax.jit(f_ok)(jnp.ones(2))\nraise KeyboardInterrupt",
        bad_option="%%jax_debug --bogus\n1",
        # %jax_debug after a failed call: the re-run stops in f_raises, whose error holds EVIL
        evil="try:\n    jax.jit(f_raises)(jnp.ones(3))\nexcept ValueError as _error:\n    debug_evil = _error\n"
        "%jax_debug debug_evil -o {out}",
    ),
    "jax_watch": MagicExample(  # a later cell is watched: run here as a cell inside the example's own cell
        ok="%jax_watch on -o {out}\nget_ipython().run_cell('y_w = jax.jit(f_ok)(jnp.ones(3))')\n%jax_watch off",
        raising="%jax_watch -o {out}\nget_ipython().run_cell('raise ValueError(EVIL)')\n%jax_watch off\n"
        "raise ValueError(EVIL)",
        interrupt="%jax_watch -o {out}\nget_ipython().run_cell('jax.jit(f_ok)(jnp.ones(2))\\nraise KeyboardInterrupt')"
        "\n%jax_watch off\nraise KeyboardInterrupt",
        bad_option="%jax_watch --bogus",
        evil="%jax_watch -o {out}\nget_ipython().run_cell('jax.jit(jnp.log)(-jnp.ones(2))  # ' + EVIL)\n%jax_watch off",
    ),
}


def registered_magics() -> list[str]:
    # A line-and-cell magic (%jax_live / %%jax_live) is registered twice under one name.
    return sorted({name for names in JaxMagics.magics.values() for name in names})


@pytest.fixture(scope="module")
def shell(ip):
    ip.run_cell(SETUP)
    return ip


def test_every_magic_has_examples():
    assert sorted(EXAMPLES) == registered_magics()


@pytest.mark.parametrize("magic", registered_magics())
@pytest.mark.parametrize("case", ["ok", "raising", "interrupt"])
def test_leaves_no_trace(shell, magic, case):
    before = take_snapshot()
    result = shell.run_cell(getattr(EXAMPLES[magic], case).format(out="rep"))
    after = take_snapshot()
    assert before.differences(after) == []
    assert watchers_held() == []  # sys.monitoring's tool ids (Python 3.11: its settrace stand-in) released
    if case == "interrupt":
        assert isinstance(result.error_in_exec, KeyboardInterrupt)
    if case == "ok":
        assert result.success


@pytest.mark.parametrize("magic", registered_magics())
def test_report_is_stored_and_escaped(shell, magic):
    shell.user_ns.pop("evil_report", None)
    shell.run_cell(EXAMPLES[magic].escaping.format(out="evil_report"))
    report = shell.user_ns["evil_report"]
    html = static_bundle(report.document())["text/html"]
    assert "&lt;script&gt;" in html, "the user's text should appear, escaped"
    assert "<script>" not in html and "<img" not in html
    assert EVIL in str(report.to_dict())


@pytest.mark.parametrize("magic", registered_magics())
def test_unknown_option_is_a_usage_error(shell, magic):
    result = shell.run_cell(EXAMPLES[magic].bad_option)
    assert isinstance(result.error_in_exec, UsageError)
    assert "unrecognized arguments: --bogus" in str(result.error_in_exec)


@pytest.mark.parametrize("magic", [m for m in registered_magics() if EXAMPLES[m].malformed])
def test_malformed_expression_is_a_usage_error(shell, magic):
    result = shell.run_cell(EXAMPLES[magic].malformed)
    assert isinstance(result.error_in_exec, UsageError)
    assert "not valid Python" in str(result.error_in_exec)


@pytest.mark.parametrize("magic", registered_magics())
def test_help_is_real(shell, magic):
    doc = getattr(JaxMagics, magic).__doc__
    assert "-o NAME" in doc or "--output" in doc


def test_cell_exception_is_the_users_own_with_cell_lines(shell):
    result = shell.run_cell("%%jax_nans\ny = 1\nraise ValueError('mine')")
    error = result.error_in_exec
    assert isinstance(error, ValueError) and str(error) == "mine"
    import traceback

    last = traceback.extract_tb(error.__traceback__)[-1]
    assert last.lineno == 3 and last.line == "raise ValueError('mine')"
    assert last.filename.startswith("<ipython-input") or last.filename.endswith(".py")


def test_last_expression_still_displays(shell):
    shell.run_cell("%%jax_nans\nanswer = 40\nanswer + 2")
    assert shell.user_ns["_"] == 42


def test_nan_cell_fails_and_report_explains(shell):
    result = shell.run_cell("%%jax_nans -o nan_rep\njnp.log(jnp.array(-1.0))")
    assert isinstance(result.error_in_exec, FloatingPointError)
    assert shell.user_ns["nan_rep"].primitive == "log"


@pytest.mark.skipif(not monitoring_tool.HAS_MONITORING, reason="counts calls: Python 3.11 has no sys.monitoring")
def test_nans_inside_names_the_masked_overflow_and_its_lines(shell):
    shell.run_cell("@jax.jit\ndef soft_clip(x):\n    y = jnp.exp(x)\n    return jnp.where(jnp.isfinite(y), y, 0.0)\n")
    plain = shell.run_cell("%%jax_nans --infs -o plain_rep\nsoft_clip(jnp.array([100.0]))")
    assert plain.success and shell.user_ns["plain_rep"].status.value == "ok"
    assert "1 call of `soft_clip`" in shell.user_ns["plain_rep"].summary
    result = shell.run_cell("%%jax_nans --infs --inside -o inside_rep\nsoft_clip(jnp.array([100.0]))")
    assert result.success  # a masked value is a finding, not an error: the cell's result stands
    found = shell.user_ns["inside_rep"].to_dict()["inside_searches"][0]
    assert (found["producer"]["primitive"], found["masked_by"]) == ("exp", "jnp.where")
    assert found["producer"]["line"]["code"] == "y = jnp.exp(x)"
    assert found["masked_line"]["code"] == "return jnp.where(jnp.isfinite(y), y, 0.0)"


def test_unload_and_reload(shell):
    count = len(shell.magics_manager.magics["cell"])
    shell.run_line_magic("unload_ext", "jaxmagic")
    assert "jax_nans" not in shell.magics_manager.magics["cell"]
    assert "jax_check" not in shell.magics_manager.magics["line"]
    shell.run_line_magic("load_ext", "jaxmagic")
    shell.run_line_magic("reload_ext", "jaxmagic")
    assert len(shell.magics_manager.magics["cell"]) == count
    assert shell.run_cell("%%jax_nans\n1").success


LOAD_WITHOUT_BACKEND = textwrap.dedent("""
    from IPython.testing.globalipapp import start_ipython
    ip = start_ipython()
    ip.run_line_magic("load_ext", "jaxmagic")
    import jax._src.xla_bridge as xb
    print("backend started:", xb.backends_are_initialized())
    ip.run_cell("import os; os.environ['XLA_FLAGS'] = '--xla_force_host_platform_device_count=4'")
    ip.run_cell("import jax; n = jax.device_count()")
    print("devices:", ip.user_ns["n"])
""")


def test_load_ext_does_not_start_a_backend():
    # The CPU's fake devices say the backend started only after the flag was set. On a TPU machine the child
    # runs on the CPU: this process holds the chip, which one process at a time can open.
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    proc = subprocess.run(
        [sys.executable, "-c", LOAD_WITHOUT_BACKEND], capture_output=True, text=True, timeout=300, env=env
    )
    assert "backend started: False" in proc.stdout, proc.stdout + proc.stderr
    assert "devices: 4" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("body", ["x = (1,\n", "return 1\n"])
def test_syntax_error_is_shown_once_by_ipython_without_a_report(shell, capsys, body):
    # "return 1" parses but does not compile: it used to be shown twice, the second time through our frames.
    shell.user_ns.pop("syntax_rep", None)
    capsys.readouterr()
    result = shell.run_cell("%%jax_nans -o syntax_rep\n" + body)
    shown = capsys.readouterr().out
    assert "syntax_rep" not in shell.user_ns  # nothing ran, so nothing to report
    assert isinstance(result.error_in_exec, SyntaxError)  # the cell fails, as it would without the magic
    assert shown.count("Error:") == 1 and "jaxmagic" not in shown


@pytest.mark.parametrize("body", ["x = (1,\n", "return 1\n"])
def test_a_nested_cell_magic_whose_body_does_not_compile_shows_its_syntax_error_once(shell, capsys, body):
    # issue 63.11: under %%jax_nans, %%jax_compiles' body is the one that cannot run; it was shown by the inner
    # magic, then a second time through jaxmagic's frames by the outer one. Now once, the user's own line.
    shell.user_ns.pop("syntax_rep", None)
    capsys.readouterr()
    result = shell.run_cell("%%jax_nans -o syntax_rep\n%%jax_compiles\n" + body)
    shown = capsys.readouterr().out
    assert "syntax_rep" not in shell.user_ns
    assert isinstance(result.error_in_exec, SyntaxError)
    assert shown.count("Error:") == 1 and "jaxmagic" not in shown and "line 3" in shown, shown


def test_a_cell_that_ran_is_checked_again_once_an_input_transformer_breaks_it(shell, capsys):
    # The magic remembers which cell texts compile, so a re-run cell is not compiled twice; what a
    # text compiles to also depends on IPython's transformers, so a new one makes it check again.
    body = "rerun_value = 1\n"
    assert shell.run_cell("%%jax_nans\n" + body).success
    shell.user_ns.pop("syntax_rep", None)

    def breaks_it(lines):  # the body only: the magic's own cell is a run_cell_magic call by now
        return lines if "run_cell_magic" in lines[0] else ["rerun_value = (\n"]

    shell.input_transformers_post.append(breaks_it)
    try:
        capsys.readouterr()
        result = shell.run_cell("%%jax_nans -o syntax_rep\n" + body)
    finally:
        shell.input_transformers_post.remove(breaks_it)
    assert "syntax_rep" not in shell.user_ns
    assert isinstance(result.error_in_exec, SyntaxError)
    assert shell.run_cell("%%jax_nans -o syntax_rep\n" + body).success  # and runs again without it


class _Refused(Exception):
    """The user's own exception, raised by their function while it is traced."""


@pytest.mark.parametrize(
    "body, error",
    [
        ("raise _Refused('bad batch')", "_Refused"),
        ("return max(x.sum(), 2.0)", "TracerBoolConversionError"),  # Python's max on a traced scalar
        ("return x + 'a'", "TypeError"),
    ],
)
def test_jax_memory_call_raises_the_users_exception_after_its_report(shell, capsys, body, error):
    # issue 63.11: the function raising while traced made "[OK] No jitted call to measure: the cell made none",
    # the error only in a note, nothing raised. Now the report says the call raised, and the cell fails with the
    # user's own exception after it, as %jax_hlo and %jax_stages do.
    shell.user_ns["_Refused"] = _Refused
    shell.run_cell(f"def mem_fails(x):\n    {body}\n")
    shell.user_ns.pop("mem_rep", None)
    capsys.readouterr()
    result = shell.run_cell("%jax_memory mem_fails(jnp.ones(3)) -o mem_rep")
    assert type(result.error_in_exec).__name__ == error, result.error_in_exec
    report = shell.user_ns["mem_rep"]
    assert report.status.value == "error" and report.summary.startswith("Nothing measured: the call raised "), report
    assert error in report.summary and "the cell made none" not in report.summary
    shown = capsys.readouterr()
    traceback = shown.out + shown.err
    assert "in mem_fails" in traceback and "/jaxmagic/" not in traceback, traceback  # the user's frame, not ours


@pytest.mark.parametrize("folder", ["/proc/nope", "afile/sub", "a" * 300])
def test_profile_save_into_a_folder_it_cannot_create_is_a_usage_error(shell, tmp_path, folder):
    # issue 63.11: os.makedirs' FileNotFoundError / NotADirectoryError / OSError came out raw from the probe.
    from IPython.core.error import UsageError

    (tmp_path / "afile").write_text("")
    where = folder if folder.startswith("/") else str(tmp_path / folder)
    with pytest.raises(UsageError, match="--save cannot create the folder"):
        shell.run_cell_magic("jax_profile", f"--save {where}", "x = 1\n")
