"""Screenshots of the tracer-error, leak, config and traceback reports (docs/img/).

Same approach as tools/screenshot_reports.py (whose helpers it uses): real
buggy code runs through the magics in an in-process IPython shell, each report's
static HTML is photographed with headless Chromium.

Usage: ``.venv/bin/python tools/screenshot_tracer_reports.py [--chromium PATH] [--scale 2]``.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import io
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from screenshot_reports import BUILD_DIR, IMG_DIR, ROOT, find_chromium, page, screenshot  # noqa: E402

CELLS: list[tuple[str | None, str]] = [
    (None, "import jax, jax.numpy as jnp\nfrom jax import lax"),
    (None, """\
def clip_positive(x, limit):
    if x > limit:
        return limit
    return x

try:
    jax.jit(clip_positive)(jnp.float32(3.0), 1.0)
except Exception as error:
    clip_error = error
"""),
    ("jax_explain", "%jax_explain clip_error -o jax_explain\n"),
    (None, """\
class Cache:
    pass

cache = Cache()
cache.store = {}

def remember(x):
    h = jnp.tanh(x)
    cache.store["h"] = h        # leaks the tracer h
    return h * 2
"""),
    ("jax_leaks", "%%jax_leaks -o jax_leaks\nout = jax.jit(remember)(jnp.ones(3))\n"),
    (None, """\
class Model:
    def __call__(self, x):
        h = jnp.tanh(x)
        self.last_hidden = h
        return h * 2

m_leak = Model()
out = jax.jit(m_leak)(jnp.ones(3))
"""),
    ("jax_leaks_unexpected", "%%jax_leaks -o jax_leaks_unexpected\ntotal = jnp.sum(m_leak.last_hidden)\n"),
    ("jax_config", """\
with jax.debug_nans(True), jax.log_compiles(True):
    %jax_config -o jax_config
"""),
    (None, """\
def inner_reshape(x):
    return x.reshape(3, 5)

outer_jit = jax.jit(lambda x: inner_reshape(x) * 2)
"""),
    (None, "outer_jit(jnp.ones(4))\n"),  # fails on purpose: the last exception
    ("jax_traceback", "%jax_traceback -o jax_traceback\n"),
]


def build_reports() -> dict[str, object]:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jaxmagic")
    reports = {}
    for name, cell in CELLS:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            shell.run_cell(cell, store_history=True)
        if name is not None:
            if name not in shell.user_ns:
                raise RuntimeError(f"no report {name!r} from:\n{cell}")
            reports[name] = shell.user_ns[name]
    return reports


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", help="the Chromium (or Chrome) executable")
    parser.add_argument("--scale", type=float, default=2.0)
    args = parser.parse_args(argv)
    browser = find_chromium(args.chromium)

    from jaxmagic.render import static_bundle

    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    sections = []
    for name, report in build_reports().items():
        report_html = static_bundle(report)["text/html"]
        sections.append(f"<h2>{html.escape(name)}</h2>{report_html}")
        single = BUILD_DIR / f"{name}.html"
        single.write_text(page(name, report_html), encoding="utf-8")
        width, height = screenshot(browser, single, IMG_DIR / f"{name}.png", args.scale)
        print(f"docs/img/{name}.png  {width}x{height} CSS px  [{report.status.value}] {report.summary}")
    combined = BUILD_DIR / "tracer_reports.html"
    combined.write_text(page("jaxmagic tracer reports", "".join(sections)), encoding="utf-8")
    width, height = screenshot(browser, combined, BUILD_DIR / "tracer_reports.png", 1.0)
    print(f"{combined.relative_to(ROOT)} -> tracer_reports.png  {width}x{height} CSS px")
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main(sys.argv[1:]))
