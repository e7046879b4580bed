"""No report blames jaxmagic: every cell magic, run after a %%jax_doctor and after a %%jax_leaks cell.

Both run the user's code under settings of jaxmagic's own that are part of
JAX's cache keys (the key-reuse checker, a fresh-trace context). A function
traced there and traced again in the next cell misses the cache, and JAX's
explanation of that miss names jaxmagic's settings; the next report must name
the user's causes instead, and never a frame of jaxmagic or IPython.
"""

from __future__ import annotations

import pytest

from jaxmagic.ipython.magics import JaxMagics

FORBIDDEN = (
    "jax_debug_key_reuse",
    "user_context",
    "jaxmagic-",  # a retrace token
    "run_cell_magic",
    "<module>",
    "jaxmagic/",  # a frame of jaxmagic's own files
    "jaxmagic\\",
)


def cell_magics() -> list[str]:
    return sorted(JaxMagics.magics["cell"])


def causes_of(report) -> list[str]:
    """The headline and every cause-like text of a report."""
    texts = [report.summary]
    for compilation in getattr(report, "compilations", []):
        texts += [compilation.why, *compilation.changes]
    for function in getattr(report, "functions", []):
        texts.append(function.reason)
    for finding in getattr(report, "findings", []):
        texts += [finding.title, getattr(finding, "evidence", "") or ""]
    return texts


@pytest.fixture(scope="module")
def shell(ip):
    ip.run_cell(
        "def after_step(x):\n"
        "    return jnp.sum(jnp.sin(x) * 2)\n"
        "after_jstep = jax.jit(after_step)\n"
        "after_jstep(jnp.ones(2))\n"
    )
    return ip


@pytest.mark.parametrize("before", ["jax_doctor", "jax_leaks"])
@pytest.mark.parametrize("magic", cell_magics())
def test_next_report_blames_no_setting_or_frame_of_jaxmagic(shell, before, magic):
    # shapes of this test's own, so that no earlier test compiled them outside jaxmagic's settings
    a, b, c = (10 * (cell_magics().index(magic) + 1) + 100 * (before == "jax_leaks") + i for i in range(3))
    first = shell.run_cell(
        f"%%{before} -o before_report\nfor n in ({a}, {b}):\n    after_y = after_jstep(jnp.ones(n))\n"
    )
    assert first.error_in_exec is None
    shell.user_ns.pop("after_report", None)
    result = shell.run_cell(
        f"%%{magic} -o after_report\nafter_raw = jax.random.PRNGKey(0)\nfor n in ({a}, {b}, {c}):\n"
        "    after_y = after_jstep(jnp.ones(n))\n"
        "    after_draw = jax.random.normal(after_raw, (2,))  # a legacy key never advanced: a finding with a line\n"
    )
    assert result.error_in_exec is None, result.error_in_exec
    report = shell.user_ns["after_report"]
    for text in causes_of(report):
        for word in FORBIDDEN:
            assert word not in text, f"%%{magic} after %%{before}: {word!r} in {text!r}"
    if magic == "jax_compiles":
        step = report.function("after_step")
        # a and b compiled under jaxmagic's settings before, never by the user: the first compilation here is
        # jaxmagic's doing (told as such, in words, not as a setting to change), then new shapes
        assert step.causes == {"jaxmagic": 1, "types": 2}, step.causes
        assert "context" not in step.causes
