"""Screenshot the %jax_sharding / %jax_devices reports, like tools/screenshot_reports.py.

Runs the magics on 64 fake CPU devices (``%jax_devices 64`` as the first magic
of a fresh in-process IPython shell), renders each report's static HTML and
photographs it with headless Chromium:

* ``docs/img/<name>.png`` for each report below;
* ``build/screenshots/sharding.html`` / ``sharding.png``: all of them on one page.

Usage: ``.venv/bin/python tools/screenshot_sharding.py [--chromium PATH] [--scale 2]``.
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
    (None, "%jax_devices 64"),
    (None, """\
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec as P
mesh = jax.make_mesh((2, 2), ("data", "model"), devices=jax.devices()[:4])
A = jnp.arange(32.0).reshape(8, 4)
x = jax.device_put(A, NamedSharding(mesh, P("data", "model")))
c = jax.device_put(A, NamedSharding(mesh, P(None, "model")))
mesh64 = jax.make_mesh((8, 8), ("x", "y"))
big = jax.device_put(jnp.zeros((64, 64)), NamedSharding(mesh64, P("x", "y")))
mesh3 = jax.make_mesh((2, 2, 2), ("a", "b", "c"), devices=jax.devices()[:8])
t3 = jax.device_put(jnp.zeros((4, 6, 8)), NamedSharding(mesh3, P("a", None, ("b", "c"))))
mesh4 = jax.make_mesh((4,), ("d",), devices=jax.devices()[:4])
xs = jax.device_put(jnp.arange(16.0), NamedSharding(mesh4, P("d")))
bad_sum = jax.jit(jax.shard_map(lambda b: b.sum(), mesh=mesh4, in_specs=P("d"), out_specs=P(), check_vma=False))

@jax.jit
def f(a):
    b = jnp.sin(a) * 2
    return b.sum(axis=1)
x2 = jax.device_put(jnp.arange(16.0).reshape(8, 2), NamedSharding(mesh4, P("d")))
"""),
    ("jax_sharding_2d", "%jax_sharding x -o jax_sharding_2d"),
    ("jax_sharding_partial", "%jax_sharding c -o jax_sharding_partial"),
    ("jax_sharding_64", "%jax_sharding big -o jax_sharding_64"),
    ("jax_sharding_3d", "%jax_sharding t3 -o jax_sharding_3d"),
    ("jax_sharding_replica_trap", "%jax_sharding bad_sum(xs) -o jax_sharding_replica_trap"),
    ("jax_sharding_call", "%jax_sharding f(x2) --intermediates -o jax_sharding_call"),
    ("jax_sharding_pytree", "%jax_sharding {'w': x, 'b': xs, 'step': 3} -o jax_sharding_pytree"),
    (None, """\
def local_sum(block):
    jax.debug.print("local block {b}", b=block)
    return block.sum()
"""),
    ("jax_per_device", """\
%%jax_per_device -o jax_per_device
jax.jit(jax.shard_map(local_sum, mesh=mesh4, in_specs=P("d"), out_specs=P(), check_vma=False))(xs)
"""),
    ("jax_devices", "%jax_devices -o jax_devices"),
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
    combined = BUILD_DIR / "sharding.html"
    combined.write_text(page("jaxmagic sharding reports", "".join(sections)), encoding="utf-8")
    width, height = screenshot(browser, combined, BUILD_DIR / "sharding.png", 1.0)
    print(f"{combined.relative_to(ROOT)} -> sharding.png  {width}x{height} CSS px")
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(main(sys.argv[1:]))
