"""The tracer-error explainer as IPython's custom exception handler: on by default, out of the way."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap

import pytest

from jaxmagic.ipython import explainer_hook

CLIP = """
def clip_positive(x, limit):
    if x > limit:
        return limit
    return x
"""


@contextlib.contextmanager
def captured(shell):
    """What the cell shows: the displayed bundles and the traceback IPython renders (as text)."""
    shown = {"displays": [], "tracebacks": []}
    publisher = shell.display_pub

    def publish(data, metadata=None, **kwargs):
        shown["displays"].append(data)

    def show(etype, evalue, stb):
        shown["tracebacks"].append(shell.InteractiveTB.stb2text(stb))

    original_publish, original_show = publisher.publish, shell._showtraceback
    publisher.publish, shell._showtraceback = publish, show
    try:
        yield shown
    finally:
        publisher.publish, shell._showtraceback = original_publish, original_show


def explanations(shown) -> list[str]:
    return [d["text/plain"] for d in shown["displays"] if d.get("text/plain", "").startswith("%jax_explain")]


@pytest.fixture
def shell(ip):
    ip.run_cell("import jax, jax.numpy as jnp")
    ip.run_cell(CLIP)
    explainer_hook.install(ip)
    yield ip
    explainer_hook.install(ip)  # leave it as the extension does


def test_on_by_default_after_load_ext(ip):
    assert explainer_hook.is_on(ip)
    assert ip.custom_exceptions == (Exception,)


def test_tracer_error_is_explained_above_the_normal_traceback(shell):
    with captured(shell) as shown:
        result = shell.run_cell("jax.jit(clip_positive)(jnp.float32(3.0), 1.0)")
    assert type(result.error_in_exec).__name__ == "TracerBoolConversionError"
    [text] = explanations(shown)
    assert "`x` and `limit`" in text and "jnp.where" in text and "if x > limit:" in text
    [traceback_text] = shown["tracebacks"]
    assert "TracerBoolConversionError" in traceback_text
    assert sys.last_value is result.error_in_exec  # %debug and %tb still find it


@pytest.mark.parametrize(
    "cell",
    [
        "raise ValueError('plain')",
        "{}['missing']",
        "1 / 0",
        "jnp.ones(3) + jnp.ones(4)",  # a TypeError from JAX that is no tracer error
        "from IPython.core.error import UsageError\nraise UsageError('usage')",
    ],
)
def test_other_errors_are_shown_exactly_as_without_the_explainer(shell, cell):
    with captured(shell) as with_explainer:
        shell.run_cell(cell)
    explainer_hook.uninstall(shell)
    with captured(shell) as without:
        shell.run_cell(cell)
    assert explanations(with_explainer) == []
    assert with_explainer == without


@pytest.mark.parametrize("cell", ["x = = 1", "x = (1,\n", "def f():\nreturn 1"])
def test_cells_that_do_not_parse_are_shown_as_without_the_explainer(shell, cell):
    # With the explainer on, IPython hands parse errors to CustomTB too.
    with captured(shell) as with_explainer:
        result = shell.run_cell(cell)
    explainer_hook.uninstall(shell)
    with captured(shell) as without:
        shell.run_cell(cell)
    assert result.error_before_exec is not None
    assert with_explainer == without and "Traceback (most recent call last)" not in without["tracebacks"][0]


def test_off_restores_the_previous_handler_and_on_chains_it(shell):
    explainer_hook.uninstall(shell)
    seen = []

    def previous(self, etype, value, tb, tb_offset=None):
        seen.append(etype.__name__)
        return []

    shell.set_custom_exc((KeyError,), previous)
    previous_handler = shell.CustomTB
    try:
        shell.run_line_magic("jax_explain", "on")
        assert shell.custom_exceptions == (Exception,)
        with captured(shell):
            shell.run_cell("{}['missing']")  # the previous handler's exception: still its job
            shell.run_cell("jax.jit(clip_positive)(jnp.float32(3.0), 1.0)")
        assert seen == ["KeyError"]
        shell.run_line_magic("jax_explain", "off")
        assert shell.custom_exceptions == (KeyError,) and shell.CustomTB is previous_handler
    finally:
        shell.set_custom_exc((), None)


def test_unload_ext_removes_the_handler(shell):
    assert explainer_hook.is_on(shell)
    shell.run_line_magic("unload_ext", "jaxmagic")
    try:
        assert not explainer_hook.is_on(shell) and shell.custom_exceptions == ()
    finally:
        shell.run_line_magic("load_ext", "jaxmagic")
    assert explainer_hook.is_on(shell)


def test_a_handler_installed_after_ours_is_left_alone(shell):
    shell.set_custom_exc((KeyError,), lambda self, *a, **k: [])
    theirs = shell.CustomTB
    try:
        assert not explainer_hook.uninstall(shell)
        assert shell.CustomTB is theirs
    finally:
        shell.set_custom_exc((), None)


def test_error_re_raised_by_a_cell_magic_is_still_explained(shell):
    # %%jax_nans swaps CustomTB while its body runs and re-raises the body's error
    # from its own cell: the explainer sees that second raise.
    with captured(shell) as shown:
        result = shell.run_cell("%%jax_nans -o nans_rep\njax.jit(clip_positive)(jnp.float32(3.0), 1.0)")
    assert type(result.error_in_exec).__name__ == "TracerBoolConversionError"
    assert shell.user_ns["nans_rep"].other_error.startswith("TracerBoolConversionError")
    [text] = explanations(shown)
    assert "clip_positive" in text
    assert explainer_hook.is_on(shell)  # the magic put our handler back


def test_a_leak_explained_by_jax_leaks_is_not_explained_twice(shell):
    shell.run_cell("leaked_hook = []\ndef leaky_hook(x):\n    leaked_hook.append(x)\n    return x")
    with captured(shell) as shown:
        shell.run_cell("%%jax_leaks -o leak_rep\njax.jit(leaky_hook)(1.0)")
    plain = [d["text/plain"] for d in shown["displays"] if "text/plain" in d]
    assert sum(text.startswith("%%jax_leaks") for text in plain) == 1
    assert explanations(shown) == []
    shell.run_cell("leaked_hook.clear()")


def test_leak_check_error_without_the_magic_is_explained_with_names(shell):
    shell.run_cell("stash = {}\ndef keep(x):\n    stash['last'] = x\n    return x")
    with captured(shell) as shown:
        shell.run_cell("with jax.checking_leaks():\n    jax.jit(keep)(jnp.ones(2))")
    texts = [d["text/plain"] for d in shown["displays"] if d.get("text/plain", "").startswith("%%jax_leaks")]
    assert len(texts) == 1 and "stash['last']" in texts[0]
    shell.run_cell("stash.clear()")


def test_explain_last_and_named_exception(shell):
    shell.run_cell("try:\n    jax.jit(lambda n: jnp.zeros(n))(3)\nexcept TypeError as err:\n    shape_error = err")
    shell.run_line_magic("jax_explain", "shape_error -o shape_rep")
    report = shell.user_ns["shape_rep"]
    assert report.error_kind == "shape" and report.depends_on == ["n"]
    result = shell.run_cell("%jax_explain 42")
    assert "UsageError" in type(result.error_in_exec).__name__


INSTALL_WITHOUT_JAX = textwrap.dedent("""
    import sys
    from IPython.testing.globalipapp import start_ipython
    ip = start_ipython()
    ip.run_line_magic("load_ext", "jaxmagic")
    print("jax imported:", "jax" in sys.modules, "| explainer:", ip.custom_exceptions)
""")


def test_installing_the_explainer_imports_no_jax():
    proc = subprocess.run([sys.executable, "-c", INSTALL_WITHOUT_JAX], capture_output=True, text=True, timeout=300)
    assert "jax imported: False | explainer: (<class 'Exception'>,)" in proc.stdout, proc.stdout + proc.stderr


# -- issue 23: tracer errors in disguise, and -o on every error --------------------------------

ENCODER = """
class Encoder:
    def __init__(self):
        self.cache = None

    def __call__(self, x):
        h = jnp.tanh(x)
        self.cache = h
        return h.sum()

enc = Encoder()
jax.jit(enc)(jnp.ones(3))
"""


def test_a_tracer_kept_on_an_attribute_reaching_device_put_is_explained_as_a_leak(shell):
    shell.run_cell(ENCODER)
    with captured(shell) as shown:
        result = shell.run_cell("jax.device_put(enc.cache)")
    assert "is not a valid JAX type" in str(result.error_in_exec)
    [text] = explanations(shown)
    assert "a tracer used after its trace ended" in text and "enc.cache" in text
    assert "self.cache = h" in text and "h = jnp.tanh(x)" in text
    [traceback_text] = shown["tracebacks"]  # the user's traceback still follows, unchanged
    assert "is not a valid JAX type" in traceback_text
    shell.run_line_magic("jax_explain", "-o leak_rep")
    data = shell.user_ns["leak_rep"].to_dict()
    assert data["error_kind"] == "leak" and data["held_by"] == ["enc.cache"]
    assert data["stored_at"]["code"] == "self.cache = h"
    assert data["provenance"]["function"] == "Encoder.__call__"
    shell.run_cell("del enc")


def test_explain_o_works_on_an_error_it_cannot_explain(shell):
    shell.run_cell("try:\n    int('x')\nexcept ValueError as err:\n    plain_error = err")
    result = shell.run_cell("%jax_explain plain_error -o plain_rep")
    assert result.error_in_exec is None
    report = shell.user_ns["plain_rep"]
    assert report.to_dict()["error_type"] == "ValueError" and report.status.value == "error"
    assert "not a tracer error" in report.reason


def test_a_static_argnames_fix_is_tried_in_a_notebook_cell(shell):
    # IPython keeps JAX's frames (tracebackhide): the jitted call's arguments are there to try the fix.
    shell.run_cell("def count_up(n):\n    return jnp.arange(n)")
    shell.run_cell("try:\n    jax.jit(count_up)(3)\nexcept Exception as err:\n    count_error = err")
    shell.run_line_magic("jax_explain", "count_error -o count_rep")
    fix = shell.user_ns["count_rep"].fixes[0]
    assert fix.use == "jax.jit(count_up, static_argnames=('n',))" and fix.checked.startswith("checked: tracing")
