"""JAX configuration and environment: what differs from a fresh process, and what to paste in an issue.

Usage without IPython::

    report = jaxmagic.probes.config_diff()
    report.nondefault              # {"jax_debug_nans": ("False", "True")}: (default, current)
    env = jaxmagic.probes.environment()
    print(env.text)                # jax.print_environment_info() without the host name

A debugging switch left on (``jax_debug_nans``, ``jax_check_tracer_leaks``,
``jax_log_compiles``) is a common reason for code that is slow for no visible
reason (chapter section 6.2). The defaults are read once per process from a
fresh Python subprocess of the same interpreter, with ``JAX_*`` and
``XLA_FLAGS`` removed from its environment, and cached; so a flag set through
an environment variable when the kernel started counts as changed, and the
report says where it came from.
"""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import re
import socket
import subprocess
import sys

import jax

from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, act
from jaxmagic.report.document import Document, Evidence, Facts, Paragraph, Section, Table

_DEFAULTS_SCRIPT = "import jax, json; print('RESULT ' + json.dumps({k: repr(v) for k, v in jax.config.values.items()}))"
_defaults_cache: dict[tuple[str, str], dict[str, str]] = {}


def clean_environment() -> dict[str, str]:
    """This process's environment without the variables that configure JAX (JAX_*, XLA_FLAGS)."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("JAX_", "XLA_FLAGS"))}


def jax_environment_variables() -> dict[str, str]:
    """The environment variables of this process that configure JAX or XLA."""
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(("JAX_", "XLA_"))}


def default_config(refresh: bool = False) -> dict[str, str]:
    """``{flag: repr(default value)}`` as a fresh process of this interpreter sees it (cached)."""
    key = (sys.executable, jax.__version__)
    if refresh or key not in _defaults_cache:
        done = subprocess.run(
            [sys.executable, "-c", _DEFAULTS_SCRIPT],
            capture_output=True,
            text=True,
            env=clean_environment(),
            timeout=300,
            check=False,
        )
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode != 0 or not lines:
            raise RuntimeError(
                "could not read JAX's default configuration from a fresh process: "
                + (done.stderr.strip().splitlines() or ["no output"])[-1]
            )
        _defaults_cache[key] = json.loads(lines[-1].removeprefix("RESULT "))
    return dict(_defaults_cache[key])


@dataclasses.dataclass
class Flag:
    """One JAX flag: its value here and in a fresh process."""

    name: str
    current: str  # repr of the value in this process
    default: str  # repr of the value in a fresh process ("" if it has no such flag)
    source: str = ""  # for a changed flag: "environment variable JAX_X" or "set in this process"

    @property
    def changed(self) -> bool:
        return self.current != self.default


@dataclasses.dataclass
class ConfigReport(Report):
    """What ``%jax_config`` found."""

    kind = "jax_config"

    changed: list[Flag] = dataclasses.field(default_factory=list)
    flags: list[Flag] = dataclasses.field(default_factory=list)  # every flag (--all), or those matching PATTERN
    total: int = 0  # flags in jax.config.values
    pattern: str = ""
    listed_all: bool = False
    environment: dict[str, str] = dataclasses.field(default_factory=dict)  # JAX_* / XLA_* variables set here
    defaults_from: str = "a fresh Python process of this interpreter, without JAX_* and XLA_FLAGS (read once, cached)"

    def concerns(self) -> list[Concern]:
        return [act(f"`{f.name}` = {f.current} (default {f.default})") for f in self.changed]

    @property
    def nondefault(self) -> dict[str, tuple[str, str]]:
        """``{flag: (default, current)}`` for every changed flag (reprs), like the chapter's nondefault_flags()."""
        return {f.name: (f.default, f.current) for f in self.changed}

    @property
    def summary(self) -> str:
        if not self.changed:
            return f"All {self.total} JAX flags have the values of a fresh process: nothing is left switched on."
        names = ", ".join(f"`{f.name}` = {f.current}" for f in self.changed[:4])
        more = f" and {len(self.changed) - 4} more" if len(self.changed) > 4 else ""
        return f"{len(self.changed)} of {self.total} JAX flags differ from a fresh process: {names}{more}."

    def document(self) -> Document:

        sections = []
        if self.changed:
            rows = [
                [f"`{f.name}`", f"`{f.current}`", f"`{f.default}`" if f.default else "(no such flag)", f.source]
                for f in self.changed
            ]
            sections.append(Section("Changed flags", [Table(["flag", "now", "fresh process", "set by"], rows)]))
        if self.flags:
            title = "All flags" if self.listed_all and not self.pattern else f"Flags matching '{self.pattern}'"
            rows = [[f"`{f.name}`", f"`{f.current}`", "changed" if f.changed else ""] for f in self.flags]
            sections.append(Section(f"{title} ({len(self.flags)})", [Table(["flag", "value", ""], rows)]))
        elif self.pattern:
            sections.append(Section("", [Paragraph(f"No flag name contains '{self.pattern}'.")]))
        if self.environment:
            sections.append(Section("Environment variables", [Facts(list(self.environment.items()))]))
        sections.append(
            Section(
                "How",
                [
                    Paragraph(
                        f"Defaults come from {self.defaults_from}. Read a flag with `jax.config.jax_debug_nans` or "
                        "`jax.debug_nans.value`; `jax.config.read(...)` raises AttributeError for flags that have a "
                        "context manager."
                    )
                ],
            )
        )
        return Document("%jax_config", self.status, self.summary, sections, fix=self.fix)

    @property
    def fix(self) -> str:
        """How to put each changed flag back to a fresh process's value - or why it may stay."""
        if not self.changed:
            return ""
        resets = [
            f"`jax.config.update({f.name!r}, {f.default})`"
            for f in self.changed[:3]
            if f.default and not f.source.startswith("environment")
        ]
        from_env = [f for f in self.changed if f.source.startswith("environment")]
        parts = []
        if resets:
            more = f" (and {len(self.changed) - 3} more)" if len(self.changed) > 3 else ""
            parts.append(f"Put them back when done: {', '.join(resets)}{more}.")
        if from_env:
            names = ", ".join(f"`{f.name.upper()}`" for f in from_env[:3])
            parts.append(f"{names} set in the environment: unset it before starting the kernel.")
        parts.append("A flag you switched on on purpose may stay; `%jax_config` only says it differs.")
        return " ".join(parts)


def config_diff(*, all_flags: bool = False, pattern: str = "", refresh: bool = False) -> ConfigReport:
    """Compare ``jax.config.values`` with a fresh process's defaults.

    ``all_flags`` lists every flag; ``pattern`` lists the flags whose name
    contains it (case-insensitive).
    """
    defaults = default_config(refresh=refresh)
    current = {name: repr(value) for name, value in jax.config.values.items()}
    flags = [Flag(name, value, defaults.get(name, "")) for name, value in sorted(current.items())]
    for flag in flags:
        if flag.changed:
            variable = flag.name.upper()
            flag.source = (
                f"environment variable {variable}={os.environ[variable]}"
                if variable in os.environ
                else "set in this process"
            )
    report = ConfigReport(
        changed=[f for f in flags if f.changed],
        total=len(flags),
        pattern=pattern,
        listed_all=all_flags,
        environment=jax_environment_variables(),
    )
    if pattern:
        report.flags = [f for f in flags if pattern.lower() in f.name.lower()]
    elif all_flags:
        report.flags = flags
    return report


# -- environment -------------------------------------------------------------------

_NODE = re.compile(r"node='[^']*'")
HIDDEN = "<hidden>"


@dataclasses.dataclass
class EnvReport(Report):
    """What ``%jax_env`` shows: ``jax.print_environment_info()``, host name hidden unless asked."""

    kind = "jax_env"

    text: str = ""
    versions: dict[str, str] = dataclasses.field(default_factory=dict)  # jax, jaxlib, numpy, python
    devices: str = ""  # "cpu-1, 1 local devices"
    process_count: str = ""
    host_shown: bool = False
    environment: dict[str, str] = dataclasses.field(default_factory=dict)

    def concerns(self) -> list[Concern]:
        return []  # versions and devices: nothing found in the program

    @property
    def summary(self) -> str:
        versions = ", ".join(f"{k} {v.split()[0]}" for k, v in self.versions.items())
        host = "host name shown" if self.host_shown else "host name hidden (--show-host shows it)"
        return f"{versions}; devices: {self.devices}; {host}."

    def document(self) -> Document:

        sections = [
            Section(
                "Versions",
                [
                    Facts(
                        list(self.versions.items()) + [("devices", self.devices), ("process_count", self.process_count)]
                    )
                ],
            )
        ]
        if self.environment:
            sections.append(Section("Environment variables", [Facts(list(self.environment.items()))]))
        sections.append(
            Section(
                "To paste into an issue",
                [
                    Paragraph(
                        "The output of jax.print_environment_info()"
                        + ("." if self.host_shown else f", with the host name replaced by {HIDDEN}.")
                    ),
                    Evidence("jax.print_environment_info()", self.text),
                ],
            )
        )
        return Document("%jax_env", self.status, self.summary, sections)


def environment(*, show_host: bool = False) -> EnvReport:
    """``jax.print_environment_info(return_string=True)``, host name hidden unless ``show_host``.

    This asks for the devices, so it starts the JAX backend if none is running.
    """
    info = jax.print_environment_info(return_string=True) or ""  # a string when asked for one
    if not show_host:
        info = _NODE.sub(f"node='{HIDDEN}'", info)
        for name in {platform.node(), socket.gethostname()} - {""}:
            info = re.sub(rf"\b{re.escape(name)}\b", HIDDEN, info)
    report = EnvReport(text=info.rstrip("\n"), host_shown=show_host, environment=jax_environment_variables())
    for line in info.splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip().strip('"')
        if key in ("jax", "jaxlib", "numpy", "python"):
            report.versions[key] = value
        elif key == "device info":
            report.devices = value
        elif key == "process_count":
            report.process_count = value
    return report
