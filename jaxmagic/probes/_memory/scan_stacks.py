"""What a scan stacks, read from the optimized module: the user's value behind each stacked buffer.

``jax.lax.scan`` lowers to an XLA ``while`` loop; every value the body returns per iteration (its ``ys``, and
under ``jax.grad`` the residuals the backward pass reads: a layer's activations, once per layer) is written
into a buffer of ``length`` rows by a ``dynamic-update-slice`` that JAX's lowering of scan made
(``.../jit(dynamic_update_index_in_dim)/dynamic_update_slice``), carrying the frames of the ``scan(...)``
call. That instruction is XLA's; its *update* operand is the user's value - ``tanh`` at the body's
``h = jnp.tanh(x @ w1)`` - and so is the line a report names (``Stack``), with the scan's own line beside
it. A stacked carry (the value the body got each iteration) is named by the line that makes the next one.

The loop's stacks leave it as the ``while``'s outputs and the backward loop reads them: ``read_on`` follows a
value from a loop body's root to the loop's output at the same tuple index, so that "read by the backward
pass" crosses the loop boundary.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from jaxmagic.probes._hlo.hlo_text import HloInstruction, HloModuleText
from jaxmagic.report import SourceLine

STACKING = "dynamic_update_index_in_dim"  # the name JAX's scan lowering gives the update of its stacks
# Instructions that move a value without computing it: the value behind them is the one they read.
_MOVES = ("bitcast", "copy", "reshape", "broadcast", "get-tuple-element", "transpose", "convert")


@dataclasses.dataclass
class Stack:
    """A buffer a scan stacks: the body's value it holds, one row per iteration."""

    operation: str  # the body's operation that made the value ("tanh"); "" when no instruction says
    made_at: SourceLine | None  # the body's line
    scan_at: SourceLine | None  # the line that called the scan (the stacking instruction's own frames)
    rows: int  # the stack's leading axis: iterations of the loop
    carry: bool = False  # the value is the carry the body got (named by the line that makes the next one)


def stack_of(
    module: HloModuleText,
    instruction: HloInstruction,
    instructions: dict[str, HloInstruction],
    user_line: Callable[[HloInstruction], SourceLine | None],
) -> Stack | None:
    """The stack ``instruction`` writes when it is the update of a scan's stacked output (a bare
    ``dynamic-update-slice`` or a fusion whose root is one); None for any other instruction."""
    update = _stacking_update(module, instruction)
    if update is None:
        return None
    scan_at = user_line(update[0])
    rows = _leading(instruction.shape)
    value = _behind(module, update[1], instructions, user_line, scan_at)
    if value is None:
        return Stack("", None, scan_at, rows)
    made, carry = value
    name = made.op_names[0].rsplit("/", 1)[-1] if made.op_names else made.opcode
    return Stack(name, user_line(made), scan_at, rows, carry=carry)


def _stacking_update(
    module: HloModuleText, instruction: HloInstruction
) -> tuple[HloInstruction, HloInstruction] | None:
    """(the dynamic-update-slice, the instruction of its update operand) when ``instruction`` stacks."""
    dus = instruction
    if instruction.opcode == "fusion":
        called = next((c for attribute, c in instruction.called if attribute == "calls"), "")
        computation = module.computations.get(called)
        root = next((i for i in computation.instructions if i.is_root), None) if computation else None
        if root is None:
            return None
        dus = root
    if dus.opcode != "dynamic-update-slice" or not any(STACKING in n for n in dus.op_names) or len(dus.operands) < 2:
        return None
    if not _in_loop_body(module, instruction.computation):
        return None  # the user's own dynamic_update_index_in_dim outside any loop: not a scan's stack
    names = {i.name: i for i in module.computations[dus.computation].instructions}
    update = names.get(dus.operands[1])
    return (dus, update) if update is not None else None


def _in_loop_body(module: HloModuleText, computation: str) -> bool:
    caller = module.callers.get(computation)
    return caller is not None and caller[1].opcode == "while"


def _behind(
    module: HloModuleText,
    start: HloInstruction,
    instructions: dict[str, HloInstruction],
    user_line: Callable[[HloInstruction], SourceLine | None],
    scan_at: SourceLine | None,
) -> tuple[HloInstruction, bool] | None:
    """The instruction that made the value ``start`` moves: the first on the way back with a line of its
    own (not the scan's), out of a fusion through its parameters; an element of the loop's parameter is
    the carry, named by what the body's root puts there next. (instruction, carry?) or None."""
    current: HloInstruction | None = start
    carry = False
    for _ in range(32):
        if current is None:
            return None
        line = user_line(current)
        if current.opcode != "parameter" and current.op_names and line is not None and not _same_line(line, scan_at):
            return current, carry
        if current.opcode == "parameter":
            current = _fusion_operand(module, current, instructions)
        elif current.opcode == "fusion":
            current = _fused_root(module, current)
        elif current.opcode in _MOVES and current.operands:
            current, through_carry = _operand(module, current, instructions)
            carry = carry or through_carry
        else:
            return None
    return None


def _fusion_operand(
    module: HloModuleText, parameter: HloInstruction, instructions: dict[str, HloInstruction]
) -> HloInstruction | None:
    """A fused computation's parameter N: the fusion's operand N (None for any other parameter)."""
    caller = module.callers.get(parameter.computation)
    number = parameter.parameter_number
    if caller is None or number is None or caller[1].opcode != "fusion" or number >= len(caller[1].operands):
        return None
    return instructions.get(caller[1].operands[number])


def _operand(
    module: HloModuleText, instruction: HloInstruction, instructions: dict[str, HloInstruction]
) -> tuple[HloInstruction | None, bool]:
    """The instruction behind the first operand, and whether that is the carry: an element of a loop
    body's parameter (the value the body got this iteration) goes to what the body's root puts at that
    element, the carry's next value."""
    name = instruction.operands[0]
    index = instruction.operand_indices[0] if instruction.operand_indices else None
    if instruction.opcode == "get-tuple-element" and index is None:
        index = instruction.tuple_index
    operand = instructions.get(name)
    if operand is not None and operand.opcode == "parameter" and index is not None:
        caller = module.callers.get(operand.computation)
        if caller is not None and caller[1].opcode == "while":
            root = _root(module, operand.computation)
            if root is None or root.opcode != "tuple" or index >= len(root.operands):
                return None, True
            return instructions.get(root.operands[index]), True
    return operand, False


def _fused_root(module: HloModuleText, fusion: HloInstruction) -> HloInstruction | None:
    called = next((c for attribute, c in fusion.called if attribute == "calls"), "")
    return _root(module, called)


def _root(module: HloModuleText, computation: str) -> HloInstruction | None:
    found = module.computations.get(computation)
    return next((i for i in found.instructions if i.is_root), None) if found else None


def _same_line(line: SourceLine, other: SourceLine | None) -> bool:
    return other is not None and line.filename == other.filename and line.lineno == other.lineno


def _leading(shape: str) -> int:
    dims = shape.split("[", 1)[1].split("]", 1)[0] if "[" in shape else ""
    first = dims.split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def stacking_instruction(
    module: HloModuleText, instruction: HloInstruction, shape_index: str, instructions: dict[str, HloInstruction]
) -> HloInstruction:
    """The instruction to read for a stack: a ``while``'s output element is what its body's root puts
    there (XLA may name the loop, not the update, as the value live at the peak); else ``instruction``."""
    if instruction.opcode != "while" or not shape_index.isdigit():
        return instruction
    body = next((c for attribute, c in instruction.called if attribute == "body"), "")
    root = _root(module, body)
    element = int(shape_index)
    if root is None or root.opcode != "tuple" or element >= len(root.operands):
        return instruction
    return instructions.get(root.operands[element], instruction)


def read_on(module: HloModuleText, name: str, readers: dict[str, list[HloInstruction]]) -> list[HloInstruction]:
    """Who reads the value of instruction ``name`` next when a loop body's root tuple holds it: the readers
    of the ``while``'s output at that element (``%while.14#2``, or a ``get-tuple-element`` of it)."""
    found: list[HloInstruction] = []
    for root in readers.get(name, ()):
        caller = module.callers.get(root.computation)
        if not root.is_root or root.opcode != "tuple" or caller is None or caller[1].opcode != "while":
            continue
        loop = caller[1]
        elements = {i for i, operand in enumerate(root.operands) if operand == name}
        for reader in readers.get(loop.name, ()):
            for position, operand in enumerate(reader.operands):
                index = reader.operand_indices[position] if position < len(reader.operand_indices) else None
                if reader.opcode == "get-tuple-element" and index is None:
                    index = reader.tuple_index
                if operand == loop.name and index in elements:
                    found.append(reader)
    return found
