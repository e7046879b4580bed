"""Stage 3, optimized HLO: the compiled module's instructions and kernels, read from its text through
``jaxmagic.probes._hlo.hlo_text`` only."""

from __future__ import annotations

import functools

from jaxmagic.probes._hlo.hlo_text import HloInstruction, HloModuleText
from jaxmagic.probes._hlo.name_paths import parse_name
from jaxmagic.probes._hlo.scopes import StageOp
from jaxmagic.probes._hlo.stablehlo import first_user_frame
from jaxmagic.report import SourceLine


def hlo_ops(module: HloModuleText) -> list[StageOp]:
    """The operations XLA will run: every instruction with a name path, fusions and reducer bodies aside."""
    ops = []
    for instruction in module.instructions():
        if not instruction.op_names or instruction.opcode == "fusion":
            continue
        if module.role(instruction.computation) == "applied":
            continue  # the scalar body of a reduce/sort: part of that instruction
        for op_name in instruction.op_names:
            ops.append(
                StageOp(
                    "hlo",
                    f"%{instruction.name}",
                    parse_name(op_name),
                    op_name,
                    where=functools.partial(_hlo_line, module, instruction),
                    text=functools.partial(_text_of, instruction),
                    instruction=instruction,
                )
            )
            break  # one entry per instruction; merged op_names are checked when matching
    return ops


def _text_of(instruction: HloInstruction) -> str:
    return instruction.text


def hlo_kernels(module: HloModuleText) -> list[StageOp]:
    """Instructions that run as code (entry and loop computations), labelled by their op_name."""
    ops = []
    for instruction in module.instructions():
        if not instruction.op_names or instruction.opcode in ("parameter", "tuple", "get-tuple-element"):
            continue
        if module.role(instruction.computation) in ("entry", "control"):
            op_name = instruction.op_names[0]
            ops.append(
                StageOp(
                    "kernels",
                    f"%{instruction.name}",
                    parse_name(op_name),
                    op_name,
                    where=lambda: None,
                    text=functools.partial(_text_of, instruction),
                    instruction=instruction,
                )
            )
    return ops


def _hlo_line(module: HloModuleText, instruction: HloInstruction) -> SourceLine | None:
    return first_user_frame([(f.file, f.line, f.function) for f in module.stack(instruction)])
