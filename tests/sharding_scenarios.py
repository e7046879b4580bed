"""Sharding scenarios run in a fresh process with many fake CPU devices.

The pytest process's JAX backend may already have started with one device, so
tests/test_sharding.py runs this file as a subprocess with
``XLA_FLAGS=--xla_force_host_platform_device_count=64`` and reads one JSON
object from its last stdout line: for each scenario, the report's data and
the drawing (each grid's labels by row, edge labels, captions, cell styles),
plus the rendered text and HTML.

``python tests/sharding_scenarios.py [--no-rich]``: with ``--no-rich`` the
import of rich is blocked first (``sys.modules["rich"] = None``), as if it were
not installed.
"""

from __future__ import annotations

import json
import sys

if "--no-rich" in sys.argv:
    sys.modules["rich"] = None  # every "import rich..." now raises ImportError

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jaxmagic import probes
from jaxmagic.probes._sharding.sharding_layout import drawn_dims, layout_grids
from jaxmagic.render import static_bundle
from jaxmagic.report.document import Grid


def drawing(report, dims=None) -> list[dict]:
    """Every grid of the report's first array, as plain data."""
    layout = report.arrays[0]
    grids, notes = layout_grids(layout, dims if dims is not None else report.dims, name=report.expression)
    return [grid_data(g) for g in grids] + ([{"notes": notes}] if notes else [])


def grid_data(grid: Grid) -> dict:
    labels = [["" for _ in range(grid.cols)] for _ in range(grid.rows)]
    details = [["" for _ in range(grid.cols)] for _ in range(grid.rows)]
    styles = {}
    colours = set()
    for cell in grid.cells:
        labels[cell.row][cell.col] = cell.label
        details[cell.row][cell.col] = cell.detail
        if cell.style:
            styles[f"{cell.row},{cell.col}"] = cell.style
        colours.add(cell.colour)
    return {
        "rows": grid.rows,
        "cols": grid.cols,
        "labels": labels,
        "details": details,
        "styles": styles,
        "row_labels": grid.row_labels,
        "col_labels": grid.col_labels,
        "caption": grid.caption,
        "distinct_colours": len(colours),
        "tooltip0": grid.cells[0].tooltip if grid.cells else "",
    }


def summary(report, dims=None) -> dict:
    bundle = static_bundle(report.document())
    data = report.to_dict()
    return {
        "report": data,
        "drawing": drawing(report, dims) if report.arrays else [],
        "text": bundle["text/plain"],
        "html": bundle["text/html"],
        "status": report.status.value,
        "summary": report.summary,
    }


def main() -> dict:
    out: dict = {"devices": jax.device_count()}
    devices = jax.devices()
    mesh4 = jax.make_mesh((4,), ("d",), devices=devices[:4])
    mesh22 = jax.make_mesh((2, 2), ("data", "model"), devices=devices[:4])
    A = jnp.arange(32.0).reshape(8, 4)

    out["one_d"] = summary(
        probes.sharding(jax.device_put(jnp.arange(16.0), NamedSharding(mesh4, P("d"))), expression="v")
    )
    out["two_d"] = summary(
        probes.sharding(jax.device_put(A, NamedSharding(mesh22, P("data", "model"))), expression="x")
    )
    out["partial"] = summary(
        probes.sharding(jax.device_put(A, NamedSharding(mesh22, P(None, "model"))), expression="c")
    )
    out["replicated"] = summary(probes.sharding(jax.device_put(A, NamedSharding(mesh22, P())), expression="r"))
    out["scalar"] = summary(probes.sharding(jax.device_put(jnp.float32(3), NamedSharding(mesh22, P())), expression="s"))
    out["typeof_ones"] = str(jax.typeof(jnp.ones(3)))

    mesh222 = jax.make_mesh((2, 2, 2), ("a", "b", "c"), devices=devices[:8])
    t = jnp.arange(4 * 6 * 8, dtype=jnp.float32).reshape(4, 6, 8)
    t_two_split = jax.device_put(t, NamedSharding(mesh222, P("a", None, ("b", "c"))))
    out["three_d"] = summary(probes.sharding(t_two_split, expression="t"))
    t_all_split = jax.device_put(t, NamedSharding(mesh222, P("a", "b", "c")))
    out["three_d_facets"] = summary(probes.sharding(t_all_split, expression="u"))
    out["three_d_dims01"] = summary(probes.sharding(t_all_split, expression="u", dims=[0, 1]))
    out["three_d_dims"] = drawn_dims(probes.sharding(t_all_split).arrays[0], [0, 1])
    try:
        probes.sharding(t_all_split, dims=[0, 5])
        out["bad_dims"] = "no error"
    except ValueError as error:
        out["bad_dims"] = str(error)

    mesh88 = jax.make_mesh((8, 8), ("x", "y"))
    big = jax.device_put(jnp.zeros((64, 64)), NamedSharding(mesh88, P("x", "y")))
    out["sixty_four"] = summary(probes.sharding(big, expression="big"))
    wide = jax.device_put(jnp.zeros((8, 64)), NamedSharding(mesh88, P(None, ("x", "y"))))
    out["sixty_four_wide"] = summary(probes.sharding(wide, expression="wide"))
    flat = jax.device_put(jnp.zeros(128), NamedSharding(mesh88, P(("x", "y"))))
    out["sixty_four_1d"] = summary(probes.sharding(flat, expression="flat"))
    out["sixty_four_replicated"] = summary(
        probes.sharding(jax.device_put(jnp.zeros((4, 4)), NamedSharding(mesh88, P())), expression="rep64")
    )

    # Section 8.3: a "replicated" shard_map result whose copies differ, and the fix.
    xs = jax.device_put(jnp.arange(16.0), NamedSharding(mesh4, P("d")))
    bad = jax.jit(jax.shard_map(lambda b: b.sum(), mesh=mesh4, in_specs=P("d"), out_specs=P(), check_vma=False))
    good = jax.jit(jax.shard_map(lambda b: lax.psum(b.sum(), "d"), mesh=mesh4, in_specs=P("d"), out_specs=P()))
    out["bad_value"] = summary(probes.sharding(bad(xs), expression="bad(xs)"))
    out["bad_call"] = summary(probes.sharding_of_call(bad, (xs,), call_text="bad(xs)"))
    out["good_call"] = summary(probes.sharding_of_call(good, (xs,), call_text="good(xs)"))
    out["no_check"] = summary(probes.sharding(bad(xs), expression="bad(xs)", check_replicas=False))

    # Section 8.2: compiled shardings and intermediates of a jitted call.
    x2 = jax.device_put(jnp.arange(16.0).reshape(8, 2), NamedSharding(mesh4, P("d")))
    seen = {}

    @jax.jit
    def f(a):
        b = jnp.sin(a) * 2
        jax.debug.inspect_array_sharding(b, callback=lambda s: seen.__setitem__("inspect", str(s.spec)))
        return b.sum(axis=1)

    out["call"] = summary(probes.sharding_of_call(f, (x2,), call_text="f(x2)", intermediates=True))
    out["call_seen"] = seen
    auto = jax.make_mesh((2, 2), ("a", "b"), devices=devices[:4], axis_types=(AxisType.Auto,) * 2)
    xa = jax.device_put(jnp.ones((8, 8)), NamedSharding(auto, P("a", "b")))
    w = jax.device_put(jnp.ones((8, 4)), NamedSharding(auto, P("b", None)))
    w_elsewhere = jax.device_put(jnp.ones((8, 4)), NamedSharding(auto, P(None, "a")))

    @jax.jit
    def g(x, w):
        h = x @ w
        return jnp.tanh(h).T

    out["auto_call"] = summary(probes.sharding_of_call(g, (xa, w), call_text="g(xa, w)", intermediates=True))
    out["pytree"] = summary(probes.sharding({"w": xa, "b": jnp.ones(2), "n": 3}, expression="params"))
    sds = jax.ShapeDtypeStruct((8, 4), jnp.float32, sharding=NamedSharding(mesh22, P("data")))
    out["shape_dtype_struct"] = summary(probes.sharding(sds, expression="sds"))

    def h(x, w):
        return x @ w

    # An uncommitted argument (made on the default device) is moved to the compiled layout on each call.
    h_placed = jax.jit(h, in_shardings=(NamedSharding(auto, P("a", "b")), NamedSharding(auto, P("b", None))))
    out["resharded_call"] = summary(
        probes.sharding_of_call(h_placed, (xa, jnp.ones((8, 4))), call_text="h_placed(xa, jnp.ones((8, 4)))")
    )
    # A committed argument laid out differently is an error of JAX's: reported, not hidden.
    out["mismatch_call"] = summary(
        probes.sharding_of_call(h_placed, (xa, w_elsewhere), call_text="h_placed(xa, w_elsewhere)")
    )

    # A requested sharding the compiler cannot honour: 17 rows over 8 devices come out replicated.
    mesh8 = jax.make_mesh((8,), ("data",), devices=devices[:8], axis_types=(AxisType.Auto,))

    def constrained(x):
        y = jnp.sin(x)
        y = jax.lax.with_sharding_constraint(y, NamedSharding(mesh8, P("data")))
        return y * 2

    out["uneven_constraint"] = summary(
        probes.sharding_of_call(jax.jit(constrained), (jnp.ones((17, 4)),), call_text="constrained(x17)")
    )
    out["even_constraint"] = summary(
        probes.sharding_of_call(jax.jit(constrained), (jnp.ones((16, 4)),), call_text="constrained(x16)")
    )

    # shard_map local views: per-device prints
    def local_sum(b):
        jax.debug.print("local block {b}", b=b)
        return b.sum()

    with probes.per_device() as per_device_report:
        jax.jit(jax.shard_map(local_sum, mesh=mesh4, in_specs=P("d"), out_specs=P(), check_vma=False))(xs)
    out["per_device"] = {
        "by_device": {str(k): v for k, v in per_device_report.by_device().items()},
        "summary": per_device_report.summary,
        "text": static_bundle(per_device_report.document())["text/plain"],
        "print_restored": jax.debug.print.__name__,
    }

    # Without rich, JAX's own drawing fails; ours does not need it.
    try:
        jax.debug.visualize_array_sharding(jax.device_put(A, NamedSharding(mesh22, P("data", "model"))))
        out["visualize"] = "ok"
    except Exception as error:
        out["visualize"] = f"{type(error).__name__}: {error}"
    import contextlib
    import io

    from jaxmagic.render.terminal import print_rich

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        out["print_rich"] = print_rich(probes.sharding(xs).document())
    out["rich_output"] = buffer.getvalue()
    out["rich_blocked"] = sys.modules.get("rich", "absent") is None
    return out


if __name__ == "__main__":
    print(json.dumps(main()))
