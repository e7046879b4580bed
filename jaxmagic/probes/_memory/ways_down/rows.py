"""Blocks of rows: the results a block of an input's rows at a time, where the traced program says that is the
same computation (``row_blocks``), compiled at block sizes that divide the rows - tried when the peak exceeds
what the device can give or the compiler refused the program."""

from __future__ import annotations

import jax

from jaxmagic.probes._memory.program import CompiledCall, program_memory
from jaxmagic.probes._memory.records import FITS_SHARE, ROWS, ProgramMemory, WayDown
from jaxmagic.probes._memory.row_blocks import RowSplit, block_program, row_splits
from jaxmagic.probes._memory.ways_down.naming import argument_texts, flat_names, parameter_names

ROW_TRIES = 3  # block sizes tried for the results a block of rows at a time


def row_blocks(call: CompiledCall, program: ProgramMemory, available: int | None) -> list[WayDown]:
    """The results a block of an input's rows at a time, where the traced program says that is the same
    computation (``row_blocks``): compiled at block sizes that divide the rows, smallest first that fits."""
    splits, refused = row_splits(call.traced.jaxpr)
    if not splits:
        why = refused[0] if refused else "no input's rows carry the rows of every result"
        return [WayDown(ROWS, "the results a block of rows at a time", "", program.peak_bytes, problem=why)]
    split = min(splits, key=lambda s: (not s.whole, len(s.uses)))
    names = flat_names(call)
    name = names[split.input] if split.input < len(names) else f"input {split.input}"
    target = (available or program.peak_bytes) * FITS_SHARE / 2  # room for what does not shrink with the rows
    divisors = [d for d in range(2, split.rows + 1) if split.rows % d == 0 and program.peak_bytes / d <= target]
    divisors = [d for d in divisors if d >= 2][:1] or [d for d in range(2, split.rows + 1) if split.rows % d == 0][-1:]
    ways: list[WayDown] = []
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in call.traced.jaxpr.in_avals]
    count = divisors[0] if divisors else 0
    for _ in range(ROW_TRIES if count else 0):
        block = split.rows // count
        tried, _ = program_memory(jax.jit(block_program(call.traced.jaxpr, split, block)), specs)
        ways.append(_row_way(program, split, name, block, tried, call))
        if tried.problem or (
            available is not None and tried.compile_error is None and tried.peak_bytes <= available * FITS_SHARE
        ):
            break
        bigger = [d for d in range(count + 1, split.rows + 1) if split.rows % d == 0 and d >= 2 * count]
        if not bigger:
            break
        count = bigger[0]
    return ways


def _row_way(
    program: ProgramMemory, split: RowSplit, name: str, block: int, tried: ProgramMemory, call: CompiledCall
) -> WayDown:
    fn = program.function
    blocks = f"{name}.reshape({split.rows // block}, {block}{', ...' if split.rank > 1 else ''})"
    texts = argument_texts(program.call, len(call.args)) if program.call else []
    if not texts or not all(t.isidentifier() for t in texts):  # `f(jnp.linspace(...))`: its parameters' names
        texts = parameter_names(call.jitted)
    elif len(texts) == len(flat_names(call)):  # one array per argument: the call's own names
        name = texts[split.input]
    uses = ", ".join(f"`{u.text}`" if u.text else f"line {u.line.start_line}" for u in split.uses if u.line is not None)
    at = f" (line {split.uses[0].line.start_line})" if split.uses and split.uses[0].line is not None else ""
    if split.whole:
        title = f"`{fn}` on {block:,} of `{name}`'s {split.rows:,} rows at a time"
        inner = ", ".join("q" if t == name else t for t in texts)
        code = f"jax.lax.map(lambda q: {fn}({inner}), {blocks})" if name in texts and set(split.out_axes) == {0} else ""
    else:
        title = f"`{fn}` on {block:,} of `{name}`'s {split.rows:,} rows at a time, against all of `{name}`"
        code = (
            f"jax.lax.map(lambda q: {fn}_rows(q, {', '.join(texts) or '...'}), {blocks})"
            f"  # {fn}_rows: `{fn}` reading the block `q` for {uses or 'those rows'}{at}"
        )
    return WayDown(
        ROWS,
        title,
        code,
        program.peak_bytes,
        tried.peak_bytes if not tried.problem else None,
        how=(
            f"compiled jax.lax.map over {split.rows // block} blocks of the traced program, where it reads "
            f"`{name}` as rows ({uses or 'all its uses'}; the program's data flow says each result row needs only its own)"
        ),
        problem=tried.problem,
        refused=tried.compile_error is not None,
        platform=tried.platform,
    )
