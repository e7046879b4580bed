"""What a scan stacks, read from the optimized module: the user's value behind each stacked buffer.

``jax.lax.scan`` lowers to an XLA ``while`` loop; every value the body returns per iteration (its ``ys``, and
under ``jax.grad`` the residuals the backward pass reads - a layer's activations, once per layer - and the
per-layer gradients the backward loop writes) is written into a buffer of ``length`` rows by a
``dynamic-update-slice`` that JAX's lowering of scan made (``.../jit(dynamic_update_index_in_dim)/
dynamic_update_slice``), carrying the frames of the ``scan(...)`` call. That instruction is XLA's; its *update*
operand is the user's value - ``tanh`` at the body's ``h = jnp.tanh(x @ w1)`` - and so is the line a report
names (``Stack``), with the scan's own line beside it. A stacked carry (the value the body got each
iteration) is named by the line that makes the next one.

One reading for every compiler's way of stacking: a stack is a value the loop carries at one element of its
tuple, and the body's root at that element writes its next version. XLA:CPU names the loop's output element
(``while.4{2}``) as live at the peak, the update a bare ``dynamic-update-slice`` or a fusion's root; XLA:TPU's
peak comes before the loop, where the stacks are the zeros it starts from (a ``broadcast``, its layout ``copy``,
a ``fusion`` making bf16 zeros) placed in the tuple the ``while`` takes, updated in place by multi-output
fusions (one element of the fused root tuple each), the carry read straight from the body's parameter
(``%wide.arg_tuple.6#1``) - ``stacking_instruction`` goes from any of them to the update.

``read_by`` follows a value element by element through tuples, loops and moves, so that "read by the backward
pass" crosses the loops' edges: into the forward loop, out as its output, into the backward loop.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from jaxmagic.probes._hlo.hlo_text import HloInstruction, HloModuleText
from jaxmagic.report import SourceLine

STACKING = "dynamic_update_index_in_dim"  # the name JAX's scan lowering gives the update of its stacks
# Instructions that move a value without computing it: the value behind them is the one they read.
_MOVES = ("bitcast", "copy", "reshape", "broadcast", "get-tuple-element", "transpose", "convert")


# An instruction and, for one with several outputs (a multi-output fusion), the element that is the value.
Written = tuple[HloInstruction, int | None]


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
    written: Written,
    instructions: dict[str, HloInstruction],
    user_line: Callable[[HloInstruction], SourceLine | None],
) -> Stack | None:
    """The stack ``written`` writes when it is the update of a scan's stacked output (a bare
    ``dynamic-update-slice``, or a fusion whose root - or the root tuple's element - is one); None otherwise."""
    update = _stacking_update(module, written)
    if update is None:
        return None
    scan_at = user_line(update[0])
    rows = _leading(update[0].shape)
    value = _behind(module, update[1], instructions, user_line, scan_at)
    if value is None:
        return Stack("", None, scan_at, rows)
    made, carry = value
    name = made.op_names[0].rsplit("/", 1)[-1] if made.op_names else made.opcode
    return Stack(name, user_line(made), scan_at, rows, carry=carry)


def _stacking_update(module: HloModuleText, written: Written) -> tuple[HloInstruction, HloInstruction] | None:
    """(the dynamic-update-slice, the instruction of its update operand) when ``written`` stacks."""
    instruction, element = written
    dus = instruction
    if instruction.opcode == "fusion":
        called = next((c for attribute, c in instruction.called if attribute == "calls"), "")
        root = _root(module, called)
        if root is not None and root.opcode == "tuple" and element is not None and element < len(root.operands):
            # a multi-output fusion (XLA:TPU updates several stacks in one): the element read on is one output
            fused = module.computations[called].instructions
            root = next((i for i in fused if i.name == root.operands[element]), None)
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
    own (not the scan's), out of a fusion through its parameters (into one through its root, or the root
    tuple's element read); an element of the loop's parameter is the carry, named by what the body's root
    puts there next - read by a move (XLA:CPU: ``copy(%arg_tuple.1#1)``) or straight by the fusion that
    stacks it (XLA:TPU: ``fusion(%wide.arg_tuple.6#2, %copy.10, %wide.arg_tuple.6#1)``). (instruction,
    carry?) or None."""
    current: HloInstruction | None = start
    element: int | None = None  # the element of ``current``'s output that is the value (several outputs)
    carry = False
    for _ in range(32):
        if current is None:
            return None
        line = user_line(current)
        # a fusion's own metadata is its hero's (a ``dot_general`` that feeds an ``add``): its root made the value
        own = current.opcode not in ("parameter", "fusion") and current.op_names
        if own and line is not None and not _same_line(line, scan_at):
            return current, carry
        through_carry = False
        if current.opcode == "parameter":
            caller = module.callers.get(current.computation)
            number = current.parameter_number
            if caller is None or number is None or caller[1].opcode != "fusion":
                return None
            current, element, through_carry = _operand(module, caller[1], instructions, number)
        elif current.opcode == "fusion":
            current, element = _fused_root(module, current, element, instructions), None
        elif current.opcode in _MOVES and current.operands:
            current, element, through_carry = _operand(module, current, instructions, 0)
        else:
            return None
        carry = carry or through_carry
    return None


def _operand(
    module: HloModuleText, instruction: HloInstruction, instructions: dict[str, HloInstruction], position: int
) -> tuple[HloInstruction | None, int | None, bool]:
    """The instruction behind operand ``position``, the element of it read, and whether that is the carry:
    an element of a loop body's parameter (the value the body got this iteration) goes to what the body's
    root puts at that element, the carry's next value."""
    if position >= len(instruction.operands):
        return None, None, False
    name = instruction.operands[position]
    index = instruction.operand_indices[position] if position < len(instruction.operand_indices) else None
    if instruction.opcode == "get-tuple-element" and index is None:
        index = instruction.tuple_index
    operand = instructions.get(name)
    if operand is not None and operand.opcode == "parameter" and index is not None:
        caller = module.callers.get(operand.computation)
        if caller is not None and caller[1].opcode == "while":
            root = _root(module, operand.computation)
            if root is None or root.opcode != "tuple" or index >= len(root.operands):
                return None, None, True
            written = root.operand_indices[index] if index < len(root.operand_indices) else None
            return instructions.get(root.operands[index]), written, True
    return operand, index, False


def _fused_root(
    module: HloModuleText, fusion: HloInstruction, element: int | None, instructions: dict[str, HloInstruction]
) -> HloInstruction | None:
    """The fused computation's root - or, for a fusion with several outputs, the root tuple's ``element``."""
    called = next((c for attribute, c in fusion.called if attribute == "calls"), "")
    root = _root(module, called)
    if root is not None and root.opcode == "tuple" and element is not None and element < len(root.operands):
        return instructions.get(root.operands[element])
    return root


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
    module: HloModuleText,
    instruction: HloInstruction,
    shape_index: str,
    instructions: dict[str, HloInstruction],
    readers: dict[str, list[HloInstruction]],
) -> Written:
    """What to read for a stack: the instruction of a loop body that writes the value's next version (and
    the element of its output, for a fusion with several), where the buffer is one a loop carries - else
    ``(instruction, None)``. XLA names either end of a stack's life as the value live at the peak: the
    loop's output element (XLA:CPU: ``while.4{2}`` after the loop) or the stack's first value, the zeros
    it is made of before the loop (XLA:TPU: a ``broadcast``, its layout ``copy`` or a ``fusion`` placed in
    the tuple the ``while`` takes), or the body's parameter element while the loop runs."""
    element = int(shape_index) if shape_index.isdigit() else None
    loop: HloInstruction | None = None
    if instruction.opcode == "while" and element is not None:
        loop = instruction
    elif instruction.opcode == "parameter" and element is not None:
        caller = module.callers.get(instruction.computation)
        loop = caller[1] if caller is not None and caller[1].opcode == "while" else None
    elif not shape_index:
        loop, element = _initialised_loop(instruction, readers)
    body = next((c for attribute, c in loop.called if attribute == "body"), "") if loop is not None else ""
    root = _root(module, body)
    if root is None or root.opcode != "tuple" or element is None or element >= len(root.operands):
        return instruction, None
    written = instructions.get(root.operands[element])
    if written is None:
        return instruction, None
    return written, root.operand_indices[element] if element < len(root.operand_indices) else None


def _initialised_loop(
    instruction: HloInstruction, readers: dict[str, list[HloInstruction]]
) -> tuple[HloInstruction | None, int | None]:
    """(the ``while``, the element) when ``instruction`` is an element of the tuple a loop starts from."""
    for tuple_ in readers.get(instruction.name, ()):
        if tuple_.opcode != "tuple":
            continue
        for loop in readers.get(tuple_.name, ()):
            if loop.opcode == "while":
                return loop, tuple_.operands.index(instruction.name)
    return None, None


def read_by(
    module: HloModuleText,
    instruction: HloInstruction,
    shape_index: str,
    readers: dict[str, list[HloInstruction]],
    wanted: Callable[[HloInstruction], bool],
) -> bool:
    """Whether a reader ``wanted`` says yes to reads the value (``instruction``'s element ``shape_index``),
    followed as it is passed on: through moves, into a tuple and the loop that carries it at that element
    (a loop body's root element is read on as the ``while``'s output there: ``%while.14#2``, or a
    ``get-tuple-element`` of it) - so that "read by the backward pass" crosses a loop's edge. A loop whose
    body ``wanted`` says yes to (the backward loop of a scan) reads what it carries."""
    start = int(shape_index) if shape_index.isdigit() else None
    todo: list[tuple[str, int | None]] = [(instruction.name, start)]
    seen: set[tuple[str, int | None]] = set(todo)
    while todo:
        name, element = todo.pop()
        for reader, position in _element_readers(module, name, element, readers):
            passed: list[tuple[str, int | None]] = []
            if reader.opcode == "while":
                body = next((c for attribute, c in reader.called if attribute == "body"), "")
                computation = module.computations.get(body)
                if computation is not None and any(wanted(i) for i in computation.instructions):
                    return True
                passed = [(reader.name, element)]
            elif reader.opcode == "tuple":
                passed = [(reader.name, position), *((loop.name, position) for loop in _loop_of_root(module, reader))]
            elif reader.opcode in ("bitcast", "get-tuple-element", "copy"):
                passed = [(reader.name, None)]  # the same value passed on
            elif wanted(reader):
                return True
            for item in passed:
                if item not in seen:
                    seen.add(item)
                    todo.append(item)
    return False


def _element_readers(
    module: HloModuleText, name: str, element: int | None, readers: dict[str, list[HloInstruction]]
) -> list[tuple[HloInstruction, int]]:
    """The readers of ``name`` (of its element ``element`` when it is a tuple's), each with the operand
    position it is read at; a whole tuple read by a loop or a tuple carries the element along."""
    found = []
    for reader in readers.get(name, ()):
        for position, operand in enumerate(reader.operands):
            if operand != name:
                continue
            index = reader.operand_indices[position] if position < len(reader.operand_indices) else None
            if reader.opcode == "get-tuple-element" and index is None:
                index = reader.tuple_index
            if element is None or index == element or (index is None and reader.opcode in ("while", "tuple")):
                found.append((reader, position))
    return found


def _loop_of_root(module: HloModuleText, root: HloInstruction) -> list[HloInstruction]:
    """The ``while`` whose body ``root`` is the root tuple of ([] for any other tuple)."""
    caller = module.callers.get(root.computation)
    return [caller[1]] if root.is_root and caller is not None and caller[1].opcode == "while" else []
