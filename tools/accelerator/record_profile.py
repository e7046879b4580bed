"""Record, on a TPU (or GPU), what %%jax_profile's device reading is checked against: run it there.

    PYTHONPATH=<checkout>:<site packages> python tools/accelerator/record_profile.py OUT_DIR

Writes into OUT_DIR (all small; copy back what a test should replay into tests/fixtures/accelerator/):

- ``<fn>.as_text.hlo.txt`` - ``compiled.as_text()`` of each program below: what the probe's program
  capture gives live. Its instruction names must be the trace's op names (checked, see ``checks.txt``).
- ``probe/`` (the saved trace) and ``probe_report.{json,txt}`` - ``jaxmagic.probes.profile(save=...)``
  around 3 warm calls of each program: the live report on the device, by line, scope and kernel.
- ``checks.txt`` - per program: the ops the trace shows (read back from the saved ``.xplane.pb`` through
  the probe's own reader) that the HLO text lacks (should be none), the report's top line and scope, its
  runs, and the reader's notes.

Two programs: ``mm`` (the one of tests/fixtures/accelerator/tpu-v5e-jax0.12: a bf16 matmul in a
named_scope, then tanh and sum) and ``loop`` (a ``fori_loop`` of matmuls in a named_scope: how the
device lays out a loop's ops, nested or not, and what its runs count).
"""

from __future__ import annotations

import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # the checkout, for jaxmagic

import jax
import jax.numpy as jnp

from jaxmagic import probes
from jaxmagic.probes._profile.trace_events import read_profile_data


def mm(a):
    with jax.named_scope("matmul"):
        y = a @ a  # line and scope the report must name first
    return jnp.tanh(y).sum()


def loop(a):
    def body(_i, x):
        with jax.named_scope("step"):
            return jnp.tanh(x @ a)  # a loop body's line

    return jax.lax.fori_loop(0, 4, body, a).sum()


def main(out: pathlib.Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    a = jnp.ones((2048, 2048), jnp.bfloat16) / 2048
    programs = {"mm": jax.jit(mm), "loop": jax.jit(loop)}
    texts = {}
    for name, fn in programs.items():
        texts[name] = fn.lower(a).compile().as_text()
        (out / f"{name}.as_text.hlo.txt").write_text(texts[name])
        fn(a).block_until_ready()  # compiled and run once: the profile below sees warm calls
    with probes.profile(save=str(out / "probe")) as report:
        for fn in programs.values():
            for _ in range(3):
                fn(a).block_until_ready()
    (out / "probe_report.json").write_text(json.dumps(report.to_dict(), indent=1, default=str))
    (out / "probe_report.txt").write_text(str(report))
    (out / "checks.txt").write_text("\n".join(_checks(out, texts, report)) + "\n")
    print((out / "checks.txt").read_text())
    print(str(report)[:3000])


def _checks(out: pathlib.Path, texts: dict[str, str], report) -> list[str]:
    """What to look at first: trace op names against the HLO text, and the report's main figures."""
    lines = [f"jax {jax.__version__}, devices {jax.devices()}"]
    xplanes = sorted((out / "probe").rglob("*.xplane.pb"))
    if not xplanes:
        return [*lines, "no .xplane.pb was saved"]
    reading = read_profile_data(jax.profiler.ProfileData.from_serialized_xspace(xplanes[-1].read_bytes()))
    lines += [f"devices read: {reading.devices}", f"notes: {reading.notes}"]
    for name, text in texts.items():
        ops = {e.op for e in reading.events if e.op and e.module == f"jit_{name}"}
        missing = sorted(op for op in ops if f"%{op} = " not in text and f" {op} = " not in text)
        lines.append(f"{name}: trace ops {sorted(ops)}; not in as_text(): {missing or 'none'}")
    for row in report.lines[:4]:
        lines.append(
            f"line {row.where}: {row.seconds * 1e6:.1f} us, calls {row.calls}, runs {row.kernel_runs}, {row.scopes}"
        )
    lines += [f"scope {s.path}: {s.seconds * 1e6:.1f} us" for s in report.scopes[:4]]
    lines += [f"program {p.function}: calls {p.calls}, identified {p.identified}" for p in report.programs]
    return lines


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(pathlib.Path(sys.argv[1]))
