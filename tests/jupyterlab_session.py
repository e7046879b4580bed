"""A real JupyterLab server and a headless Chromium page on it, for the browser tests.

``lab_server()`` starts JupyterLab from the project's venv on a free loopback
port with a random token, a temporary root directory and temporary Jupyter
config/data/settings directories (nothing of the user's ~/.jupyter is read or
written), and stops it on exit. ``browser()`` launches Debian's Chromium
through Playwright; ``Watched`` counts a page's console errors and every
request that leaves the machine.

Chromium is a system package (``apt-get install chromium``): the tests skip
with that reason when it is missing, except under CI, where they fail.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
KERNEL_NAME = "jaxmagic"  # the kernel spec tools/venv.sh installs into .venv
LOCAL_HOSTS = {"127.0.0.1", "localhost", "[::1]", "::1"}

# User settings for the test's JupyterLab: no news or update checks (they would
# reach the network), every cell kept in the DOM (windowing off) so each report
# can be measured, and no widget state saved (JupyterLab's default, stated).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}


# JavaScript for a page: the contrast of an element's text as painted - its colour's alpha and every opacity up
# to ``top`` blended over the opaque colour behind it (translucent backgrounds composited, white below all).
JS_TEXT_CONTRAST = """
const rgbaOf = (css) => { const m = css && css.match(/rgba?\\(([^)]+)\\)/); if (!m) return null;
  const p = m[1].split(',').map(Number); return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1]; };
const overOf = (top, below) => top.slice(0, 3).map((c, i) => c * top[3] + below[i] * (1 - top[3]));
const paintedBehind = (el) => {
  const layers = [];
  for (let e = el; e; e = e.parentElement) {
    const bg = rgbaOf(getComputedStyle(e).backgroundColor);
    if (bg && bg[3] > 0) { layers.push(bg); if (bg[3] >= 1) break; }
  }
  return layers.reverse().reduce((below, top) => overOf(top, below), [255, 255, 255]);
};
const lumOf = (c) => { const [r, g, b] = c.map(v => { v /= 255;
  return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); }); return 0.2126 * r + 0.7152 * g + 0.0722 * b; };
const textContrast = (el, top) => {
  let alpha = 1;
  for (let e = el; e && e !== top.parentElement; e = e.parentElement) alpha *= Number(getComputedStyle(e).opacity);
  const fg = rgbaOf(getComputedStyle(el).color), bg = paintedBehind(el);
  const [x, y] = [lumOf(overOf([fg[0], fg[1], fg[2], fg[3] * alpha], bg)), lumOf(bg)].sort((p, q) => q - p);
  return (x + 0.05) / (y + 0.05);
};
"""


def require_chromium() -> str:
    """The Chromium path; skips the test without it (fails under CI, which must install it)."""
    if os.path.exists(CHROMIUM):
        return CHROMIUM
    reason = f"{CHROMIUM} is missing: apt-get install chromium (.ci/run installs it)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(reason)
    pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclasses.dataclass
class LabServer:
    url: str  # http://127.0.0.1:PORT/
    token: str
    root: Path  # the server's root directory: notebooks go here

    def lab_url(self, path: str = "") -> str:
        # reset: a fresh workspace, so tabs of an earlier page are not restored beside ``path``
        return f"{self.url}lab/tree/{path}?reset&token={self.token}"


@contextlib.contextmanager
def lab_server(start_timeout_s: float = 90, settings_more: dict | None = None):
    """A JupyterLab server of this venv, stopped (with its kernels) on exit; ``settings_more`` adds user
    settings (plugin id as a path, ``@jupyter-widgets/jupyterlab-manager/plugin``) to ``LAB_SETTINGS``."""
    with tempfile.TemporaryDirectory(prefix="jaxmagic-lab-") as tmp:
        tmp_path = Path(tmp)
        root = tmp_path / "root"
        root.mkdir()
        settings = tmp_path / "settings"
        for name, values in {**LAB_SETTINGS, **(settings_more or {})}.items():
            target = settings / f"{name}.jupyterlab-settings"
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(json.dumps(values))
        env = {
            **os.environ,
            "JUPYTER_CONFIG_DIR": str(tmp_path / "config"),
            "JUPYTER_DATA_DIR": str(tmp_path / "data"),  # also the notebook trust database
            "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
            "JUPYTERLAB_SETTINGS_DIR": str(settings),
            "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        }
        port, token = free_port(), secrets.token_hex(16)
        command = [
            sys.executable,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--allow-root",  # CI runs as root
            "--ip=127.0.0.1",
            f"--port={port}",
            "--ServerApp.port_retries=0",
            f"--IdentityProvider.token={token}",
            f"--ServerApp.root_dir={root}",
            "--expose-app-in-browser",  # window.jupyterapp: the test drives JupyterLab by its commands
            "--LabApp.news_url=",
            "--LabApp.extension_manager=readonly",  # no PyPI look-ups from the server
            "--LabApp.check_for_updates_class=jupyterlab.handlers.announcements.NeverCheckForUpdate",
            f"--MappingKernelManager.default_kernel_name={KERNEL_NAME}",
        ]
        log = open(tmp_path / "lab.log", "w+")  # closed in the finally below
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, cwd=root)
        server = LabServer(f"http://127.0.0.1:{port}/", token, root)
        try:
            _wait_until_up(server, process, log, start_timeout_s)
            yield server
        finally:
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            log.close()


def _wait_until_up(server: LabServer, process, log, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"JupyterLab exited with {process.returncode}:\n{log.read()[-3000:]}")
        try:
            with urllib.request.urlopen(f"{server.url}api/status?token={server.token}", timeout=2):
                return
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            time.sleep(0.3)
    log.seek(0)
    raise RuntimeError(f"JupyterLab did not answer within {timeout_s:.0f} s:\n{log.read()[-3000:]}")


@contextlib.contextmanager
def browser():
    """Debian's Chromium driven by Playwright (no browser download: executable_path)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        instance = playwright.chromium.launch(executable_path=require_chromium(), args=CHROMIUM_ARGS)
        try:
            yield instance
        finally:
            instance.close()


@dataclasses.dataclass
class Watched:
    """What a page did that a person would not see: console errors, requests leaving the machine."""

    console_errors: list[str] = dataclasses.field(default_factory=list)
    external_requests: list[str] = dataclasses.field(default_factory=list)

    def attach(self, page) -> None:
        page.on("console", lambda message: message.type == "error" and self.console_errors.append(message.text))
        page.on("pageerror", lambda error: self.console_errors.append(f"page error: {error}"))
        page.on("request", self._request)

    def _request(self, request) -> None:
        parts = urlsplit(request.url)
        if parts.scheme in ("data", "blob", "file", "about", "chrome-extension"):
            return
        if parts.hostname not in LOCAL_HOSTS:
            self.external_requests.append(request.url)
