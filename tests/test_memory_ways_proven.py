"""No way down without its proof (issue 63.1): every offered way is a program compiled as written, its peak
read as the original's is and never below what XLA's own ``memory_analysis()`` says that program reserves.

The program is issue 63.1's, the shape of real threads: a Gaussian kernel against all points
(``exp(-(pts[:, None] - pts[None, :]) ** 2) @ w``; ott-jax/ott#9, a point cloud's kernel applied to a vector,
ran out on a 14 GiB GPU), pairwise distances of two sets (jax-ml/jax#1918: ``(v1[:, None, :] -
v2[None, :, :]) ** 2`` summed, 52 GB for 3000 x 3000 x 768), a k-nearest-neighbour search over a distance
matrix (ml-explore/mlx#2198: "batched with say batches of 1000 rows"). Written here in our own minimal code;
compiled with ``memory_analysis()`` (nothing of 64 GiB is allocated), and the block programs run for
equality only on a few points.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

from jaxmagic.probes._memory import memory_of_call  # noqa: E402
from jaxmagic.probes._memory.row_blocks import block_program, row_splits  # noqa: E402

BIG = 2**17


@jax.jit
def kern(pts, w):
    k = jnp.exp(-((pts[:, None] - pts[None, :]) ** 2))
    return k @ w


def _specs(n: int = BIG, columns: int = 4):
    return jax.ShapeDtypeStruct((n,), jnp.float32), jax.ShapeDtypeStruct((n, columns), jnp.float32)


def _reserved(compiled) -> int:
    stats = compiled.memory_analysis()
    return (
        stats.argument_size_in_bytes + stats.output_size_in_bytes + stats.temp_size_in_bytes - stats.alias_size_in_bytes
    )


@pytest.fixture(scope="module")
def kernel_report():
    return memory_of_call(kern, _specs(), call="kern(pts, w)")


def test_donation_is_not_offered_where_it_cannot_remove_the_temporary(kernel_report):
    """Donated or not, XLA needs the 64 GiB temporary: donation frees at most `w`'s own memory."""
    donated = jax.jit(kern.__wrapped__, donate_argnums=(1,)).lower(*_specs()).compile()
    assert donated.memory_analysis().temp_size_in_bytes >= BIG * BIG * 4  # the premise, from XLA itself
    [program] = kernel_report.programs
    assert program.peak_bytes >= _reserved(kern.lower(*_specs()).compile())
    [donate] = [w for w in program.ways_down if w.kind == "donate"]
    assert donate not in program.offered and "frees at most" in donate.problem
    assert "donate" not in kernel_report.fix


def test_the_kernel_is_offered_its_query_rows_in_blocks_against_all_points(kernel_report):
    """Not "half of `pts` and `w`": the rows of the result come from `pts[:, None]` alone; `pts[None, :]` and
    `w` are read whole by every block."""
    [program] = kernel_report.programs
    best = program.offered[0]
    assert best.kind == "rows" and best.peak_after < program.peak_bytes / 4
    assert "kern_rows(q, pts, w)" in best.code and "pts.reshape(" in best.code and "`pts[:, None]`" in best.code
    assert "against all of `pts`" in best.title and "w`'s" not in best.title
    assert kernel_report.fix.startswith("`kern` on ") and "tried by compiling for cpu" in kernel_report.fix
    # the offered program, compiled independently: the claim is never below what XLA reserves for it
    traced = kern.trace(*_specs())
    [split] = row_splits(traced.jaxpr)[0]
    block = int(re.search(r"reshape\(\d+, (\d+)\)", best.code).group(1))
    compiled = jax.jit(block_program(traced.jaxpr, split, block)).lower(*_specs()).compile()
    assert best.peak_after >= _reserved(compiled)


def _same_results(fn, *args, block):
    traced = jax.jit(fn).trace(*args)
    splits, refused = row_splits(traced.jaxpr)
    assert splits, refused
    for split in splits:
        got = jax.jit(block_program(traced.jaxpr, split, block))(*args)
        want = jax.tree.leaves(fn(*args))
        for g, w in zip(got, want):
            np.testing.assert_allclose(np.asarray(g), np.asarray(w), rtol=1e-5, atol=1e-6)
    return splits


def test_block_programs_compute_what_the_program_computes():
    rng = np.random.default_rng(0)
    pts, w = rng.random(64, dtype=np.float32), rng.random((64, 3), dtype=np.float32)
    [split] = _same_results(kern.__wrapped__, pts, w, block=16)
    assert (split.input, split.whole, [u.text for u in split.uses]) == (0, False, ["pts[:, None]"])

    def distances(v1, v2):  # jax-ml/jax#1918: every pair of two sets
        return ((v1[:, None, :] - v2[None, :, :]) ** 2).sum(-1)

    v1, v2 = rng.random((32, 5), dtype=np.float32), rng.random((24, 5), dtype=np.float32)
    splits = _same_results(distances, v1, v2, block=8)
    assert {(s.input, s.whole, s.out_axes) for s in splits} == {(0, True, (0,)), (1, True, (1,))}

    def knn(x):  # ml-explore/mlx#2198: the 3 nearest of every point, from the distance matrix
        d = jnp.abs(x[:, None] - x[None, :])
        return jnp.argsort(d, axis=1)[:, :3]

    [split] = _same_results(knn, rng.random(48, dtype=np.float32), block=12)
    assert [u.text for u in split.uses] == ["x[:, None]"]

    def sorted_down_columns(x):  # the sort runs down axis 0: the blocks are of the columns, x[None, :]
        return jnp.sort(jnp.abs(x[:, None] - x[None, :]), axis=0)[1]

    [split] = _same_results(sorted_down_columns, rng.random(40, dtype=np.float32), block=10)
    assert [u.text for u in split.uses] == ["x[None, :]"]


def test_a_program_whose_rows_mix_is_refused_and_nothing_is_offered_for_it():
    """The kernel sorted down its rows, then applied: every result reads every row and every column - no
    block of rows is the same computation, so no rows way is offered (and the reason is said)."""

    def mixed(pts, w):
        k = jnp.sort(-((pts[:, None] - pts[None, :]) ** 2), axis=0)
        return k @ w

    assert jax.jit(mixed).lower(*_specs()).compile().memory_analysis().temp_size_in_bytes >= BIG * BIG * 4
    splits, refused = row_splits(jax.jit(mixed).trace(*_specs(64)).jaxpr)
    assert splits == [] and any("`sort`" in r for r in refused) and any("`dot_general`" in r for r in refused)
    [program] = memory_of_call(jax.jit(mixed), _specs(), call="mixed(pts, w)").programs
    [rows] = [w for w in program.ways_down if w.kind == "rows"]
    assert rows.peak_after is None and rows.problem and rows not in program.offered
