"""jax.checkpoint on a scan's body: the stacked residuals of a scan over layers, recomputed instead of kept.

Under ``jax.grad`` a ``jax.lax.scan(block, x, stacked_params)`` keeps every value of the body the backward pass
reads, one row per layer (``scan_stacks`` names them by the body's line). ``jax.lax.scan(jax.checkpoint(block),
x, params)`` keeps only each layer's carry and recomputes the rest layer by layer in the backward pass. It is
tried as written: the call is traced again with ``jax.lax.scan`` replaced (``_jax/loop_patches.scan_replaced``)
by one that, called from the user's line of that scan, passes ``jax.checkpoint(f)`` (with a policy, or none)
to JAX's own - every other scan runs as it is - and compiled. A scan that line does not call through
``jax.lax.scan`` (``from jax.lax import scan``) is never reached: the way says so rather than measuring the
same program again.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

import jax

from jaxmagic._jax.loop_patches import scan_replaced
from jaxmagic.probes._memory.program import CompiledCall, program_memory
from jaxmagic.probes._memory.records import CHECKPOINT, PeakBuffer, ProgramMemory, WayDown
from jaxmagic.probes._memory.ways_down.fresh import fresh_jit
from jaxmagic.report import SourceLine
from jaxmagic.report.wording import format_bytes
from jaxmagic.usercode.source import is_user_file

POLICIES = (  # (policy, how the user writes it): none (recompute everything), then keeping matrix products
    (None, ""),
    ("dots_with_no_batch_dims_saveable", "jax.checkpoint_policies.dots_with_no_batch_dims_saveable"),
)


def scan_body_checkpoint(call: CompiledCall, program: ProgramMemory, stacked: list[PeakBuffer]) -> list[WayDown]:
    """``jax.checkpoint`` around the body of the scan whose stacks fill most of the peak, compiled."""
    by_scan: dict[tuple[str, int], list[PeakBuffer]] = {}
    for buffer in stacked:
        assert buffer.scan_at is not None
        by_scan.setdefault((buffer.scan_at.filename, buffer.scan_at.lineno), []).append(buffer)
    buffers = max(by_scan.values(), key=lambda group: sum(b.bytes for b in group))
    scan_at = buffers[0].scan_at
    assert scan_at is not None
    kept = sum(b.bytes for b in buffers)
    body = _body_text(scan_at)
    lines = sorted({b.made_at.lineno for b in buffers if b.made_at is not None})
    made = f" (line{'s' if len(lines) > 1 else ''} {', '.join(map(str, lines))})" if lines else ""
    # the body's lines that made the stacks are named in the title: an untried way still says what it is about
    title = f"jax.checkpoint around the body of the scan at line {scan_at.lineno}" + (f", `{body}`" if body else "")
    title += f", whose stacks{made} are recomputed" if lines else ""
    recomputed = f"its {format_bytes(kept)} of stacked residuals{made} recomputed layer by layer in the backward pass"
    ways = []
    for policy, text in POLICIES:
        tried, reached = _tried(call, scan_at, policy)
        problem = tried.problem
        if not problem and not reached:
            problem = (
                f"the scan at line {scan_at.lineno} was not called through `jax.lax.scan` while tracing again "
                "(imported under another name?), so it could not be checkpointed"
            )
        ways.append(
            WayDown(
                CHECKPOINT,
                title + (" keeping matrix products" if text else ""),
                _code(scan_at, body, text),
                program.peak_bytes,
                tried.peak_bytes if not problem else None,
                how=f"compiled `{program.function}` with the scan's body checkpointed: {recomputed}",
                problem=problem,
                refused=tried.compile_error is not None,
                platform=tried.platform,
                traced_again=True,
            )
        )
    return ways


def _tried(call: CompiledCall, scan_at: SourceLine, policy_name: str | None) -> tuple[ProgramMemory, int]:
    """The program compiled with the scan at ``scan_at`` given ``jax.checkpoint(f)``; how often it was."""
    policy = getattr(jax.checkpoint_policies, policy_name) if policy_name else None
    reached = [0]

    def checkpointed_scan(original: Callable[..., Any]) -> Callable[..., Any]:
        def scan(f: Callable[..., Any], *args: object, **kwargs: object) -> object:
            if _called_from(scan_at):
                reached[0] += 1
                f = jax.checkpoint(f, policy=policy) if policy is not None else jax.checkpoint(f)
            return original(f, *args, **kwargs)

        return scan

    with scan_replaced(checkpointed_scan):
        tried, _ = program_memory(fresh_jit(call), call.args, call.kwargs)
    return tried, reached[0]


def _called_from(line: SourceLine) -> bool:
    """Whether the innermost user frame calling the stand-in is ``line``."""
    frame: FrameType | None = sys._getframe(2)
    try:
        while frame is not None and not is_user_file(frame.f_code.co_filename):
            frame = frame.f_back
        return frame is not None and frame.f_code.co_filename == line.filename and frame.f_lineno == line.lineno
    finally:
        del frame


def _body_text(scan_at: SourceLine) -> str:
    """The body the scan's line passes (``block`` of ``jax.lax.scan(block, x, params)``): "" when the line
    is not one call of a ``scan`` the user wrote (a library's scan, a statement over several lines)."""
    call = _scan_call(scan_at.code)
    if call is None:
        return ""
    body = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "f"), None)
    return ast.unparse(body) if body is not None else ""


def _scan_call(code: str) -> ast.Call | None:
    try:
        tree = ast.parse(code.strip())
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "scan":
                return node
    return None


def _code(scan_at: SourceLine, body: str, policy: str) -> str:
    """The scan's call as the user wrote it with the body checkpointed: ``jax.lax.scan(jax.checkpoint(block), x,
    params)``; "" when the line is not such a call."""
    call = _scan_call(scan_at.code)
    if call is None or not body:
        return ""
    wrapped = ast.parse(f"jax.checkpoint({body}{', policy=' + policy if policy else ''})", mode="eval").body
    if call.args:
        call.args[0] = wrapped
    else:
        for keyword in call.keywords:
            if keyword.arg == "f":
                keyword.value = wrapped
    return ast.unparse(call)
