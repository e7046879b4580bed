"""Record, on a TPU (or GPU), what the memory probe needs to replay its out-of-memory answers in CI.

    python tools/accelerator/record_memory.py OUTDIR            # on the device
    python tools/accelerator/record_memory.py OUTDIR --cpu-check  # the recorder itself, on CPU (kernel only)

Every compilation the memory probe makes (the user's program, and each way down it tries) goes through
``jaxmagic.probes._memory.program.compile_with_memory_dumps``. This script wraps that one function, runs
three programs as a user would, and writes for each compilation XLA's dumps (optimized module, buffer
assignment, live ranges), its ``memory_analysis()`` or the compiler's error, keyed as
``tests/memory_recordings.py`` replays them (module name, input shapes, ordinal):

* ``compile_time_oom`` - ``nearest`` (sort of pairwise distances) on 80,000 points: XLA:TPU refuses it at
  compile time; then ``explain_out_of_memory`` of that error, whose ways down compile for the TPU;
* ``run_time_oom`` - 8 arrays of f32[20000,20000] held, then ``nearest`` on 40,000 points (fits alone);
* ``kernel`` - ``exp(-(pts[:, None] - pts[None, :]) ** 2) @ w`` on 2**17 points (issue 63.1's program);
* ``scan_layers`` - ``jax.grad`` through ``jax.lax.scan(block, x, params)`` over 8 layers of width 2048
  (issue 63.2), measured with ``memory_of_call`` (compiled, no error): XLA:TPU's stacks (``scan_stacks``),
  the donation trial, and both ``jax.checkpoint`` trials on the body, compiled for the TPU (the replay keeps
  ``scan_block``/``scan_loss`` at these lines: their frames name them; move nothing above them).

Also ``memory_stats.json`` (``device.memory_stats()`` before and after the arrays are held), each error's
whole text, and each report as text and ``to_dict()`` JSON. Nothing here needs more than the device.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import traceback

import jax
import jax.numpy as jnp

from jaxmagic.probes._memory import program as program_module
from jaxmagic.probes._memory.probe import explain_out_of_memory, memory_of_call

_REAL = program_module.compile_with_memory_dumps


def _key(lowered, seen: dict) -> str:
    first = lowered.as_text().splitlines()[0]
    module = re.search(r"module @([\w.\-]+)", first)
    shapes = ", ".join(f"{a.dtype}{list(a.shape)}" for a in jax.tree.leaves(lowered.args_info))
    base = f"{module.group(1) if module else 'module'}({shapes})"
    seen[base] = seen.get(base, -1) + 1
    return f"{base}#{seen[base]}"


def _recorder(outdir: str, index: list, seen: dict):
    def record(lowered):
        key = _key(lowered, seen)
        folder = os.path.join(outdir, "compiles", f"{len(index):03d}")
        os.makedirs(folder, exist_ok=True)
        entry: dict = {"key": key, "dir": os.path.relpath(folder, outdir)}
        try:
            compiled, dumps = _REAL(lowered)
        except program_module.DumpedCompileError as failure:
            entry["error"] = str(failure.error)
            _write_dumps(folder, failure.dumps)
            entry["platform"] = failure.dumps.platform
            index.append(entry)
            raise
        stats = compiled.memory_analysis()
        entry["memory_analysis"] = {
            name: int(getattr(stats, name, 0) or 0)
            for name in (
                "argument_size_in_bytes",
                "output_size_in_bytes",
                "alias_size_in_bytes",
                "temp_size_in_bytes",
                "generated_code_size_in_bytes",
            )
        }
        entry["platform"] = dumps.platform
        _write_dumps(folder, dumps)
        index.append(entry)
        return compiled, dumps

    return record


_NAMES = {  # as XLA names them, so that the replay reads them with ``read_memory_dumps`` as the live path does
    "hlo": "module.after_optimizations.txt",
    "buffer_assignment": "module.after_optimizations-buffer-assignment.txt",
    "live_range": "module.after_optimizations-live-range.txt",
}


def _write_dumps(folder: str, dumps) -> None:
    for field, name in _NAMES.items():
        with open(os.path.join(folder, name), "w") as file:
            file.write(getattr(dumps, field))


def _save_report(outdir: str, name: str, error: BaseException, stats_before, stats_after) -> None:
    with open(os.path.join(outdir, f"{name}.error.txt"), "w") as file:
        file.write(str(error))
    report = explain_out_of_memory(error, namespace=globals())
    with open(os.path.join(outdir, f"{name}.report.txt"), "w") as file:
        file.write(str(report))
    with open(os.path.join(outdir, f"{name}.report.json"), "w") as file:
        json.dump(report.to_dict() if report is not None else None, file, indent=1, default=str)
    with open(os.path.join(outdir, f"{name}.memory_stats.json"), "w") as file:
        json.dump({"before": stats_before, "after": stats_after}, file, indent=1)


@jax.jit
def nearest(x):
    d = jnp.abs(x[:, None] - x[None, :])
    return jnp.sort(d, axis=0)[1]


@jax.jit
def kern(pts, w):
    k = jnp.exp(-((pts[:, None] - pts[None, :]) ** 2))
    return k @ w


def scan_block(x, w):
    w1, w2 = w
    h = jnp.tanh(x @ w1)
    return x + h @ w2, None


def scan_loss(params, x):
    y, _ = jax.lax.scan(scan_block, x, params)
    return (y**2).mean()


def _measured(outdir: str, name: str) -> None:
    """A program that fits, measured as ``%jax_memory CALL`` measures it: every compilation and the report."""
    index: list = []
    where = os.path.join(outdir, name)
    shutil.rmtree(where, ignore_errors=True)
    os.makedirs(where)
    program_module.compile_with_memory_dumps = _recorder(where, index, {})
    try:
        w = jax.ShapeDtypeStruct((8, 2048, 2048), jnp.float32)
        report = memory_of_call(jax.jit(jax.grad(scan_loss)), ((w, w), jax.ShapeDtypeStruct((2048, 2048), jnp.float32)))
        with open(os.path.join(where, f"{name}.report.txt"), "w") as file:
            file.write(str(report))
        with open(os.path.join(where, f"{name}.report.json"), "w") as file:
            json.dump(report.to_dict(), file, indent=1, default=str)
        print(f"{name}: {report.summary[:160]}")
        _check_trials(name, report, index)
    except Exception:
        traceback.print_exc()
    finally:
        program_module.compile_with_memory_dumps = _REAL
        with open(os.path.join(where, "index.json"), "w") as file:
            json.dump(index, file, indent=1)


# The trials tests/test_memory_tpu.py replays for ``scan_layers``, in the order the probe compiles them: the
# donation of ``params`` (measured, not offered: a gradient function's caller still needs them), then
# ``jax.checkpoint`` on the scan's body without a policy and keeping matrix products. The checkpoint trials
# are compiled only when ``scan_stacks`` reads XLA:TPU's stacks (the zeros the loop starts from, updated by
# multi-output fusions); the replay asks for them under the same keys, each then measured as the TPU did.
_SCAN_TRIALS = ("donate", "checkpoint", "checkpoint")


def _check_trials(name: str, report, index: list) -> None:
    """Say, in the device run's log, which trials were compiled for the device and which were not: a trial
    missing here is one the replay cannot measure (its test then says it was not measured)."""
    ways = [way for program in report.programs for way in program.ways_down]
    for way in ways:
        said = f"peak {way.peak_after}" if way.peak_after is not None else f"not measured: {way.problem[:120]}"
        print(f"  {name}: {way.kind} ({way.platform or '-'}): {said}")
    kinds = tuple(way.kind for way in ways)
    if name == "scan_layers" and kinds != _SCAN_TRIALS:
        print(f"  {name}: expected the trials {_SCAN_TRIALS}, the probe tried {kinds}: the replay will not match")
    print(f"  {name}: {len(index)} compilations recorded: " + ", ".join(entry["key"] for entry in index))


def _stats():
    try:
        return jax.devices()[0].memory_stats()
    except Exception:
        return None


def _scenario(outdir: str, name: str, run) -> None:
    index: list = []
    where = os.path.join(outdir, name)
    shutil.rmtree(where, ignore_errors=True)
    os.makedirs(where)
    program_module.compile_with_memory_dumps = _recorder(where, index, {})
    try:
        before = _stats()
        try:
            run()
            print(f"{name}: no error (nothing to explain)")
        except Exception as error:  # the user's error: what the probe explains
            _save_report(where, name, error, before, _stats())
            print(f"{name}: {str(error).splitlines()[0][:160]}")
    except Exception:
        traceback.print_exc()
    finally:
        program_module.compile_with_memory_dumps = _REAL
        with open(os.path.join(where, "index.json"), "w") as file:
            json.dump(index, file, indent=1)


held: list = []


def main(outdir: str, cpu_check: bool = False) -> None:
    os.makedirs(outdir, exist_ok=True)
    print(jax.devices(), jax.__version__)
    if jax.default_backend() == "cpu" and not cpu_check:
        sys.exit("record_memory.py records an accelerator's answers; on CPU only --cpu-check (the kernel) runs")

    def compile_time():
        x = jnp.linspace(0.0, 1.0, 80_000)
        nn = nearest(x)
        nn.block_until_ready()

    def run_time():
        held.extend(jnp.full((20_000, 20_000), float(i)) for i in range(8))
        jax.block_until_ready(held)
        x = jnp.linspace(0.0, 1.0, 40_000)
        nn = nearest(x)
        nn.block_until_ready()

    def kernel():
        pts = jnp.linspace(0.0, 1.0, 2**17)
        w = jnp.ones((2**17, 4))
        out = kern(pts, w)
        out.block_until_ready()

    if not cpu_check:  # on CPU these would take the host's memory for real (12.8 GB held)
        _scenario(outdir, "compile_time_oom", compile_time)
        _scenario(outdir, "run_time_oom", run_time)
        held.clear()
    _scenario(outdir, "kernel", kernel)
    _measured(outdir, "scan_layers")
    with open(os.path.join(outdir, "memory_stats.json"), "w") as file:
        json.dump(_stats(), file, indent=1)


if __name__ == "__main__":
    arguments = [a for a in sys.argv[1:] if a != "--cpu-check"]
    main(arguments[0] if arguments else "memory_recording", cpu_check="--cpu-check" in sys.argv)
