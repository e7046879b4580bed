"""Screenshot the %%jax_compiles / %jax_stages / %%jax_transfers reports, like tools/screenshot_reports.py.

Runs the magics on small programs with the chapter's compilation and transfer
problems in an in-process IPython shell, renders each report's static HTML and
photographs it with headless Chromium:

* ``docs/img/<name>.png`` for each report below;
* ``build/screenshots/compiles.html`` / ``compiles.png``: all of them on one page.

Usage: ``.venv/bin/python tools/screenshot_compiles.py [--chromium PATH] [--scale 2] [--only NAMES]``.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import io
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from screenshot_reports import BUILD_DIR, IMG_DIR, find_chromium, page, screenshot  # noqa: E402

CELLS: list[tuple[str | None, str]] = [
    (None, """\
import jax, jax.numpy as jnp, numpy as np
from functools import partial

def loss(params, x, y):
    logits = jnp.tanh(x @ params["w"] + params["b"])
    return jnp.mean((logits - y) ** 2)

def make_train_step(loss_fn):
    @partial(jax.jit, static_argnames=("step",))
    def train_step(params, x, y, step):
        lr = 0.5 * 0.98 ** step                        # learning rate decays with the step
        grads = jax.grad(loss_fn)(params, x, y)
        return jax.tree.map(lambda p, g: p - lr * g, params, grads)
    return train_step

train_step = make_train_step(loss)
params = {"w": jnp.zeros((16, 4)), "b": jnp.zeros(4)}
x, y = jnp.ones((32, 16)), jnp.ones((32, 4))

@jax.jit
def scale(w, x):
    return w * x
"""),
    ("jax_compiles_static", """\
%%jax_compiles -o jax_compiles_static
p = params
for step in range(6):
    p = train_step(p, x, y, step)
"""),
    ("jax_compiles_causes", """\
%%jax_compiles --all -o jax_compiles_causes
w = jnp.ones(3)
scale(w, jnp.float32(2.0))
scale(w, 2.0)                          # Python float: weakly typed
scale(w.astype(jnp.int32), 2.0)        # dtype changed
for n in (4, 5):
    scale(jnp.ones(n), 2.0)            # shape changed
for _ in range(2):
    jax.jit(lambda v: v + 1)(w)        # a new function object each time
"""),
    (None, """\
def deep(ws, x):
    for w in ws:                       # a Python loop: unrolled, 40 layers to compile
        x = jnp.tanh(x @ w)
    return x.sum()

ws_deep = [jax.random.normal(k, (32, 32)) / 6.0 for k in jax.random.split(jax.random.key(5), 40)]
x_deep = jnp.ones((8, 32))
"""),
    ("jax_stages", "%jax_stages deep(ws_deep, x_deep) -o jax_stages\n"),
    (None, """\
f_tg = jax.jit(lambda x: x * 2)
x_dev = jnp.ones(3)
f_tg(x_dev)
def step_on(batch):
    return f_tg(batch)
"""),
    ("jax_transfers", """\
%%jax_transfers -o jax_transfers
for _ in range(10):
    f_tg(np.ones(3, np.float32))       # NumPy array: copied to the device each call
f_tg(1.0)                              # Python scalar
step_on(np.zeros(3, np.float32))
f_tg(jax.device_put(np.ones(3, np.float32)))   # explicit: allowed
"""),
]


def build_reports() -> dict[str, object]:
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jaxmagic")
    reports = {}
    for name, cell in CELLS:
        output = io.StringIO()
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            result = shell.run_cell(cell, store_history=True)
        if name is None:
            if not result.success:
                raise RuntimeError(f"setup cell failed:\n{cell}\n{output.getvalue()}")
            continue
        if name not in shell.user_ns:
            raise RuntimeError(f"the magic stored no report {name!r}:\n{output.getvalue()}")
        reports[name] = shell.user_ns[name]
    return reports


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chromium", help="the Chromium (or Chrome) executable")
    parser.add_argument("--scale", type=float, default=2.0, help="device pixels per CSS px (default 2)")
    parser.add_argument("--only", help="comma-separated report names to photograph (default: all)")
    args = parser.parse_args(argv)
    browser = find_chromium(args.chromium)

    from jaxmagic.render import static_bundle

    reports = build_reports()
    wanted = set(args.only.split(",")) if args.only else set(reports)
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    sections = []
    for name, report in reports.items():
        report_html = static_bundle(report)["text/html"]
        sections.append(f"<h2>{html.escape(name)}</h2>{report_html}")
        if name not in wanted:
            continue
        single = BUILD_DIR / f"{name}.html"
        single.write_text(page(name, report_html), encoding="utf-8")
        width, height = screenshot(browser, single, IMG_DIR / f"{name}.png", args.scale)
        print(f"docs/img/{name}.png  {width}x{height} CSS px  [{report.status.value}] {report.summary}")
    combined = BUILD_DIR / "compiles.html"
    combined.write_text(page("jaxmagic compilation reports", "".join(sections)), encoding="utf-8")
    width, height = screenshot(browser, combined, BUILD_DIR / "compiles.png", 1.0)
    print(f"{combined.relative_to(ROOT)} -> compiles.png  {width}x{height} CSS px")
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main(sys.argv[1:]))
