"""Whose code a frame is does not depend on where JAX and the libraries were installed (issue 52, item 1).

JAX, jaxlib and libraries are imported from folders on ``PYTHONPATH`` as often as from site-packages:
an HPC module tree or a ``pip install --prefix`` folder, one Nix store path per package (the
``PYTHONPATH`` of NixOS/nixpkgs#511567 lists one ``/nix/store/...-python3.13-<pkg>/lib/python3.13/
site-packages`` per package; nixpkgs#156808 checks ``echo $PYTHONPATH | tr ':' '\\n' | grep jaxlib``),
a container's source checkouts (NVIDIA/JAX-Toolbox#1416: ``jax.__path__ == ['/opt/jax/jax']``;
JAX-Toolbox#475: "we install jax/flax/paxml/etc. as source installations" in ``/opt``). Before this,
every file outside ``sysconfig``'s folders was the user's: a NaN was put on
``jax/_src/source_info_util.py`` and recompilations on ``jax/_src/monitoring.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jaxmagic.usercode import code_owner

ROOT = Path(__file__).resolve().parent.parent


def _site_packages() -> Path:
    import jax  # the test process's own JAX: where the copied folder is taken from

    return Path(jax.__file__).resolve().parent.parent


# -- JAX and a library imported from a folder on PYTHONPATH ---------------------------------------

USER_SCRIPT = """
import json, sys
import jax, jax.numpy as jnp, optax
from jaxmagic import probes
from jaxmagic.usercode.source import code_kind, is_user_file


@jax.jit
def f(x):
    y = jnp.log(x - 1.0)
    return y * 2


try:
    with probes.nans() as found:
        f(jnp.array(0.5))
except FloatingPointError:
    pass


@jax.jit
def loss(logits, labels):
    return optax.softmax_cross_entropy(logits, labels).mean()


try:
    with probes.nans() as inside:
        loss(jnp.array([[jnp.inf, 0.0]]), jnp.array([[1.0, 0.0]]))
except FloatingPointError:
    pass


@jax.jit
def step(w, x):
    return w * x


with probes.compiles() as compiled:
    for n in (2, 3, 4):
        step(jnp.ones(n), 2.0)

print(json.dumps({
    "jax": jax.__file__, "optax": optax.__file__,
    "kinds": [code_kind(jax.__file__), code_kind(optax.__file__), code_kind(__file__)],
    "nan_line": [found.where_line.filename, found.where_line.lineno, found.where_line.code],
    "library_function": inside.to_dict()["provenance"]["library_function"],
    "library_line": [inside.where_line.filename, inside.where_line.lineno],
    "compile_lines": [[c.line.filename, c.line.lineno] for c in compiled.compilations_of("step")],
    "summary": compiled.summary,
}))
"""


def _line(text: str, code: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if line.strip().startswith(code))


def _run(script: Path, pythonpath: list[Path], python: str = sys.executable) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in pythonpath), "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([python, str(script)], capture_output=True, text=True, timeout=300, env=env, cwd=script.parent)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_jax_and_optax_from_a_folder_on_pythonpath_leave_the_users_lines_to_the_user(tmp_path):
    """A module folder on PYTHONPATH as an HPC module, a ``--target`` install or a source checkout lays it
    out: ``jax/`` copied without its metadata (a source checkout: JAX is JAX by the imported package's
    directory, not by an installer's record), ``jaxlib/`` linked in (a Nix-style symlink tree), and Optax
    with its ``dist-info`` (``pip install --target``: a library by its RECORD)."""
    site = _site_packages()
    modules = tmp_path / "modules"
    modules.mkdir()
    shutil.copytree(site / "jax", modules / "jax", ignore=shutil.ignore_patterns("__pycache__"))
    (modules / "jaxlib").symlink_to(site / "jaxlib")
    shutil.copytree(site / "optax", modules / "optax", ignore=shutil.ignore_patterns("__pycache__"))
    for info in site.glob("optax-*.dist-info"):
        shutil.copytree(info, modules / info.name)
    work = tmp_path / "work"
    work.mkdir()
    script = work / "train.py"
    script.write_text(USER_SCRIPT)

    got = _run(script, [modules, ROOT])

    assert got["jax"].startswith(str(modules)) and got["optax"].startswith(str(modules))
    assert got["kinds"] == ["jax", "library", "user"]
    # the NaN is made on the user's line, not on jax/_src/source_info_util.py
    assert got["nan_line"] == [str(script), _line(USER_SCRIPT, "y = jnp.log"), "y = jnp.log(x - 1.0)"]
    # a NaN inside Optax keeps the library's name, and is placed on the line that called it
    assert got["library_function"] == "optax.softmax_cross_entropy"
    assert got["library_line"] == [str(script), _line(USER_SCRIPT, "return optax.softmax_cross_entropy")]
    # recompilations are put on the user's call, not on jax/_src/monitoring.py
    assert got["compile_lines"] == [[str(script), _line(USER_SCRIPT, "step(jnp.ones(n), 2.0)")]] * 3
    assert got["summary"].startswith("`step` compiled 3 times: argument types changed")


# -- an editable install of the user's own project -------------------------------------------------

# A PEP 517/660 build backend kept in the project (``backend-path``), so ``pip install -e`` runs offline:
# it builds the editable wheel setuptools builds for a src layout (checked here with setuptools 67:
# ``__editable__.myproj-0.1.pth`` holding the ``src`` folder, and ``myproj.egg-info`` left in ``src``).
BACKEND = """
import base64, hashlib, os, zipfile

NAME, VERSION = "myproj", "0.1"
HERE = os.path.dirname(os.path.abspath(__file__))


def _line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _wheel(directory, files):
    info = f"{NAME}-{VERSION}.dist-info"
    files = {**files, f"{info}/METADATA": f"Metadata-Version: 2.1\\nName: {NAME}\\nVersion: {VERSION}\\n".encode(),
             f"{info}/WHEEL": b"Wheel-Version: 1.0\\nGenerator: test\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n",
             f"{info}/top_level.txt": f"{NAME}\\n".encode()}
    name = f"{NAME}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(directory, name), "w") as wheel:
        for path, data in files.items():
            wheel.writestr(path, data)
        wheel.writestr(f"{info}/RECORD", "\\n".join([_line(p, d) for p, d in files.items()] + [f"{info}/RECORD,,"]))
    return name


def get_requires_for_build_editable(config_settings=None):
    return []


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):
    src = os.path.join(HERE, "src")
    os.makedirs(os.path.join(src, f"{NAME}.egg-info"), exist_ok=True)  # as setuptools leaves it
    with open(os.path.join(src, f"{NAME}.egg-info", "top_level.txt"), "w") as top_level:
        top_level.write(NAME + "\\n")
    return _wheel(wheel_directory, {f"__editable__.{NAME}-{VERSION}.pth": (src + "\\n").encode()})


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise NotImplementedError("editable only")
"""

PROJECT_CODE = """
import jax
import jax.numpy as jnp


@jax.jit
def normalise(x):
    scale = jnp.sqrt(jnp.sum(x) - 3.0)
    return x / scale
"""

EDITABLE_SCRIPT = """
import json
import jax.numpy as jnp
import myproj
from jaxmagic import probes
from jaxmagic.usercode.source import code_kind

try:
    with probes.nans() as found:
        myproj.normalise(jnp.ones(2))
except FloatingPointError:
    pass
print(json.dumps({
    "myproj": myproj.__file__, "kind": code_kind(myproj.__file__),
    "nan_line": [found.where_line.filename, found.where_line.lineno, found.where_line.code],
}))
"""


def test_an_editable_install_of_the_users_project_is_the_users_code(tmp_path):
    """``pip install -e .`` of a research project (a src layout), imported from a notebook or script
    elsewhere: the project's lines are the user's - they wrote them and change them. pip installs it
    into a fresh venv that sees the test's packages through a ``.pth`` (as ``--system-site-packages``
    would); its dist-info there says editable, its code stays in the project."""
    project = tmp_path / "proj"
    (project / "src" / "myproj").mkdir(parents=True)
    (project / "src" / "myproj" / "__init__.py").write_text(PROJECT_CODE)
    (project / "_backend.py").write_text(BACKEND)
    (project / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [build-system]
            requires = []
            build-backend = "_backend"
            backend-path = ["."]

            [project]
            name = "myproj"
            version = "0.1"
            """
        )
    )
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = str(venv / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "shared.pth").write_text(str(_site_packages()) + "\n")
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "--python", python, "install", "--no-index", "-q", "-e", str(project)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if pip.returncode != 0 and "no such option: --python" in pip.stderr:
        pytest.skip("this pip cannot install into another interpreter")
    assert pip.returncode == 0, pip.stderr[-3000:]
    info = next(Path(purelib).glob("myproj-0.1.dist-info"))
    assert json.loads((info / "direct_url.json").read_text())["dir_info"] == {"editable": True}
    work = tmp_path / "notebooks"
    work.mkdir()
    script = work / "explore.py"
    script.write_text(EDITABLE_SCRIPT)

    got = _run(script, [ROOT], python=python)

    assert got["myproj"] == str(project / "src" / "myproj" / "__init__.py")
    assert got["kind"] == "user"
    assert got["nan_line"] == [got["myproj"], _line(PROJECT_CODE, "scale ="), "scale = jnp.sqrt(jnp.sum(x) - 3.0)"]


# -- the rule, on folders of each shape (no JAX needed) ----------------------------------------------


def _dist_info(folder: Path, name: str, record: list[str] | None, top_level: str | None = None) -> None:
    info = folder / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Name: {name}\nVersion: 1.0\n")
    if record is not None:
        (info / "RECORD").write_text("\n".join(record) + "\n")
    if top_level is not None:
        (info / "top_level.txt").write_text(top_level)


def _file(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("x = 1\n")
    return str(path)


@pytest.fixture
def on_path(monkeypatch):
    def put(*folders: Path) -> None:
        for folder in folders:
            monkeypatch.syspath_prepend(str(folder))
        code_owner._installed_in.cache_clear()
        code_owner.module_of_file.cache_clear()

    yield put
    code_owner._installed_in.cache_clear()
    code_owner.module_of_file.cache_clear()


def test_a_target_folder_is_a_library_for_what_its_distributions_list(tmp_path, on_path):
    """``pip install --target deps`` (and AWS Lambda's ``pip install -t .`` beside the handler): the
    installed packages are libraries by their RECORD, a module of the user's beside them stays theirs."""
    deps = tmp_path / "deps"
    _dist_info(deps, "dm_haiku", ["haiku/__init__.py,sha256=x,1", "haiku/_src/basic.py,sha256=y,2", "../../bin/x,,"])
    _dist_info(deps, "six", ["six.py,sha256=z,3"])
    on_path(deps)
    assert code_owner.kind_of_file(_file(deps / "haiku" / "_src" / "basic.py")) == "library"
    assert code_owner.module_of_file(str(deps / "haiku" / "_src" / "basic.py")) == "haiku._src.basic"
    assert code_owner.kind_of_file(_file(deps / "six.py")) == "library"
    assert code_owner.kind_of_file(_file(deps / "handler.py")) == "user"
    assert code_owner.module_of_file(str(deps / "handler.py")) == ""


def test_metadata_that_lists_no_files_makes_the_whole_folder_installed(tmp_path, on_path):
    """An installer that kept no RECORD and no top_level.txt: nothing says which modules are whose, so
    nothing in that folder is called the user's."""
    deps = tmp_path / "deps"
    _dist_info(deps, "stripped", None)
    on_path(deps)
    assert code_owner.kind_of_file(_file(deps / "stripped" / "core.py")) == "library"
    assert code_owner.kind_of_file(_file(deps / "other.py")) == "library"


def test_egg_info_counts_when_installed_not_when_left_by_a_build(tmp_path, on_path):
    """A versioned ``name-1.0-py3.13.egg-info`` is what ``setup.py install`` (and Debian's python3-*
    packages, as ``name-1.0.egg-info``) install; an unversioned ``name.egg-info`` is what setuptools
    leaves in a project's ``src`` while building it - an editable install's folder, the user's."""
    installed, src = tmp_path / "ros" / "site-packages", tmp_path / "proj" / "src"
    (installed / "pkg-0.0.0-py3.13.egg-info").mkdir(parents=True)
    (installed / "pkg-0.0.0-py3.13.egg-info" / "top_level.txt").write_text("pkg\n")
    (src / "mine.egg-info").mkdir(parents=True)
    (src / "mine.egg-info" / "top_level.txt").write_text("mine\n")
    on_path(installed, src)
    assert code_owner.kind_of_file(_file(installed / "pkg" / "node.py")) == "library"
    assert code_owner.kind_of_file(_file(src / "mine" / "model.py")) == "user"


def test_a_package_no_distribution_installed_is_the_users(tmp_path, on_path):
    """A folder of packages without metadata (a project's ``src`` on PYTHONPATH) holds the user's code;
    a file outside every sys.path folder (an editable install's finder maps to it) too."""
    src = tmp_path / "src"
    on_path(src)
    assert code_owner.kind_of_file(_file(src / "mypkg" / "layers.py")) == "user"
    assert code_owner.kind_of_file(_file(tmp_path / "elsewhere" / "mypkg" / "data.py")) == "user"


def test_jax_is_jax_and_jaxmagic_is_jaxmagic_wherever_they_lie():
    import jax
    import jaxlib

    assert code_owner.kind_of_file(jax.__file__) == "jax"
    assert code_owner.kind_of_file(os.path.join(os.path.dirname(jaxlib.__file__), "xla_client.py")) == "jax"
    assert code_owner.kind_of_file(code_owner.__file__) == "jaxmagic"
    assert code_owner.module_of_file(jax.numpy.__file__) == "jax.numpy"
    assert code_owner.module_of_file(os.__file__) == ""  # the standard library has no package to name
    assert code_owner.kind_of_file(os.__file__) == "library"


def test_a_package_installed_into_the_folder_while_the_kernel_runs_is_seen(tmp_path, on_path):
    """``!pip install --target deps optax`` in a running notebook: the folder's metadata is read again."""
    deps = tmp_path / "deps"
    library_file = _file(deps / "mylib" / "core.py")
    on_path(deps)
    assert code_owner.kind_of_file(library_file) == "user"  # nothing installed it yet
    _dist_info(deps, "mylib", ["mylib/core.py,sha256=x,1"])
    assert code_owner.kind_of_file(library_file) == "library"
