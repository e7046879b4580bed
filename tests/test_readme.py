"""The README's commands, as written: each one runs here, or says which test runs it (or why none can).

Issue 61: the README said "`make test-fast` is the two-minute lane" (five minutes), "`python -m build`
writes dist/..." with ``build`` in no extra, and its quickstart never said how to start a notebook. The
commands are read from the README's own code blocks, so a new one must be added to ``COMMANDS`` below -
run, or given the test that covers it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"

# Every shell command of the README -> "run" (this file runs it as written), or where it is checked and why not here.
COMMANDS = {
    "pip install .": "its isolated build fetches setuptools from the package index; tests/test_wheel.py builds "
    "the same wheel without isolation and installs it in a fresh environment",
    'pip install ".[demo]"': "installs JupyterLab and the demo libraries from the package index (.venv has them)",
    'pip install ".[parallel]"': "installs ipyparallel from the package index (.venv has it)",
    "make dist": "run",
    "pip install dist/jaxmagic-*.whl": "run",
    "make demo": "runs every demo notebook: CI's first step (.ci/run); tests/test_notebooks.py checks its copies",
    "make docs": "tests/test_docs.py builds the site with the same Sphinx command (DOCS_COMMAND)",
    "make test": "the whole suite: CI runs it (.ci/run)",
    "make test-floor": "the floor lane (Python 3.11 + JAX 0.10.2): CI runs it (.ci/run)",
}
# Commands named in the README's prose, with what checks them.
PROSE = {
    "jupyter lab": "tests/test_browser.py starts the same JupyterLab of this environment (lab_server)",
    "make test-fast": "its lane is the Makefile's; the README says how long the Makefile says it takes",
    "python -m http.server -d build/docs/html": "run",
}


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)\n```", README.read_text(), flags=re.S)


def shell_commands() -> list[str]:
    """Each command of the README's bash blocks, its comment left out."""
    return [
        line.split("  #")[0].strip()
        for block in code_blocks("bash")
        for line in block.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]


def test_every_command_of_the_readme_is_run_here_or_says_which_test_runs_it():
    commands = shell_commands()
    assert commands, "the README has no bash block"
    unknown = [command for command in commands if command not in COMMANDS]
    assert unknown == [], f"README commands this test neither runs nor accounts for: {unknown}"
    text = README.read_text()
    for command in PROSE:
        assert f"`{command}`" in text, f"the README no longer says `{command}`: update PROSE"


def test_the_readme_says_how_long_the_fast_lane_takes_as_the_makefile_does():
    makefile = (ROOT / "Makefile").read_text()
    minutes = re.search(r"lane to run while working \(about (\w+) minutes", makefile)
    assert minutes, "the Makefile no longer says how long test-fast takes"
    assert f"`make test-fast` is the lane to run while working (about {minutes.group(1)} minutes" in README.read_text()


def test_the_readme_says_how_to_start_a_notebook_and_what_the_docs_need_first():
    text = README.read_text()
    quickstart = text[text.index("<!-- quickstart:start -->") : text.index("<!-- quickstart:end -->")]
    assert "`jupyter lab`" in quickstart
    docs = text[text.index("## Documentation") :]
    assert docs.index("make demo") < docs.index("make docs"), "the notebook pages need make demo first"
    flat = " ".join(text.split())
    assert "`pip install build` first" in flat and "No module named build.__main__" in flat


def test_the_quickstart_cells_run_as_written_and_report_what_the_readme_says(ip):
    cells = code_blocks("python")
    assert len(cells) == 3
    ip.run_cell(cells[0]).raise_error()
    nans = ip.run_cell(cells[1])
    assert type(nans.error_in_exec).__name__ == "FloatingPointError"  # JAX's own error, after the report
    doctor = ip.run_cell(cells[2].replace("%%jax_doctor", "%%jax_doctor -o readme_doctor", 1))
    doctor.raise_error()
    from jaxmagic.render.text import render_text

    shown = code_blocks("text")[0]
    said = " ".join(render_text(ip.user_ns["readme_doctor"].document(), width=100).split())
    for part in re.split(r"\s*\[\.\.\.\]\s*", " ".join(shown.split())):
        assert part in said, f"the README's doctor report says {part!r}; the report: {said[:600]}"


@pytest.mark.slow
def test_make_dist_then_pip_install_of_the_wheel_as_written(tmp_path):
    """`make dist` in a copy of this checkout (its .venv linked in), then `pip install dist/jaxmagic-*.whl` into a
    fresh environment that sees .venv's packages (nothing downloaded), then the magics load there."""
    copy = tmp_path / "checkout"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()  # fmt: skip
    for name in files:
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    (copy / ".venv").symlink_to(ROOT / ".venv")
    (copy / "build").mkdir()  # as `pip install .` and `make docs` leave it: it must not get in the way
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    built = subprocess.run(["make", "dist"], cwd=copy, env=env, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    import jaxmagic

    assert (copy / "dist" / f"jaxmagic-{jaxmagic.__version__}-py3-none-any.whl").exists()
    venv = tmp_path / "fresh"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env['PATH']}"
    env["PIP_NO_INDEX"] = "1"  # nothing from the package index: the dependencies are .venv's
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    # .venv's packages as a plain directory (not its .pth files: the editable jaxmagic stays out)
    purelib = Path(sysconfig.get_paths()["purelib"])
    keep = tmp_path / "deps"
    keep.mkdir()
    for entry in purelib.iterdir():
        if not entry.name.startswith(("jaxmagic", "__editable__", "_jaxmagic")) and entry.suffix != ".pth":
            (keep / entry.name).symlink_to(entry)
    Path(site, "project_venv_packages.pth").write_text(f"{keep}\n")
    installed = subprocess.run("pip install dist/jaxmagic-*.whl", shell=True, cwd=copy, env=env,
                               capture_output=True, text=True, timeout=600)  # fmt: skip
    assert installed.returncode == 0, installed.stdout[-2000:] + installed.stderr[-2000:]
    loaded = subprocess.run([str(venv / "bin" / "python"), "-c", "import jaxmagic; print(jaxmagic.__file__)"],
                            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert loaded.returncode == 0 and loaded.stdout.strip().startswith(str(venv)), loaded.stdout + loaded.stderr


def test_the_served_site_command_serves_the_built_docs(tmp_path):
    """`python -m http.server -d build/docs/html` as the README writes it (on a free port, in a scratch folder)."""
    import socket
    import time
    import urllib.request

    site = tmp_path / "build" / "docs" / "html"
    site.mkdir(parents=True)
    (site / "index.html").write_text("<h1>jaxmagic</h1>")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = "python -m http.server -d build/docs/html".split()  # as PROSE has it
    assert " ".join(command) in PROSE
    server = subprocess.Popen([sys.executable, *command[1:], str(port), "--bind", "127.0.0.1"], cwd=tmp_path,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        for _ in range(100):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/index.html", timeout=2) as page:
                    assert b"jaxmagic" in page.read()
                    return
            except OSError:
                time.sleep(0.1)
        pytest.fail("python -m http.server did not serve the site")
    finally:
        server.terminate()
        server.wait(timeout=10)
