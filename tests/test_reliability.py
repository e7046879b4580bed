"""The kernel, the user's error and other threads' state come first (issue 11), one test per failure found.

The property-based fuzz test is tests/test_magics_fuzz.py, the soak test tests/test_soak.py.
"""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
import threading
import time
import traceback

import pytest
from IPython.core.error import UsageError

from jaxmagic._jax.restore import take_snapshot
from jaxmagic.ipython.magics import JaxMagics

SETUP = """
import time
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import checkify
x_rel = jnp.arange(3.0)
kept = []
def f_rel_ok(x):
    return jnp.sum(x * 2)
def f_rel_raises(x):
    error = ValueError('mine')
    kept.append(error)
    raise error
class BrokenStr(Exception):
    def __str__(self):
        raise RuntimeError('__str__ is broken')
def f_rel_broken(x):
    error = BrokenStr()
    kept.append(error)
    raise error
"""


@pytest.fixture(scope="module")
def shell(ip):
    ip.run_cell(SETUP)
    return ip


def _shown(capsys) -> str:
    return capsys.readouterr().out


# -- 1. the kernel never dies ---------------------------------------------------------------------

SEGFAULT_CASES = textwrap.dedent("""
    import faulthandler; faulthandler.enable()
    from IPython.testing.globalipapp import start_ipython
    ip = start_ipython()
    ip.run_line_magic("load_ext", "jaxmagic")
    ip.run_cell("import jax.numpy as jnp, numpy as np\\nx = jnp.arange(3.0)")
    lines = ["%jax_bisect np.sum(x)", "%jax_hlo np.sum(x)", "%jax_stages np.sum(x) -n 2", "%jax_check np.sum(x)",
             "%jax_sharding --intermediates np.sum(x)", "%jax_bisect np.add(x, x)", "%jax_hlo np.add(x, x)",
             "%jax_stages np.sum.__call__(x) -n 2", "%jax_hlo --sweep n=1,2 np.sum(x)"]
    for round in range(2):  # jaxlib crashed on the second jax.jit of such a function
        for line in lines:
            result = ip.run_cell(line, silent=True)
            print(line, type(result.error_in_exec).__name__, flush=True)
    print("kernel alive")
""")


def test_functions_jaxlib_cannot_jit_twice_do_not_crash_the_process():
    proc = subprocess.run([sys.executable, "-c", SEGFAULT_CASES], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0 and "kernel alive" in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]


def test_jittable_wraps_only_what_cannot_be_weakly_referenced():
    import numpy as np

    from jaxmagic._jax.jittable import jittable

    def plain(x):
        return x

    assert jittable(plain) is plain
    wrapped = jittable(np.sum)
    assert wrapped is not np.sum and wrapped.__name__ == "sum" and wrapped([1, 2]) == 3


# -- 2. line magics raise the user's exception after the report ------------------------------------

LINE_CALLS = {
    "jax_check": "%jax_check f_rel_raises(x_rel) -o rel_rep",
    "jax_stages": "%jax_stages f_rel_raises(x_rel) -n 2 -o rel_rep",
    "jax_hlo": "%jax_hlo f_rel_raises(x_rel) -o rel_rep",
    "jax_bisect": "%jax_bisect f_rel_raises(x_rel) -o rel_rep",
    "jax_sharding": "%jax_sharding jax.jit(f_rel_raises)(x_rel) -o rel_rep",
}


def _holds_an_exception(value, seen=None) -> bool:
    seen = set() if seen is None else seen
    if id(value) in seen:
        return False
    seen.add(id(value))
    if isinstance(value, BaseException) or type(value).__name__ == "traceback":
        return True
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return any(_holds_an_exception(getattr(value, f.name), seen) for f in dataclasses.fields(value))
    if isinstance(value, dict):
        return any(_holds_an_exception(v, seen) for v in value.values())
    if isinstance(value, (list, tuple, set)):
        return any(_holds_an_exception(v, seen) for v in value)
    return False


@pytest.mark.parametrize("magic", sorted(LINE_CALLS))
def test_line_magic_raises_the_users_own_exception_after_the_report(shell, capsys, magic):
    shell.user_ns["kept"].clear()
    shell.user_ns.pop("rel_rep", None)
    _shown(capsys)
    result = shell.run_cell(LINE_CALLS[magic])
    shown = _shown(capsys)
    # the very exception the function raised (%jax_bisect runs it more than once)
    assert any(result.error_in_exec is raised for raised in shell.user_ns["kept"])
    report = shell.user_ns["rel_rep"]
    assert "mine" in str(report.to_dict())
    assert not _holds_an_exception(report), "the report must keep no exception (it would keep arrays alive)"
    assert shown.index("[FAILED]") < shown.index("ValueError                ")  # report first, then the error
    assert "jaxmagic" not in shown.split("[FAILED]")[-1].split("Traceback", 1)[-1]


def test_probe_functions_still_report_without_raising():
    import jax.numpy as jnp

    import jaxmagic.probes as probes

    def boom(x):
        raise ValueError("boom")

    report, error = probes.run_check_call(boom, (jnp.ones(2),), {})
    assert isinstance(error, ValueError) and "boom" in report.failure
    assert "boom" in probes.check_of_call(boom, (jnp.ones(2),), {}).failure


# -- 3. an exception whose __str__ raises is still the user's ------------------------------------

BROKEN_STR = {
    "jax_check": "%jax_check f_rel_broken(x_rel) -o rel_rep",
    "jax_stages": "%jax_stages f_rel_broken(x_rel) -o rel_rep",
    "jax_hlo": "%jax_hlo f_rel_broken(x_rel) -o rel_rep",
    "jax_bisect": "%jax_bisect f_rel_broken(x_rel) -o rel_rep",
    "jax_sharding": "%jax_sharding jax.jit(f_rel_broken)(x_rel) -o rel_rep",
}
CELL_MAGICS = sorted(JaxMagics.magics["cell"])


@pytest.mark.parametrize("line", [*BROKEN_STR.values(), *(f"%%{m} -o rel_rep\nf_rel_broken(1)" for m in CELL_MAGICS)])
def test_exception_with_a_broken_str_is_raised_unchanged(shell, line):
    shell.user_ns["kept"].clear()
    shell.user_ns.pop("rel_rep", None)
    result = shell.run_cell(line)
    assert any(result.error_in_exec is raised for raised in shell.user_ns["kept"])
    report = shell.user_ns["rel_rep"]
    assert "BrokenStr" in str(report.to_dict())


def test_traceback_and_explain_of_a_broken_str_exception(shell):
    shell.run_cell(
        "import sys\ntry:\n    f_rel_broken(1)\nexcept BrokenStr as _e:\n    sys.last_exc = sys.last_value = _e"
    )
    assert shell.run_cell("%jax_traceback -o rel_tb").success
    assert "BrokenStr" in str(shell.user_ns["rel_tb"].to_dict())
    # Not a tracer error: %jax_explain says it cannot explain it (a report, so -o works on every error).
    result = shell.run_cell("%jax_explain -o rel_ex")
    assert result.success and "BrokenStr" in str(shell.user_ns["rel_ex"].to_dict())
    assert shell.user_ns["rel_ex"].status.value == "error"


# -- 4. nesting ------------------------------------------------------------------------------------


def test_magic_cells_nest_and_each_report_is_shown(shell):
    result = shell.run_cell("%%jax_nans -o outer_rep\n%%jax_compiles -o inner_rep\njax.jit(lambda v: v + 1)(x_rel)")
    assert result.success, result.error_in_exec
    assert shell.user_ns["inner_rep"].count("<lambda>") == 1 and not shell.user_ns["outer_rep"].found


def test_a_magic_cell_run_by_the_body_keeps_its_error_and_the_body_goes_on(shell, capsys):
    _shown(capsys)
    cell = "%%jax_nans -o outer_rep\nget_ipython().run_cell('%%jax_compiles\\n1/0')\nafter_inner = True"
    result = shell.run_cell(cell)
    shown = _shown(capsys)
    assert result.success and shell.user_ns["after_inner"] is True
    assert "ZeroDivisionError" in shown and not shell.user_ns["outer_rep"].found


def test_an_inner_run_cell_error_is_shown_there_and_the_outer_cell_goes_on(shell, capsys):
    _shown(capsys)
    result = shell.run_cell("%%jax_nans -o outer_rep\nget_ipython().run_cell('1/0')\nafter_inner = 2")
    shown = _shown(capsys)
    assert result.success and shell.user_ns["after_inner"] == 2
    assert shown.index("ZeroDivisionError") < shown.index("%%jax_nans [OK]")


@pytest.mark.parametrize(("outer", "inner"), [("jax_doctor", "jax_keys"), ("jax_print", "jax_per_device")])
def test_magics_that_cannot_nest_say_so_in_a_usage_error(shell, outer, inner):
    result = shell.run_cell(f"%%{outer}\n%%{inner}\n1")
    assert isinstance(result.error_in_exec, UsageError)
    assert f"%%{inner}" in str(result.error_in_exec) and "do not combine" in str(result.error_in_exec)
    assert take_snapshot().differences(take_snapshot()) == []


# -- 6. an identical %%jax_leaks cell compiles nothing new ----------------------------------------


def test_identical_leaks_cell_compiles_nothing_the_second_time(shell):
    shell.run_cell("def leak_free_step(v):\n    return v * 3 + 1")
    cell = "%%jax_leaks\ny_leak_free = jax.jit(leak_free_step)(x_rel)"
    assert shell.run_cell(cell).success
    compiles = []

    def on_duration(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiles.append(kwargs.get("fun_name"))

    import jax.monitoring

    from jaxmagic._jax import runtime

    jax.monitoring.register_event_duration_secs_listener(on_duration)
    try:
        assert shell.run_cell(cell).success
    finally:
        runtime.unregister_duration_listener(on_duration)
    assert compiles == []


# -- 7. other sys.monitoring tools keep what they switched off ----------------------------------


def test_no_magic_restarts_other_tools_events(shell, monkeypatch):
    # sys.monitoring.restart_events() switches back on, for every tool, the events each one had
    # switched off with DISABLE (a coverage tool's lines already counted, a debugger's call sites).
    restarts = []
    monkeypatch.setattr(sys.monitoring, "restart_events", lambda: restarts.append(1))
    for cell in (
        "%%jax_doctor\njax.jit(f_rel_ok)(x_rel)",
        "%%jax_transfers\njax.jit(f_rel_ok)(1.0)",
        "%%jax_keys\njax.jit(f_rel_ok)(x_rel)",
        "%%jax_profile\njax.jit(f_rel_ok)(x_rel)",
    ):
        assert shell.run_cell(cell).success
    assert restarts == []


# -- 9. no frame of ours in what the user sees ----------------------------------------------------


def _frames_text(error: BaseException) -> str:
    """The files of the frames IPython shows for ``error`` and its causes (frames marked hidden left out)."""
    files, pending = [], [error]
    while pending:
        current = pending.pop()
        if current is None:
            continue
        for frame, _line in traceback.walk_tb(current.__traceback__):
            if not frame.f_locals.get("__tracebackhide__"):
                files.append(frame.f_code.co_filename)
        pending += [current.__cause__, None if current.__suppress_context__ else current.__context__]
    return "\n".join(files)


def test_key_reuse_error_shows_no_jaxmagic_frame(shell, capsys):
    _shown(capsys)
    cell = "k_rel = jax.random.key(0)\njax.random.normal(k_rel)\njax.random.normal(k_rel)"
    result = shell.run_cell("%%jax_keys\n" + cell)
    shown = _shown(capsys)
    assert type(result.error_in_exec).__name__ == "KeyReuseError"
    assert "jaxmagic" not in _frames_text(result.error_in_exec)
    assert "jaxmagic/" not in shown.split("Traceback", 1)[1]


def test_exceeded_compile_budget_shows_no_jaxmagic_frame(shell, capsys):
    _shown(capsys)
    result = shell.run_cell("%%jax_compiles --budget 0\njax.jit(lambda v: v - 1)(x_rel)")
    shown = _shown(capsys)
    assert type(result.error_in_exec).__name__ == "CompileBudgetExceeded"
    assert "probes/compiles" not in shown and "jaxmagic/" not in _frames_text(result.error_in_exec)


def test_system_exit_is_shown_once(shell, capsys):
    _shown(capsys)
    result = shell.run_cell("%%jax_nans\nraise SystemExit(3)")
    assert isinstance(result.error_in_exec, SystemExit)
    assert _shown(capsys).count("An exception has occurred") == 1  # IPython's display of it, once


# -- 5. other threads ----------------------------------------------------------------------------


class _BackgroundJaxWork:
    """A thread calling jitted functions (new ones: they compile and take host data) until stopped."""

    def __init__(self):
        import jax
        import numpy as np

        self.stop = threading.Event()
        self.saw_key_reuse_on = 0
        self.errors: list[BaseException] = []
        self.rounds = 0

        def work():
            while not self.stop.is_set():
                try:
                    scale = float(self.rounds % 7)

                    def background_step(v, scale=scale):
                        jax.debug.print("background {v}", v=v.sum())
                        return v * scale

                    jax.jit(background_step)(np.ones(3, np.float32))
                    if jax.config.jax_debug_key_reuse:
                        self.saw_key_reuse_on += 1
                except BaseException as error:
                    self.errors.append(error)
                self.rounds += 1
                time.sleep(0.002)

        self.thread = threading.Thread(target=work, daemon=True)

    def __enter__(self):
        self.thread.start()
        while self.rounds < 2:
            time.sleep(0.01)
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(timeout=60)


CELL_WORK = "for _i in range(5):\n    jax.jit(f_rel_ok)(x_rel)\n    time.sleep(0.02)\n"


def test_compiles_lists_only_the_cells_compilations(shell):
    shell.run_cell("import time\ndef cell_only_step(v):\n    return v - 2")
    with _BackgroundJaxWork() as background:
        assert shell.run_cell("%%jax_compiles -o rel_comp\njax.jit(cell_only_step)(x_rel)\ntime.sleep(0.2)").success
    report = shell.user_ns["rel_comp"]
    assert [f.name for f in report.functions if f.kind == "user"] == ["cell_only_step"]
    assert report.other_thread_compilations > 0 and "Other threads compiled" in str(report.document())
    assert not background.errors


def test_transfers_are_blamed_on_the_cells_own_lines_only(shell):
    cell = "%%jax_transfers -o rel_tr\nfor _i in range(10):\n    jax.jit(f_rel_ok)(1.0)\n    time.sleep(0.03)"
    with _BackgroundJaxWork() as background:
        assert shell.run_cell(cell).success
    transfers = shell.user_ns["rel_tr"].transfers
    assert transfers and sum(t.count for t in transfers) >= 10
    assert not [t for t in transfers if t.line is None or t.line.filename == __file__]  # the thread's code
    assert not background.errors


def test_print_leaves_other_threads_prints_to_them(shell):
    with _BackgroundJaxWork() as background:
        cell = "%%jax_print -o rel_pr\njax.debug.print('cell {x}', x=x_rel.sum())\ntime.sleep(0.3)"
        assert shell.run_cell(cell).success
    report = shell.user_ns["rel_pr"]
    assert report.texts == ["cell 3.0"]
    assert not background.errors


def test_doctor_leaves_another_threads_key_reuse_checker_off(shell):
    with _BackgroundJaxWork() as background:
        for _round in range(10):
            assert shell.run_cell("%%jax_doctor\n" + CELL_WORK).success
    assert background.saw_key_reuse_on == 0 and not background.errors


# -- 8. bad input: one clear UsageError sentence ------------------------------------------------

BAD_LINES = [
    '%jax_check f_rel_ok(x_rel) --errors "nan',  # unbalanced quote (shlex)
    "%%jax_nans --infs 'x\n1",
    "%jax_check f_rel_ok(*3)",
    "%jax_check f_rel_ok(**3)",
    "%jax_check f_rel_ok(" + "(" * 300 + "x_rel" + ")" * 300 + ")",
    "%jax_bisect f_rel_ok(x_rel) --ref \"'a string'\"",
    "%jax_check rel_generator(x_rel)",
    "%jax_live --profile /",
    "%jax_live --profile /no/such/folder/p.prof",
    "%jax_live --profile /tmp/" + "p" * 300,
    "%jax_stages f_rel_ok(x_rel) --runs 10**30",
    "%jax_devices 2147483648",
    "%jax_hlo x_rel + 1",
    "%jax_check f_rel_ok(" + "y" * 12000 + ")",
    "%jax_stages f_rel_ok(x_rel) -o 'not a name'",
]


@pytest.mark.parametrize("line", BAD_LINES, ids=lambda line: line[:40])
def test_bad_input_is_one_short_usage_error(shell, line):
    shell.run_cell("def rel_generator(v):\n    yield v")
    before = take_snapshot()
    result = shell.run_cell(line)
    error = result.error_in_exec
    assert isinstance(error, UsageError), f"{type(error).__name__}: {error}"
    message = str(error)
    assert "\n" not in message and len(message) < 300, message
    assert before.differences(take_snapshot()) == []


def test_hlo_names_globals_whose_attributes_raise(shell):
    shell.run_cell(
        "class RelWeird:\n    def __getattr__(self, name):\n        raise RuntimeError('no attributes')\n"
        "    @property\n    def shape(self):\n        raise RuntimeError('no shape')\nrel_weird = RelWeird()"
    )
    assert shell.run_cell("%jax_hlo f_rel_ok(x_rel)").success


def test_hlo_expression_that_is_not_a_call_is_named_whole(shell):
    result = shell.run_cell("%jax_hlo x_rel + 1")
    assert "'x_rel + 1' is not a call" in str(result.error_in_exec)


def test_a_report_that_cannot_be_laid_out_is_shown_as_saying_so():
    """A bug in a report's layout must not replace the user's exception (raised after the report)."""
    from jaxmagic.ipython.show_report import _document_of

    class Broken:
        kind = "jax_nans"
        summary = "NaN produced by `div`."

        def document(self):
            raise TypeError("'in <string>' requires string as left operand, not NoneType")

    document = _document_of(Broken())
    assert document.headline == "NaN produced by `div`." and document.status.value == "error"
    assert "could not lay out this report (TypeError" in document.sections[0].blocks[0].text
