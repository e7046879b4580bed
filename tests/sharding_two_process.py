"""One of two JAX processes on loopback, each with 2 fake CPU devices (4 devices in all).

``python tests/sharding_two_process.py PORT PROCESS_ID`` joins the job whose
coordinator is 127.0.0.1:PORT, lays out arrays over all four devices and prints
one JSON line: what ``%jax_sharding`` (the probe and the magic) reports from
this process. Run by tests/test_sharding.py, two at a time, under an outer
timeout: a process whose peer never comes aborts on its own after a while.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys

import jax

port, process_id = sys.argv[1], int(sys.argv[2])
jax.config.update("jax_num_cpu_devices", 2)
jax.distributed.initialize(
    coordinator_address=f"127.0.0.1:{port}", num_processes=2, process_id=process_id, initialization_timeout=60
)

import numpy as np  # noqa: E402
from jax.sharding import NamedSharding  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

from jaxmagic import probes  # noqa: E402
from jaxmagic.probes._sharding.sharding_layout import layout_grids  # noqa: E402
from jaxmagic.render import static_bundle  # noqa: E402

mesh = jax.make_mesh((2, 2), ("data", "model"))
data = np.arange(32, dtype=np.float32).reshape(8, 4)


def global_array(spec):
    sharding = NamedSharding(mesh, spec)
    return jax.make_array_from_callback(data.shape, sharding, lambda index: data[index])


def described(report) -> dict:
    grids, _ = layout_grids(report.arrays[0])
    grid = grids[0]
    cells = {f"{c.row},{c.col}": {"label": c.label, "detail": c.detail, "style": c.style} for c in grid.cells}
    layout = report.arrays[0]
    return {
        "status": report.status.value,
        "summary": report.summary,
        "cells": cells,
        "fully_addressable": layout.fully_addressable,
        "replica_check": layout.replica_check,
        "copies_compared": layout.copies_compared,
        "devices": [[d.id, d.process, d.addressable] for d in layout.devices],
        "text": static_bundle(report.document())["text/plain"],
        "html": static_bundle(report.document())["text/html"],
    }


out = {
    "process": jax.process_index(),
    "local": [d.id for d in jax.local_devices()],
    "global": [d.id for d in jax.devices()],
}
x = global_array(P("data", "model"))
out["split"] = described(probes.sharding(x, expression="x"))
out["across"] = described(probes.sharding(global_array(P(None, "model")), expression="c"))

# The magic, as a notebook on this process would run it.
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402

shell = InteractiveShell.instance()
shell.run_line_magic("load_ext", "jaxmagic")
shell.user_ns["x"] = x
with contextlib.redirect_stdout(io.StringIO()) as shown:
    result = shell.run_cell("%jax_sharding x -o rep")
out["magic_ok"] = bool(result.success)
out["magic_summary"] = shell.user_ns["rep"].summary if "rep" in shell.user_ns else ""
out["magic_shown"] = shown.getvalue()
print("RESULT " + json.dumps(out), flush=True)
jax.distributed.shutdown()
