"""The release a user installs: the built wheel, not this checkout, loads and runs a magic.

``python -m build --no-isolation`` makes the sdist and, from it, the wheel with this environment's
setuptools (nothing is downloaded). The wheel is installed - not editable, ``--no-deps`` - into a fresh
virtual environment whose other packages are ``.venv``'s: a ``.pth`` line adds ``.venv``'s
site-packages as a plain directory, so ``.venv``'s own ``.pth`` files, the editable install's finder
among them, are not run. A file the wheel lacks then fails here: the installed package is compared
with the source tree, and ``%load_ext jaxmagic`` plus a ``%%jax_nans`` cell run in that environment.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import jaxmagic

ROOT = Path(__file__).resolve().parent.parent

# Runs in the fresh environment, from a directory without a jaxmagic in it.
SESSION = r"""
import importlib.metadata, json, pathlib, sys
from IPython.core.interactiveshell import InteractiveShell

import jaxmagic

shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "jaxmagic")
shell.run_cell("import jax, jax.numpy as jnp\n@jax.jit\ndef f(x):\n    return jnp.log(x)\n")
result = shell.run_cell("%%jax_nans -o rep\nf(jnp.float32(-1.0))")
report = shell.user_ns.get("rep")
print(json.dumps({
    "file": jaxmagic.__file__,
    "version": jaxmagic.__version__,
    "metadata_version": importlib.metadata.version("jaxmagic"),
    "magics": sorted(shell.magics_manager.registry["JaxMagics"].magics["cell"]),
    "error": type(result.error_in_exec).__name__,
    "summary": report.summary if report is not None else None,
    "text": str(report) if report is not None else None,
}))
"""


@pytest.fixture(scope="module")
def dist(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"python -m build failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return out


def test_build_makes_a_wheel_and_an_sdist_of_the_version(dist):
    version = jaxmagic.__version__
    assert (dist / f"jaxmagic-{version}-py3-none-any.whl").exists(), sorted(p.name for p in dist.iterdir())
    assert (dist / f"jaxmagic-{version}.tar.gz").exists(), sorted(p.name for p in dist.iterdir())


def test_the_wheel_holds_every_file_of_the_package_and_its_license(dist):
    wheel = next(dist.glob("jaxmagic-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(f"jaxmagic-{jaxmagic.__version__}.dist-info/METADATA").decode()
    source = {
        path.relative_to(ROOT).as_posix()
        for path in (ROOT / "jaxmagic").rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    missing = sorted(source - names)
    assert missing == [], f"files of jaxmagic/ missing from the wheel: {missing}"
    assert any(name.endswith(".dist-info/licenses/LICENSE") for name in names)
    for field in ("License-Expression: Apache-2.0", "Requires-Python: >=3.11", "Classifier: Framework :: Jupyter"):
        assert field in metadata, f"METADATA lacks {field!r}"


def test_the_installed_wheel_loads_and_runs_a_magic(dist, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    fresh_site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # No PYTHONPATH (a checkout on it would look like an installed jaxmagic to pip, and be imported).
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env["JAX_PLATFORMS"] = "cpu"
    wheel = next(dist.glob("jaxmagic-*.whl"))
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    # Then .venv's packages, as a plain directory after the fresh one: its .pth files (the editable
    # jaxmagic's finder among them) are not run. (Before the install, pip would have taken the editable
    # jaxmagic's metadata there for an installed jaxmagic and installed nothing.)
    (fresh_site / "project_venv_packages.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    result = subprocess.run(
        [str(python), "-c", SESSION], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"the session failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert Path(seen["file"]).is_relative_to(fresh_site), f"jaxmagic imported from {seen['file']}, not the wheel"
    assert seen["version"] == seen["metadata_version"] == jaxmagic.__version__
    assert "jax_nans" in seen["magics"] and "jax_doctor" in seen["magics"]
    assert seen["error"] == "FloatingPointError", seen  # the user's error, raised after the report
    assert "`log`" in seen["summary"], seen["summary"]
