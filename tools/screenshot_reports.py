"""Screenshot jaxmagic's HTML reports for the documentation (docs/magics/) and for review by eye.

Runs real buggy JAX code through the magics in an in-process IPython shell
(the same path a notebook takes: ``%%jax_nans -o NAME``, ``%jax_check -o NAME``),
renders each report with ``jaxmagic.render.static_bundle(report.document())['text/html']``
- the static HTML a saved notebook keeps - and photographs it with headless
Chromium:

* ``docs/img/<name>.png``: one image per report, cropped to the report;
* ``build/screenshots/reports.html`` and ``reports.png``: all of them on one
  page, for reviewing the whole set at once.

Usage: ``.venv/bin/python tools/screenshot_reports.py [--chromium PATH] [--scale 2]``.
Needs Chromium (Debian: ``apt-get install chromium``); nothing else beyond the
project's environment. Each page is first loaded with ``--dump-dom`` to measure
the report, then screenshotted in a window at least that tall; the PNG is cut
to the measured height in plain Python, so no image library is needed.
"""

from __future__ import annotations

import argparse
import contextlib
import html
import io
import os
import re
import shutil
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMG_DIR = ROOT / "docs" / "img"
BUILD_DIR = ROOT / "build" / "screenshots"
PAGE_MARGIN = 12  # CSS px around a report in its own image
PAGE_WIDTH = 1004  # CSS px: the report's max-width (980) plus margins

# Cells run in order in one shell, like a notebook. A cell whose name is not
# None stores its report with -o under that name; it becomes docs/img/<name>.png.
CELLS: list[tuple[str | None, str]] = [
    (
        None,
        """\
import jax, jax.numpy as jnp
from jax.experimental import checkify
""",
    ),
    (
        None,
        """\
def reg_loss(p, x):
    return jnp.sum((x @ p["w"] + p["b"]) ** 2) + 1e-3 * jnp.linalg.norm(p["b"])  # b starts at 0

p_reg = {"w": jnp.ones((3, 2)), "b": jnp.zeros(2)}
x_reg = jnp.ones((4, 3))
""",
    ),
    (
        "jax_nans_backward",
        """\
%%jax_nans -o jax_nans_backward
grads = jax.grad(reg_loss)(p_reg, x_reg)
""",
    ),
    (
        None,
        """\
@jax.jit
def log_likelihood(w, x):
    z = x @ w
    return jnp.sum(jnp.log(z))  # z < 0 for some rows

w = jnp.array([1.0, -2.0])
x = jnp.array([[1.0, 0.0], [1.0, 1.0], [0.5, 2.0]])
""",
    ),
    (
        "jax_nans_forward",
        """\
%%jax_nans -o jax_nans_forward
ll = log_likelihood(w, x)
""",
    ),
    (
        "jax_nans_clean",
        """\
%%jax_nans -o jax_nans_clean
ll = log_likelihood(jnp.abs(w), x)
""",
    ),
    (
        None,
        """\
def risky(x, i):
    checkify.check(jnp.all(x > 0), "x must be positive, min = {m}", m=jnp.min(x))
    y = jnp.log(x)     # x <= 0 -> NaN
    z = x[i]           # i out of bounds -> JAX clamps it, no error
    w = 7 // i         # i == 0 -> integer division by zero
    return y.sum() + z + w

x_bad = jnp.array([-1.0, 2.0, 3.0])
x_ok = jnp.array([1.0, 2.0, 3.0])
risky_batch = jax.vmap(risky, in_axes=(None, 0))
idx = jnp.array([1, 5, 0])
""",
    ),
    ("jax_check", "%jax_check -o jax_check risky(x_bad, 5)\n"),
    ("jax_check_vmap", "%jax_check -o jax_check_vmap risky(x_ok, idx) --vmap None,0\n"),
]

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>{title}</title>
<style>
html,body{{margin:0;background:#fff}}
body{{padding:{margin}px;width:{inner}px}}
h2{{font:600 15px system-ui,sans-serif;color:#57606a;margin:24px 0 6px}}
</style></head>
<body>{body}
<script>
// Measured by --dump-dom: the size of everything in the body, in CSS px.
const r = document.body.getBoundingClientRect();
document.body.setAttribute("data-size", Math.ceil(r.width) + "x" + Math.ceil(r.height));
</script>
</body></html>
"""


def build_reports(cells, setup_may_fail: bool = False) -> dict[str, object]:
    """Run ``cells`` ((report name or None, cell) pairs); return the reports the magics stored, by name.

    A set-up cell (name None) must succeed unless ``setup_may_fail``: some
    reports explain the error a set-up cell raised.
    """
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "jaxmagic")
    reports = {}
    for name, cell in cells:
        output = io.StringIO()
        with contextlib.redirect_stdout(output), contextlib.redirect_stderr(output):
            result = shell.run_cell(cell, store_history=True)
        if name is None:
            if not result.success and not setup_may_fail:
                raise RuntimeError(f"setup cell failed:\n{cell}\n{output.getvalue()}")
            continue
        if name not in shell.user_ns:
            raise RuntimeError(f"the magic stored no report {name!r}:\n{output.getvalue()}")
        reports[name] = shell.user_ns[name]
    return reports


def find_chromium(explicit: str | None) -> str:
    for candidate in [explicit, "chromium", "chromium-browser", "google-chrome", "chrome"]:
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    sys.exit("Chromium not found: apt-get install chromium (or pass --chromium PATH).")


def chromium(browser: str, *args: str) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory(prefix="jaxmagic-chromium-") as profile:
        command = [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            f"--user-data-dir={profile}",
            *args,
        ]
        return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


def measure(browser: str, page: Path) -> tuple[int, int]:
    done = chromium(browser, "--window-size=1400,4000", "--dump-dom", page.as_uri())
    match = re.search(r'data-size="(\d+)x(\d+)"', done.stdout)
    if not match:
        raise RuntimeError(f"could not measure {page}:\n{done.stderr[-2000:]}")
    return int(match.group(1)), int(match.group(2))


def screenshot(browser: str, page: Path, png: Path, scale: float) -> tuple[int, int]:
    width, height = measure(browser, page)
    png.parent.mkdir(parents=True, exist_ok=True)
    if png.exists():
        png.unlink()
    # Headless Chromium does not paint windows below a minimum height, so we
    # shoot a taller window and cut the image down to the measured height.
    window_height = max(height + 100, 600)
    done = chromium(
        browser,
        f"--window-size={width},{window_height}",
        f"--force-device-scale-factor={scale}",
        f"--screenshot={png}",
        page.as_uri(),
    )
    if not png.exists():
        raise RuntimeError(f"no screenshot of {page}:\n{done.stderr[-2000:]}")
    keep_png_rows(png, round(height * scale))
    return width, height


def keep_png_rows(png: Path, rows: int) -> None:
    """Cut a PNG down to its first ``rows`` rows, without an image library.

    PNG filters refer only to the rows above, so the first rows of the
    decompressed, still-filtered data are a valid image on their own.
    """
    data = png.read_bytes()
    signature, pos, chunks = data[:8], 8, []
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        chunks.append((data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]))
        pos += 12 + length
    ihdr = next(body for kind, body in chunks if kind == b"IHDR")
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", ihdr)
    if rows >= height:
        return
    if depth != 8 or interlace or colour not in (2, 6):
        raise RuntimeError(f"{png}: unexpected PNG format (depth {depth}, colour {colour}, interlace {interlace})")
    stride = 1 + width * (3 if colour == 2 else 4)
    pixels = zlib.decompress(b"".join(body for kind, body in chunks if kind == b"IDAT"))[: rows * stride]
    new_ihdr = struct.pack(">II", width, rows) + ihdr[8:]

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    png.write_bytes(
        signature + chunk(b"IHDR", new_ihdr) + chunk(b"IDAT", zlib.compress(pixels, 9)) + chunk(b"IEND", b"")
    )


def page(title: str, body: str) -> str:
    return PAGE.format(title=html.escape(title), body=body, margin=PAGE_MARGIN, inner=PAGE_WIDTH - 2 * PAGE_MARGIN)


def photograph(
    cells, name: str, title: str, argv: list[str], description: str = "", setup_may_fail: bool = False
) -> int:
    """Build the reports of ``cells``, save one PNG per report in docs/img and a combined page."""
    parser = argparse.ArgumentParser(description=(description or __doc__).splitlines()[0])
    parser.add_argument("--chromium", help="the Chromium (or Chrome) executable")
    parser.add_argument("--scale", type=float, default=2.0, help="device pixels per CSS px (default 2, sharp on HiDPI)")
    parser.add_argument("--only", help="comma-separated report names to photograph (default: all)")
    args = parser.parse_args(argv)
    browser = find_chromium(args.chromium)

    from jaxmagic.render import static_bundle

    reports = build_reports(cells, setup_may_fail)
    wanted = set(args.only.split(",")) if args.only else set(reports)
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    sections = []
    for report_name, report in reports.items():
        report_html = static_bundle(report.document())["text/html"]
        sections.append(f"<h2>{html.escape(report_name)}</h2>{report_html}")
        if report_name not in wanted:
            continue
        single = BUILD_DIR / f"{report_name}.html"
        single.write_text(page(report_name, report_html), encoding="utf-8")
        width, height = screenshot(browser, single, IMG_DIR / f"{report_name}.png", args.scale)
        print(f"docs/img/{report_name}.png  {width}x{height} CSS px  [{report.status.value}] {report.summary}")

    combined = BUILD_DIR / f"{name}.html"
    combined.write_text(page(title, "".join(sections)), encoding="utf-8")
    width, height = screenshot(browser, combined, BUILD_DIR / f"{name}.png", 1.0)
    print(f"{combined.relative_to(ROOT)} -> {name}.png  {width}x{height} CSS px")
    return 0


if __name__ == "__main__":
    os.chdir(ROOT)
    sys.exit(photograph(CELLS, "reports", "jaxmagic reports", sys.argv[1:]))
