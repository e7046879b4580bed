"""Overhead of ``%jax_watch`` on later cells: each cell watched against the same cell unwatched.

Cells, all through ``shell.run_cell``, taking turns; the watch is switched on
(``%jax_watch``) or off before each timed cell, in an untimed cell:

* ``loop``: 20,000 calls of a small jitted step (compiled before). Goal <= 1.05x;
* ``section9``: the chapter's section 9 training loop, bugs fixed
  (``demo_notebooks/section9_script.py``, as bench_doctor). Goal <= 1.05x;
* ``nojax``: a cell without JAX in it (``sum(range(1000))``, JAX imported): the
  watch's own cost per cell - switching its probes on and off - in the CPU time
  of the cell's thread (steady under load; wall-clock there moved 2x between
  runs). Goal <= 0.4 ms more than unwatched (issue 56).

On loops of very short steps the watch looks at a share of the calls only
(``jaxmagic/_jax/call_sampling.py``); the rows say how many it looked at. What
remains per call is JAX calling the watch's hook and counting the call.

Then a soak (``soak.py``): 2,000 small JAX cells watched and 2,000 unwatched, in
chunks of 100: the late/early time ratio of the watched cells against the
unwatched cells' own (goal <= 1.1x), and the RSS growth per cell more than
theirs (goal <= 2 KiB).

The MLP rows (``mlp_rows``; issue 60.3, for the accelerator): a 300-step training
loop of a plain-JAX MLP (784-512-512-10, batch 128, SGD, jitted step; params
donated or not; or with dropout, a new key split per step - the keys area counts
every draw and compares the keys of a line's first 40 and then of a share, read in batches of 128 where looks
are deferred), bare against ``%jax_watch``, by wall-clock (on a TPU the watch's
looks once waited for each step: 2.45-2.49x); then what one NaN look costs on
that step, looking at every call (no sampling), on the host (the CPU's way, the
TPU's before) and on the device (the accelerator's way), in microseconds beside
an empty post hook (the floor); and the verdict program's first compilation.
The donating step's look is measured with and without
its copy of the results (made only when the next call will be looked at). Only
these rows, e.g. on the TPU (``--deferred``: the accelerator's way forced on the
CPU, for an estimate):

    python benchmarks/bench_watch.py mlp [--steps 300] [--reps 9] [--deferred] [--parts]

``--parts``: where the watch's time on those loops goes instead (``parts_rows``).
"""

from __future__ import annotations

import sys
import textwrap
import time
from pathlib import Path

from harness import (
    PER_CALL_SETUP,
    Row,
    alternate_by_both_clocks,
    make_shell,
    median,
    per_call_benchmark,
    quartiles,
    run_cell,
    timed,
    with_empty_hook,
)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "demo_notebooks"))  # the section 9 script
import section9_script

from jaxmagic.report.watch_areas import AREAS

REPETITIONS = 7
CALLS = 20_000
STEPS = 200

SETUP = (
    section9_script.source(bugs_fixed=3)
    + "train_step = make_train_step_v2(loss_v1)\n"
    + "small_step = jax.jit(lambda s, x: s * 0.999 + x)\nsmall_x = jnp.ones(8)\n"
    + "from jaxmagic.probes import Watch\n_watch = Watch()\n"
)
CELLS = {
    "loop": f"s = jnp.zeros(8)\nfor _ in range({CALLS}):\n    s = small_step(s, small_x)\ns.block_until_ready()",
    "section9": f"params, losses = train_v3(train_step, params0, X_tr, Y_tr, {STEPS})",
    "nojax": "total = sum(range(1000))",
}


def instruction_cells(steps: int) -> dict[str, str]:
    """For ``benchmarks/instructions.py``: the small-step loop unwatched, then watched through the
    plain-Python ``Watch`` (what ``%jax_watch`` does around each cell), ``steps`` calls."""
    loop = f"s = jnp.zeros(8)\nfor _ in range({steps}):\n    s = small_step(s, small_x)\ns.block_until_ready()"
    watched = (
        "_watch.begin_cell('In [0]')\ntry:\n" + textwrap.indent(loop, "    ") + "\nfinally:\n    _watch.end_cell()"
    )
    return {"plain": loop, "watched": watched}


def ratio_rows() -> list[Row]:
    shell = make_shell()
    run_cell(shell, SETUP)
    run_cell(shell, "%jax_watch -o _watch_log")
    for cell in CELLS.values():  # warm-up, watched and not
        run_cell(shell, cell)
    run_cell(shell, "%jax_watch off")
    for cell in CELLS.values():
        run_cell(shell, cell)
    clean = shell.user_ns["_watch_log"]

    times: dict[str, list[float]] = {f"{name}_{state}": [] for name in CELLS for state in ("plain", "watched")}
    order = list(times)
    for rep in range(REPETITIONS):
        for name in order[rep % len(order) :] + order[: rep % len(order)]:
            cell, state = name.rsplit("_", 1)
            run_cell(shell, "%jax_watch" if state == "watched" else "%jax_watch off")
            clock = time.thread_time if cell == "nojax" else time.perf_counter  # nojax: the watch's own Python
            times[name].append(timed(lambda c=CELLS[cell]: run_cell(shell, c), clock))
    run_cell(shell, "%jax_watch off")
    looked = {}
    for cell in ("loop", "section9"):  # how many calls the watch looked at, in one more watched run
        run_cell(shell, "%jax_watch -o _coverage")
        run_cell(shell, CELLS[cell])
        run_cell(shell, "%jax_watch off")
        log = shell.user_ns["_coverage"]
        looked[cell] = f"looked at {log.calls_looked_at:,} of {log.calls_counted:,} calls"

    def ratios(cell: str) -> list[float]:
        return [w / p for w, p in zip(times[f"{cell}_watched"], times[f"{cell}_plain"])]

    rows = []
    for cell, what in (("loop", f"{CALLS:,} calls of a small jitted step"), ("section9", f"{STEPS} steps of §9")):
        r = ratios(cell)
        rows.append(
            Row(
                f"watched vs unwatched: {what}",
                median(times[f"{cell}_watched"]),
                median(times[f"{cell}_plain"]),
                goal=1.05,
                values=r,
                note=f"{REPETITIONS} reps; middle half of the ratios: {quartiles(r, 3)}; {looked[cell]}",
            )
        )
    extra = [w - p for w, p in zip(times["nojax_watched"], times["nojax_plain"])]
    rows.append(
        Row(
            "a watched cell without JAX: the thread's CPU time more per cell",
            median(times["nojax_watched"]),
            median(times["nojax_plain"]),
            compare="difference",
            goal=0.0004,
            values=extra,
            note=f"the watch switched on and off around a cell of plain Python; min {min(extra) * 1e3:+.3f} ms",
        )
    )
    rows.append(
        Row("the clean cells give no finding", compare="check", goal=True, value=not clean.findings, note=clean.summary)
    )
    rows += soak_rows()
    return rows


def soak_rows(cells: int = 2000) -> list[Row]:
    import soak

    result = soak.soak("jax_watch", cells)
    watched, plain = result["magic"], result["plain"]
    return [
        Row(
            f"{cells:,} watched cells: late/early time, against unwatched cells' own",
            compare="ratio",
            goal=1.1,
            value=watched[2] / plain[2],
            note=f"late/early {watched[2]:.2f}x watched, {plain[2]:.2f}x unwatched "
            f"({watched[0]:.2f} -> {watched[1]:.2f} ms vs {plain[0]:.2f} -> {plain[1]:.2f} ms a cell)",
        ),
        Row(
            f"{cells:,} watched cells: RSS growth per cell within 2 KiB of unwatched",
            compare="check",
            goal=True,
            value=(watched[3] - plain[3]) / 1024 <= 2.0,
            note=f"{watched[3] / 1024:.1f} KiB watched, {plain[3] / 1024:.1f} KiB unwatched per cell",
        ),
    ]


MLP_STEPS, MLP_REPS = 300, 9
MLP_SETUP = """
import jax, jax.numpy as jnp
from jaxmagic.probes import Watch as _BenchWatch
import jaxmagic.probes._watch.session as _bench_session
from jaxmagic._jax.call_sampling import CallSampler as _BenchSampler
from jaxmagic._jax import call_sampling as _bench_sampling
_bench_next_call_due = _BenchSampler.next_call_due
from jaxmagic.probes._keys.draws import _DrawFollower as _BenchFollower
_bench_timed_follow = _BenchFollower.timed_follow

def _mlp_init(key, sizes=(784, 512, 512, 10)):
    params = []
    for m, n in zip(sizes[:-1], sizes[1:]):
        key, sub = jax.random.split(key)
        params.append((jax.random.normal(sub, (m, n)) * (2.0 / m) ** 0.5, jnp.zeros(n)))
    return params

def _mlp_loss(params, x, y):
    for w, b in params[:-1]:
        x = jax.nn.relu(x @ w + b)
    w, b = params[-1]
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(x @ w + b) * y, axis=-1))

def _mlp_sgd(params, x, y):
    loss, grads = jax.value_and_grad(_mlp_loss)(params, x, y)
    return jax.tree.map(lambda p, g: p - 0.05 * g, params, grads), loss

def _mlp_loss_dropout(params, x, y, key):
    for w, b in params[:-1]:
        key, sub = jax.random.split(key)
        x = jax.nn.relu(x @ w + b) * jax.random.bernoulli(sub, 0.9, (x.shape[0], w.shape[1])) / 0.9
    w, b = params[-1]
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(x @ w + b) * y, axis=-1))

def _mlp_sgd_dropout(params, x, y, key):
    loss, grads = jax.value_and_grad(_mlp_loss_dropout)(params, x, y, key)
    return jax.tree.map(lambda p, g: p - 0.05 * g, params, grads), loss

mlp_step = jax.jit(_mlp_sgd)
mlp_step_donated = jax.jit(_mlp_sgd, donate_argnums=(0,))
mlp_step_dropout = jax.jit(_mlp_sgd_dropout)
_k1, _k2 = jax.random.split(jax.random.key(0))
mlp_x = jax.random.normal(_k1, (128, 784))
mlp_y = jax.nn.one_hot(jax.random.randint(_k2, (128,), 0, 10), 10)
mlp_params0 = _mlp_init(jax.random.key(1))
"""


def mlp_loop(steps: int, step: str = "mlp_step") -> str:
    """A cell: ``steps`` training steps from fresh params, waited for at the end (as a user reads the loss)."""
    copy = "jax.tree.map(jnp.copy, mlp_params0)"  # a donating step deletes what it is given
    call = f"p, loss = {step}(p, mlp_x, mlp_y)"
    if step == "mlp_step_dropout":  # a new key each step, split from the last (the keys area reads each)
        copy += ", jax.random.key(2)"
        call = "key, sub = jax.random.split(key)\n    p, loss = mlp_step_dropout(p, mlp_x, mlp_y, sub)"
    target = "p, key" if step == "mlp_step_dropout" else "p"
    return f"{target} = {copy}\nfor _ in range({steps}):\n    {call}\nmlp_loss_last = float(loss)"


def looking_at_every_call(body: str, on_device: bool, copies: bool = True) -> str:
    """``body`` under the watch's NaN area alone, every call looked at (no sampling), its verdicts on the
    device or on the host: what one look costs. ``copies=False``: a donating call's results are never copied
    for the next call's replay (what a look costs without its copy program)."""
    due = "" if copies else "_BenchSampler.next_call_due = lambda self, number: False\n"
    return (
        f"_bench_session.CallSampler = lambda: _BenchSampler(share=None)\n{due}"
        f"_bench_was_deferred = _bench_sampling.LOOKS_DEFERRED\n_bench_sampling.LOOKS_DEFERRED = {on_device}\n"
        "_bw = _BenchWatch(only=['NaN'])\n_bw.begin_cell('In [0]')\ntry:\n"
        + textwrap.indent(body, "    ")
        + "\nfinally:\n    _bw.end_cell()\n    _bench_session.CallSampler = _BenchSampler\n"
        "    _BenchSampler.next_call_due = _bench_next_call_due\n"
        "    _bench_sampling.LOOKS_DEFERRED = _bench_was_deferred"
    )


def mlp_rows(steps: int = MLP_STEPS, repetitions: int = MLP_REPS) -> list[Row]:
    """The MLP rows of the module docstring (wall-clock: what a user waits, waits for the device included)."""
    shell = make_shell()
    run_cell(shell, PER_CALL_SETUP)  # the floor's empty hook
    run_cell(shell, MLP_SETUP)
    compile_row = verdict_compile_row(shell)
    rows = []
    cases = {
        "mlp_step": "params not donated",
        "mlp_step_donated": "donated params",
        "mlp_step_dropout": "a new dropout key per step",
    }
    for step, what in cases.items():
        cells = {"bare": mlp_loop(steps, step), "watched": mlp_loop(steps, step)}
        run_cell(shell, "%jax_watch -o _mlp_log")
        run_cell(shell, cells["watched"])  # warm-up: compiled, the verdict program too
        run_cell(shell, "%jax_watch off")
        run_cell(shell, cells["bare"])
        warm_up = shell.user_ns["_mlp_log"]  # the first watched run compiled: its share allowed more looks
        bare, watched, losses, looks = [], [], set(), []
        for rep in range(repetitions):
            for state in ("bare", "watched") if rep % 2 == 0 else ("watched", "bare"):
                run_cell(shell, "%jax_watch -o _mlp_log" if state == "watched" else "%jax_watch off")
                (watched if state == "watched" else bare).append(timed(lambda c=cells[state]: run_cell(shell, c)))
                losses.add(shell.user_ns["mlp_loss_last"])
                if state == "watched":
                    looks.append(shell.user_ns["_mlp_log"].calls_looked_at)
        run_cell(shell, "%jax_watch off")
        log = shell.user_ns["_mlp_log"]
        where = where_the_time_goes(shell, cells["watched"])
        r = [w / b for w, b in zip(watched, bare)]
        rows.append(
            Row(
                f"watched vs bare: {steps}-step MLP training loop ({what})",
                median(watched),
                median(bare),
                goal=1.05,
                values=r,
                note=f"{repetitions} reps, wall-clock; middle half {quartiles(r, 3) if len(r) > 1 else '-'}; "
                f"{min(looks)}-{max(looks)} of the {log.calls_counted} calls looked at in the timed runs (the "
                f"warm-up run, which compiled, {warm_up.calls_looked_at}: its budget is 1% of a longer cell)",
            )
        )
        rows.append(
            Row(f"  where the watched loop's time goes ({what}), one more watched run", compare="check", note=where)
        )
        rows.append(
            Row(
                f"the watched MLP loop ({what}) computes the same loss and finds nothing",
                compare="check",
                goal=True,
                value=len(losses) == 1 and not log.findings,
                note=f"loss {sorted(losses)}; {len(log.findings)} finding(s)",
            )
        )
    return rows + per_look_rows(shell, max(steps // 3, 50), repetitions) + [eager_key_row(shell, steps), compile_row]


def parts_rows(steps: int = MLP_STEPS, repetitions: int = MLP_REPS) -> list[Row]:
    """Where the watch's time on the MLP loop goes, by wall-clock against the bare loop in the same run: its
    cost per cell (an empty cell, watched against bare), the loop with the looks cut to the first call and the
    last one (the hooks and the cell), and the loop as watched (the looks the rest); beside them the floor (an
    empty post hook: JAX's own cost of a Python hook, e.g. on a donating call), each area alone with the looks
    cut, and for the dropout loop the keys area with no eager draw followed (its own machinery)."""
    shell = make_shell()
    run_cell(shell, PER_CALL_SETUP)  # the floor's empty hook
    run_cell(shell, MLP_SETUP)
    no_looks = "_bench_session.CallSampler = lambda: _BenchSampler(share=0.0, credit=0.0, first_calls=0)"
    restored = "_bench_session.CallSampler = _BenchSampler\n_BenchFollower.timed_follow = _bench_timed_follow"
    rows = []
    for step in ("mlp_step", "mlp_step_donated", "mlp_step_dropout"):
        loop = mlp_loop(steps, step)
        # (the untimed cell before it, the timed cell): the watch is switched on in the untimed one, after off
        cells = {
            "bare": ("pass", loop),
            "watched": ("%jax_watch", loop),
            "first and last looks": (f"%jax_watch\n{no_looks}", loop),
            "empty hook (the floor)": ("pass", with_empty_hook(loop)),
            "empty bare": ("pass", "pass"),
            "empty watched": ("%jax_watch", "pass"),
        }
        for area in AREAS:  # each area alone, its looks cut as above: which one costs what
            cells[f"{area} alone, first and last looks"] = (f"%jax_watch --only '{area}'\n{no_looks}", loop)
        if step == "mlp_step_dropout":  # the keys area's own machinery: its eager draws not followed at all
            no_follow = "_BenchFollower.timed_follow = lambda *args: None"
            cells["random keys alone, no draw followed"] = (
                f"%jax_watch --only 'random keys'\n{no_looks}\n{no_follow}",
                loop,
            )
        wall: dict[str, list[float]] = {name: [] for name in cells}
        order = list(cells)
        for rep in range(repetitions + 1):  # the first round warms up (compiles), untimed
            for name in order[rep % len(order) :] + order[: rep % len(order)]:
                run_cell(shell, "%jax_watch off")
                run_cell(shell, f"{restored}\n{cells[name][0]}")
                took = timed(lambda c=cells[name][1]: run_cell(shell, c))
                if rep:
                    wall[name].append(took)
        run_cell(shell, f"{restored}\n%jax_watch off")
        bare = median(wall["bare"])
        per_cell = [w - b for w, b in zip(wall["empty watched"], wall["empty bare"])]
        for name in [n for n in cells if n not in ("bare", "empty bare", "empty watched")]:
            added = [w - b for w, b in zip(wall[name], wall["bare"])]
            rows.append(
                Row(
                    f"{step}: {name} - bare, {steps} steps",
                    compare="difference",
                    values=added,
                    note=f"bare {bare * 1e3:.1f} ms; {median(added) / bare * 100:.1f}% of it; {repetitions} reps",
                )
            )
        rows.append(Row(f"{step}: an empty cell watched - bare", compare="difference", values=per_cell))
    return rows


def where_the_time_goes(shell, cell: str) -> str:
    """One more watched run of ``cell``, instrumented (not timed): the calls looked at, whether looks were
    deferred, and the reads that waited for the device - a NaN verdict read before it was ready (over the
    waiting limit while the loop ran, or at the cell's end) and a batch of keys' data read before it was
    there - with the programs of jaxmagic's own it dispatched: copies of a donating call's arguments or
    results, key batches."""
    from jaxmagic._jax import call_sampling, own_programs  # deferred: the bench's instruments, for this run only
    from jaxmagic.probes._keys import key_reads
    from jaxmagic.probes._nans import pending_looks, watch
    from jaxmagic.probes._watch import session

    counts = dict.fromkeys(("verdicts", "verdicts at the end", "verdicts in all", "keys", "keys in all"), 0)
    counts.update(dict.fromkeys(("batches", "batches waited", "copies"), 0))
    samplers: list = []
    at_end = [False]
    originals = (
        pending_looks.PendingLook.kinds,
        watch.NanWatch.flush,
        key_reads._finish,
        key_reads.Batch.finish,
        own_programs.copied,
        session.CallSampler,
    )
    kinds, flush, finish, batch_finish, copied, sampler = originals

    def counted_kinds(look):
        counts["verdicts in all"] += 1
        if not look.ready():
            counts["verdicts at the end" if at_end[0] else "verdicts"] += 1
        return kinds(look)

    def flagged_flush(nan_watch):
        at_end[0] = True
        return flush(nan_watch)

    def counted_finish(arrays, then):  # a key read on the host at once (the CPU's way)
        counts["keys in all"] += 1
        counts["keys"] += not all(a.is_ready() for a in arrays if hasattr(a, "is_ready"))
        return finish(arrays, then)

    def counted_batch(batch):  # a batch of keys' data read (the accelerator's way)
        counts["batches"] += 1
        counts["keys in all"] += len(batch.reads)
        counts["batches waited"] += not batch.ready()
        return batch_finish(batch)

    def counted_copies(leaves):
        counts["copies"] += 1
        return copied(leaves)

    def kept_sampler():
        samplers.append(sampler())
        return samplers[-1]

    pending_looks.PendingLook.kinds, watch.NanWatch.flush = counted_kinds, flagged_flush
    key_reads._finish, key_reads.Batch.finish, own_programs.copied = counted_finish, counted_batch, counted_copies
    session.CallSampler = kept_sampler
    try:
        run_cell(shell, "%jax_watch -o _where_log")
        run_cell(shell, cell)
        run_cell(shell, "%jax_watch off")
    finally:
        pending_looks.PendingLook.kinds, watch.NanWatch.flush = kinds, flush
        key_reads._finish, key_reads.Batch.finish, own_programs.copied = finish, batch_finish, copied
        session.CallSampler = sampler
    log, used = shell.user_ns["_where_log"], samplers[-1] if samplers else None
    deferred = "deferred" if used is not None and used.deferred else "read on the host"
    first = f"first {used.first_calls} calls, credit {used.credit * 1e3:g} ms" if used is not None else ""
    return (
        f"looks {deferred} ({first}, share {call_sampling.SHARE:.0%}): {log.calls_looked_at} of {log.calls_counted} "
        f"calls looked at; NaN verdicts read before ready: {counts['verdicts']} while the loop ran, "
        f"{counts['verdicts at the end']} at the cell's end (of {counts['verdicts in all']} read); copy programs of "
        f"a donating call's arguments or results: {counts['copies']}; keys' data read: {counts['keys in all']} "
        f"({counts['keys']} read at once waited; {counts['batches']} batches of up to {key_reads.BATCH}, "
        f"{counts['batches waited']} read before ready)"
    )


def eager_key_row(shell, steps: int) -> Row:
    """What the keys area adds to each eager ``jax.random.split`` (it counts every one, compares a share): a loop of
    ``steps`` splits, watched (keys only) against bare, thread CPU and wall-clock per split."""
    body = (
        f"_k = jax.random.key(3)\nfor _ in range({steps}):\n    _k, _sub = jax.random.split(_k)\n_k.block_until_ready()"
    )
    cells = {"bare": body, "watched": watched_keys_only(body)}
    for cell in cells.values():
        run_cell(shell, cell)
    cpu, wall = alternate_by_both_clocks(shell, cells, 9)
    added = [(w - b) / steps for w, b in zip(wall["watched"], wall["bare"])]
    added_cpu = [(c - b) / steps for c, b in zip(cpu["watched"], cpu["bare"])]
    return Row(
        "an eager jax.random.split under the keys area (each counted; keys of the first 40, then of a share, compared): "
        "wall-clock per split over bare",
        compare="difference",
        values=added,
        note=f"thread CPU {median(added_cpu) * 1e6:+.1f} us; a split {median(wall['bare']) / steps * 1e6:.0f} us "
        f"wall bare; {steps} splits, 9 reps",
    )


def watched_keys_only(body: str) -> str:
    """``body`` under the watch's keys area alone (``Watch(only=['random keys'])``)."""
    return (
        "_bkw = _BenchWatch(only=['random keys'])\n_bkw.begin_cell('In [0]')\ntry:\n"
        + textwrap.indent(body, "    ")
        + "\nfinally:\n    _bkw.end_cell()"
    )


def per_look_rows(shell, steps: int, repetitions: int) -> list[Row]:
    """Microseconds one NaN look adds to the MLP step, on the host and on the device, beside the floor; and on
    the donating step, a look that copies the call's results (for the next call's replay) and one that does not."""
    body, donated = mlp_loop(steps), mlp_loop(steps, "mlp_step_donated")
    cells = {
        "plain": body,
        "floor": with_empty_hook(body),
        "host": looking_at_every_call(body, on_device=False),
        "device": looking_at_every_call(body, on_device=True),
        "donated floor": with_empty_hook(donated),
        "donated copies": looking_at_every_call(donated, on_device=True),
        "donated no copies": looking_at_every_call(donated, on_device=True, copies=False),
    }
    for cell in cells.values():  # compiled under every variant, verdict program included
        run_cell(shell, cell)
    cpu, wall = alternate_by_both_clocks(shell, cells, repetitions)
    step_us = median(wall["plain"]) / steps * 1e6
    rows = []
    for name, label, baseline in (
        ("floor", "MLP step + an empty post hook (the floor)", "plain"),
        ("host", "MLP step + a NaN look at every call, read on the host", "floor"),
        ("device", "MLP step + a NaN look at every call, verdict on the device", "floor"),
        (
            "donated copies",
            "donating MLP step + a look at every call copying its results, on the device",
            "donated floor",
        ),
        ("donated no copies", "donating MLP step + a look at every call, no copy, on the device", "donated floor"),
    ):
        added = [(w - b) / steps for w, b in zip(wall[name], wall[baseline])]
        added_cpu = [(c - b) / steps for c, b in zip(cpu[name], cpu[baseline])]
        rows.append(
            Row(
                f"{label}: wall-clock per call over {'the plain loop' if baseline == 'plain' else 'the floor'}",
                compare="difference",
                values=added,
                note=f"thread CPU {median(added_cpu) * 1e6:+.1f} us ({min(added_cpu) * 1e6:+.1f} to "
                f"{max(added_cpu) * 1e6:+.1f}); step {step_us:.0f} us wall; {steps} calls, {repetitions} reps",
            )
        )
    return rows


def verdict_compile_row(shell) -> Row:
    """How long the verdict program for the MLP step's results takes to compile and run the first time."""
    run_cell(
        shell,
        "from jaxmagic._jax import finite_flags as _ff\nimport time as _t\n"
        "_leaves = [l for l in jax.tree_util.tree_leaves(mlp_step(mlp_params0, mlp_x, mlp_y))]\n"
        "_sig = _ff.signature_of(_leaves)\n_first = _t.perf_counter()\n"
        "_ff.read_codes(_ff.nonfinite_codes(_leaves, _sig))\n_verdict_first = _t.perf_counter() - _first\n"
        "_first = _t.perf_counter()\n_ff.read_codes(_ff.nonfinite_codes(_leaves, _sig))\n"
        "_verdict_again = _t.perf_counter() - _first",
    )
    first, again = shell.user_ns["_verdict_first"], shell.user_ns["_verdict_again"]
    return Row(
        "the verdict program over the MLP step's results: first use (compiles) and a later one",
        first,
        again,
        compare="difference",
        note="once per signature of results in the process (a function's second call compiles it; its first is "
        "read on the host)",
    )


def run() -> list[Row]:
    """The ratios above, the MLP rows, then the microseconds added per call (``harness.per_call_rows``)."""
    return ratio_rows() + mlp_rows() + per_call_benchmark("watch")


def _option(name: str, default: int) -> int:
    return int(sys.argv[sys.argv.index(name) + 1]) if name in sys.argv else default


if __name__ == "__main__":
    from harness import table

    if "mlp" in sys.argv[1:]:
        if "--deferred" in sys.argv:  # the accelerator's way on the CPU (LOOKS_DEFERRED), for an estimate
            from jaxmagic._jax import call_sampling

            call_sampling.LOOKS_DEFERRED = True
        rows = parts_rows if "--parts" in sys.argv else mlp_rows
        print(table(rows(_option("--steps", MLP_STEPS), _option("--reps", MLP_REPS))))
    else:
        print(table(run()))
