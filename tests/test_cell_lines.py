"""A cell magic's lines are numbered as the user sees the cell (issue 45, part 5).

IPython hands a cell magic only the lines below ``%%jax_nans``; run as they are, line 1 of the
body would be the editor's line 2, and "In [4]:9" would point one line above the one meant.
"""

from __future__ import annotations

import traceback


def _line_of(report, function: str) -> int:
    return next(frame["lineno"] for frame in report.to_dict()["call_path"] if frame["function"] == function)


def test_a_cell_magic_reports_the_editors_line_number(ip):
    ip.run_cell(
        "%%jax_nans -o cell_lines_report\n"  # line 1
        "@jax.jit\n"  # line 2
        "def cell_lines_f(x):\n"  # line 3
        "    y = x + 1\n"  # line 4
        "    return jnp.log(y - 3)\n"  # line 5
        "cell_lines_f(jnp.ones(3))\n"  # line 6
    )
    report = ip.user_ns["cell_lines_report"]
    assert _line_of(report, "cell_lines_f") == 5
    assert report.to_dict()["producer"]["line"]["lineno"] == 5
    assert _line_of(report, "<module>") == 6


def test_the_raised_error_names_the_same_line(ip):
    result = ip.run_cell("%%jax_nans -o cell_lines_report2\nx = 1\nraise ValueError('on line 3')\n")
    error = result.error_in_exec
    assert isinstance(error, ValueError)
    assert traceback.extract_tb(error.__traceback__)[-1].lineno == 3


def test_a_magic_cell_inside_a_magic_cell_keeps_working(ip):
    # a body that is itself a cell magic must stay on its first line to be one
    result = ip.run_cell(
        "%%jax_nans -o cell_lines_outer\n%%jax_nans -o cell_lines_inner\nnested_value = jnp.log(2.0)\n"
    )
    assert result.error_in_exec is None, result.error_in_exec
    assert "cell_lines_inner" in ip.user_ns and float(ip.user_ns["nested_value"]) > 0


def test_a_syntax_error_is_shown_at_the_editors_line(ip, capsys):
    ip.run_cell("%%jax_nans\nx = 1\ny = (\n")
    shown = capsys.readouterr()
    text = shown.out + shown.err
    assert "line 3" in text, text


def test_a_magic_line_is_shown_as_typed_not_as_ipythons_rewrite(ip):
    ip.run_cell(
        "import sys\nfrom jaxmagic.usercode.source import line_of\n%time typed_x = 1\n"
        "typed_line = line_of(sys._getframe(), 3).code\n"
    )
    assert ip.user_ns["typed_line"] == "%time typed_x = 1"


def test_as_typed_puts_back_magics_and_shell_escapes():
    from jaxmagic.usercode.source import as_typed

    assert as_typed("get_ipython().run_line_magic('jax_bisect', 'f(x)')") == "%jax_bisect f(x)"
    assert as_typed("r = get_ipython().run_line_magic('time', \"x = 'a'\")") == "r = %time x = 'a'"
    assert as_typed("get_ipython().system('ls -l')") == "!ls -l"
    assert as_typed("y = f(get_ipython)") == "y = f(get_ipython)"


def test_a_quoted_part_of_a_line_is_a_whole_expression_or_nothing():
    from jaxmagic.usercode.source import whole_expression

    line = "log_jit = jax.jit(lambda x: jnp.log(x))"
    assert whole_expression(line, 28, 38) == "jnp.log(x)"
    # columns JAX recorded wrong inside a lambda in a kernel's cell: the call of `log` on the line instead
    assert whole_expression(line, 11, 21, called="log") == "jnp.log(x)"
    assert whole_expression(line, 11, 21) == ""
    # `g(x) * w` out of `h = jnp.log(x) * w` parses, but is no expression of that line
    assert whole_expression("    h = jnp.log(x) * w", 14, 22) == ""
    assert whole_expression("    if jnp.log(x) > 0:", 7, 17) == "jnp.log(x)"


def test_a_tracers_type_is_read_whole():
    from jaxmagic.probes._leaks.tracers.text import tracer_aval

    assert tracer_aval("aval=f32[16,32], batched=f32[4,16,32]") == "f32[16,32] (batched f32[4,16,32])"
    assert tracer_aval("primal=2.0, typeof(tangent)=f32[3,4]") == "f32[3,4]"


def test_a_cells_result_is_shown_after_its_report(ip, capsys):
    """Issue 45, part 6: the body's ``Out[...]`` came above the report; a cell's result comes last."""
    capsys.readouterr()
    ip.run_cell("%%jax_nans\nresult_after_report = 40\nresult_after_report + 2")
    shown = capsys.readouterr().out
    assert "%%jax_nans [OK]" in shown and ": 42" in shown
    assert shown.index("%%jax_nans [OK]") < shown.index(": 42")
    assert ip.user_ns["_"] == 42
