"""One jitted call's memory, by the user's line: compile it (never run it) and read what is live at its peak.

The call is traced as JAX traces it (from JAX's cache when the user already made that call: the user's
Python does not run again) and compiled once more with XLA's dumps on (``_jax.compile_dumps``). The
buffers live at the peak come from XLA's live ranges; each is tied to the HLO instruction that defines
it, and through that instruction's metadata to JAX's name path and the user's line
(``_hlo.hlo_text``). What a buffer is for comes from the buffer assignment (a parameter's
allocation, an output's, the temporaries) and, for a temporary made in the forward pass and read by an
instruction of the backward pass (``transpose(...)`` in JAX's name path), "saved for the backward pass".
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import jax

from jaxmagic._jax import jit_internals, jittable
from jaxmagic._jax.compile_dumps import DumpedCompileError, MemoryDumps, compile_with_memory_dumps
from jaxmagic.probes._hlo.hlo_text import HloInstruction, HloModuleText, parse_hlo_module
from jaxmagic.probes._hlo.memory import memory_figures
from jaxmagic.probes._hlo.records import MemoryFigures
from jaxmagic.probes._hlo.stablehlo import first_user_frame
from jaxmagic.probes._memory.buffer_assignment import BufferAssignment, parse_buffer_assignment
from jaxmagic.probes._memory.library_transforms import library_jit
from jaxmagic.probes._memory.messages import read_message
from jaxmagic.probes._memory.records import (
    ARGUMENT,
    OUTPUT,
    SAVED_FOR_BACKWARD,
    TEMPORARY,
    PeakBuffer,
    ProgramMemory,
)
from jaxmagic.probes._memory.scan_stacks import read_by, stack_of, stacking_instruction
from jaxmagic.probes._support.calls.library_wrappers import library_program, user_argument_names
from jaxmagic.probes._support.rerun.users_python import users_python_watched
from jaxmagic.report import SourceLine
from jaxmagic.report.wording import error_line
from jaxmagic.usercode.source import defining_code, is_user_file

if TYPE_CHECKING:
    from jax.stages import Traced

SHOWN_BUFFERS = 8  # groups of buffers kept per program, largest first (the rest is "other buffers")


@dataclasses.dataclass
class CompiledCall:
    """What the analysis keeps of a call to try ways down: the jitted callable and its traced program."""

    jitted: Any
    args: tuple[object, ...]
    kwargs: dict[str, object]
    traced: Any  # jax.stages.Traced
    compiled: Any  # the Compiled with dumps (its program is the user's); None when the compiler ran out


def program_memory(
    fn: Callable[..., object],
    args: Sequence[object] = (),
    kwargs: dict[str, object] | None = None,
    *,
    call: str = "",
    called_at: SourceLine | None = None,
    raise_traced: bool = False,
    renamed: Sequence[str] = (),
) -> tuple[ProgramMemory, CompiledCall | None]:
    """The memory of ``fn(*args, **kwargs)``, compiled but never run; arguments may be arrays (even ones a
    failed call left unreadable) or ``jax.ShapeDtypeStruct``s. A compiler that runs out of memory (XLA:TPU)
    still says what filled the program: its dumps are read, and ``compile_error`` keeps its message.
    ``raise_traced``: the exception of tracing the user's function is raised (``%jax_memory CALL`` shows its
    report, then raises it as the call would). ``renamed``: the user's names for the traced arguments, in
    JAX's order, where a library's jit repacked them (a library wrapper given as ``fn`` is opened and named
    here)."""
    kwargs = dict(kwargs or {})
    report = ProgramMemory(function=_callee(call) or _name_of(fn), call=call, called_at=called_at)
    renamed = list(renamed)  # a library's jit: the user's names for the arguments it repacked
    try:
        # a library's jit wrapper (``nnx.jit``, ``eqx.filter_jit``): the jax.jit it runs, with its arguments
        opened = library_program(fn, tuple(args), kwargs)
        if opened is not None:
            renamed = user_argument_names(fn, args, kwargs, opened)
            fn, args, kwargs = opened
    except Exception as error:
        report.problem = f"the library's wrapper could not be opened: {error_line(error)}"
        return report, None
    jitted = fn if jit_internals.is_jitted(fn) else jittable.jit(fn)
    tracing = False
    try:
        # a library's jit runs the user's function inside its own (its trace needs the library's context)
        wrapper = library_jit(jitted, tuple(args))
        entry = wrapper.held.code if wrapper is not None else defining_code(jitted)[0]
        watched = entry if entry is not None and is_user_file(entry.co_filename) else None
        with users_python_watched(watched) as ran, wrapper.tracing() if wrapper else contextlib.nullcontext():
            tracing = True
            traced = jitted.trace(*args, **kwargs)
            tracing = False
        report.traced_again = ran.ran_again  # not found in JAX's trace cache: the user's Python ran
        info = getattr(traced.jaxpr, "debug_info", None)
        names = dict(zip(getattr(info, "arg_names", None) or (), renamed))
        report.signature = _signature(traced)
        lowered = traced.lower()
        compiled, dumps = compile_with_memory_dumps(lowered)
    except DumpedCompileError as failure:
        message = read_message(str(failure.error))
        if message is None or not message.at_compile:
            report.problem = f"it could not be compiled: {error_line(failure.error)}"
            return report, None
        report.compile_error = message
        read_program(report, failure.dumps, None, names)
        return report, CompiledCall(jitted, tuple(args), kwargs, traced, None)
    except Exception as error:
        if raise_traced and tracing:  # the user's function raised while traced: the user's error
            raise
        report.problem = f"it could not be compiled: {error_line(error)}"
        return report, None
    read_program(report, dumps, compiled, names)
    return report, CompiledCall(jitted, tuple(args), kwargs, traced, compiled)


def read_program(
    report: ProgramMemory, dumps: MemoryDumps, compiled: Any = None, renamed: dict[str, str] | None = None
) -> ProgramMemory:
    """Fill ``report`` from XLA's texts of one compilation (and its ``memory_analysis()`` when it compiled):
    the one reading of a program, for the user's call, every trial, and a recorded TPU compilation alike.

    The peak is never less than what XLA reserves for the program - its arguments, outputs and temporaries'
    block, less what outputs alias (``memory_analysis()``, or the same sums of the buffer assignment when the
    compiler ran out): the live ranges say which buffers fill it, never that it needs less."""
    report.platform = dumps.platform or report.platform or jax.default_backend()  # what it was compiled for
    text = dumps.hlo or (compiled.as_text() if compiled is not None else "") or ""
    module = _renamed(parse_hlo_module(text), renamed)
    assignment = parse_buffer_assignment(dumps.buffer_assignment, dumps.live_range)
    figures = memory_figures(compiled) if compiled is not None else None
    if figures is None and assignment.allocations:
        totals = assignment.totals()
        figures = MemoryFigures(totals.arguments, totals.outputs, totals.aliased, totals.temporaries)
    report.figures = figures
    reserved = figures.total_bytes if figures is not None else 0
    report.live_bytes = assignment.peak_bytes
    report.peak_bytes = max(assignment.peak_bytes, reserved)
    if assignment.peak:
        report.buffers = peak_buffers(module, assignment)
    elif report.peak_bytes:
        report.buffers_problem = (
            "XLA wrote no live ranges for this program, so the buffers live at its peak are unknown"
        )
    if not report.peak_bytes and not report.buffers_problem:
        report.buffers_problem = "XLA wrote no buffer assignment and no memory figures for this program"
    return report


def _renamed(module: HloModuleText, names: dict[str, str] | None) -> HloModuleText:
    """The module with its arguments named (``op_name`` metadata) as the user's call names them: ``names`` maps
    a library's names for the arrays it repacked (``dynamic_nodonate['first'][0]``) to the user's
    (``m.layers[0].weight``)."""
    if names:
        for instruction in module.instructions():
            if instruction.opcode == "parameter" and instruction.op_names:
                first = names.get(instruction.op_names[0]) or instruction.op_names[0]
                instruction.op_names = (first, *instruction.op_names[1:])
    return module


def peak_buffers(module: HloModuleText, assignment: BufferAssignment) -> list[PeakBuffer]:
    """The buffers live at the peak, folded by (shape, role, operation, line), largest first."""
    instructions = {i.name: i for i in module.instructions()}
    readers: dict[str, list[HloInstruction]] = {}
    for reader in instructions.values():
        for operand in reader.operands:
            readers.setdefault(operand, []).append(reader)
    groups: dict[tuple[object, ...], PeakBuffer] = {}  # (shape, role, operation, argument, line)
    for value in assignment.peak:
        instruction = instructions.get(value.instruction)
        if instruction is None or (not value.shape_index and instruction.shape.lstrip().startswith("(")):
            continue  # a tuple's own buffer: a table of pointers to its elements, listed on their own
        buffer = _buffer_of(module, assignment, instruction, value.shape_index, value.size, readers, instructions)
        line = buffer.made_at
        key = (buffer.shape, buffer.role, buffer.operation, buffer.argument, line and (line.filename, line.lineno))
        group = groups.get(key)
        if group is None:
            groups[key] = buffer
        else:
            group.count += 1
            group.bytes += buffer.bytes
    return sorted(groups.values(), key=lambda b: (-b.bytes, b.role == ARGUMENT))  # at one size, what it made first


def _buffer_of(
    module: HloModuleText,
    assignment: BufferAssignment,
    instruction: HloInstruction,
    shape_index: str,
    size: int,
    readers: dict[str, list[HloInstruction]],
    instructions: dict[str, HloInstruction],
) -> PeakBuffer:
    shape = _element_shape(instruction.shape, shape_index)
    op_name = instruction.op_names[0] if instruction.op_names else ""
    made_at = _user_line(module, instruction)
    found = assignment.allocation_of(instruction.name, shape_index)
    allocation = found[0] if found is not None else None
    if instruction.opcode == "parameter" and allocation is not None and allocation.parameter is not None:
        return PeakBuffer(shape, size, ARGUMENT, "", argument=op_name, made_at=None)
    role = OUTPUT if allocation is not None and allocation.live_out else TEMPORARY
    backward = functools.partial(_of_backward, module)
    if role == TEMPORARY and not _backward(op_name) and read_by(module, instruction, shape_index, readers, backward):
        role = SAVED_FOR_BACKWARD
    operation = _operation(op_name)
    stack = stack_of(
        module,
        stacking_instruction(module, instruction, shape_index, instructions, readers),
        instructions,
        lambda i: _user_line(module, i),
    )
    if stack is not None:  # a scan's stack: the body's value and line, not XLA's update on the scan's line
        operation, made_at = stack.operation or operation, stack.made_at or made_at
    elif not op_name and made_at is None:  # XLA's own buffer (a layout copy, a sort's indices): its neighbour's line
        operation, made_at = _borrowed_line(module, instruction, readers, instructions)
        if _ARGUMENTS in operation and role == SAVED_FOR_BACKWARD:
            role = TEMPORARY  # an argument in another dtype or layout (bf16 weights for the MXU): no activation
    # Made in place: XLA gave it the memory of a value it reads (a sort over its operand). Memory shared
    # with a value live at another time is reuse, not "in place", and is not told.
    operands = set(instruction.operands)
    reuses = []
    for other in assignment.sharing(instruction.name, shape_index):
        made = instructions.get(other)
        if made is None or other not in operands or made.opcode == "parameter":
            continue
        if made.op_names:
            line = _user_line(module, made)
            reuses.append(f"`{_operation(made.op_names[0])}`" + (f" at line {line.lineno}" if line is not None else ""))
        else:
            what, line = _borrowed_line(module, made, readers, instructions)
            reuses.append(f"XLA's {what}" + (f" (line {line.lineno})" if line is not None else ""))
    buffer = PeakBuffer(
        shape, size, role, operation, scope=op_name, made_at=made_at, reuses=list(dict.fromkeys(reuses))
    )
    if stack is not None:
        buffer.stacked, buffer.scan_at, buffer.carry = stack.rows, stack.scan_at, stack.carry
    return buffer


_PASSED_ON = (
    "copy",
    "bitcast",
    "get-tuple-element",
    "transpose",
    "reshape",
    "copy-start",
    "copy-done",
    "async-start",  # XLA:TPU's asynchronous copy of an argument's slices into faster memory
    "async-done",
)
_ARGUMENTS = " of argument `"


def _borrowed_line(
    module: HloModuleText,
    instruction: HloInstruction,
    readers: dict[str, list[HloInstruction]],
    instructions: dict[str, HloInstruction],
) -> tuple[str, SourceLine | None]:
    """An instruction XLA made without metadata takes the line of the value it moves (a layout ``copy`` of
    ``abs``'s output) or, when it reads no such value, of the instruction it was made for (an ``iota`` of a
    sort's indices): ("copy of `abs`", line) / ("iota for `sort`", line); a value it moves that is an argument
    of the program names it, with no line (XLA:TPU's bf16 ``convert`` of f32 weights: "convert of argument
    `params[0]`"); (opcode, None) when none says."""
    for direction, neighbours in (
        ("of", lambda i: [instructions[o] for o in i.operands if o in instructions]),
        ("for", lambda i: readers.get(i.name, [])),
    ):
        seen: set[str] = set()
        todo = list(neighbours(instruction))
        while todo:
            other = todo.pop(0)
            if other.name in seen or len(seen) > 16:
                continue
            seen.add(other.name)
            line = _user_line(module, other)
            if other.op_names and line is not None:
                return f"{instruction.opcode} {direction} `{_operation(other.op_names[0])}`", line
            if direction == "of" and _is_argument(module, other):
                return f"{instruction.opcode}{_ARGUMENTS}{other.op_names[0]}`", None
            if other.opcode in _PASSED_ON:  # the same value passed on: look one step further
                todo += neighbours(other)
    return instruction.opcode, None


def _is_argument(module: HloModuleText, instruction: HloInstruction) -> bool:
    """An entry parameter JAX named (``params[0]``): one of the program's arguments."""
    if instruction.opcode != "parameter" or not instruction.op_names:
        return False
    computation = module.computations.get(instruction.computation)
    return computation is not None and computation.is_entry


def _user_line(module: HloModuleText, instruction: HloInstruction) -> SourceLine | None:
    return first_user_frame([(f.file, f.line, f.function) for f in module.stack(instruction)])


def _operation(op_name: str) -> str:
    """The operation's own name: the last segment of JAX's name path (``jit(f)/jvp()/tanh`` -> ``tanh``)."""
    return op_name.rsplit("/", 1)[-1] if op_name else ""


def _backward(op_name: str) -> bool:
    return "transpose(" in op_name


def _of_backward(module: HloModuleText, reader: HloInstruction) -> bool:
    """Whether an instruction of the backward pass (``transpose(...)``) is ``reader`` or runs inside it (a fusion)."""
    names = list(reader.op_names)
    for _, computation in reader.called:
        called = module.computations.get(computation)
        names += [n for i in (called.instructions if called else ()) for n in i.op_names]
    return any(_backward(n) for n in names)


def _element_shape(shape: str, index: str) -> str:
    """The shape at a tuple index (``(f32[2], s32[])`` at "1" -> ``s32[]``), without its layout."""
    current = shape
    for part in (p for p in index.split(",") if p):
        elements = _tuple_elements(current)
        if not elements or int(part) >= len(elements):
            break
        current = elements[int(part)]
    return current.split("{", 1)[0].strip()


def _tuple_elements(shape: str) -> list[str]:
    shape = shape.strip()
    if not shape.startswith("("):
        return []
    elements, depth, start = [], 0, 1
    for i, char in enumerate(shape):
        if char in "([{":
            depth += 1
        elif char in ")]}":
            depth -= 1
        if (char == "," and depth == 1) or (char == ")" and depth == 0):
            elements.append(shape[start:i].strip())
            start = i + 1
    return [e for e in elements if e]


def _signature(traced: Traced) -> str:
    """The program's inputs, repeats folded: ``6 x float32[128,512], float32[2048,128]``."""
    try:
        avals = [str(a) for a in traced.jaxpr.in_avals]
    except Exception:
        return ""
    counts: dict[str, int] = {}
    for aval in avals:
        counts[aval] = counts.get(aval, 0) + 1
    return ", ".join(aval if n == 1 else f"{n} x {aval}" for aval, n in counts.items())


def _callee(call: str) -> str:
    """The name the call's text gives its function (``per_ex_grad`` of ``per_ex_grad(w, x, y)``): a user's name
    for a transformed function says more than the function it wraps; "" for another kind of callee."""
    try:
        node = ast.parse(call, mode="eval").body
    except SyntaxError:
        return ""
    if isinstance(node, ast.Call) and isinstance(node.func, (ast.Name, ast.Attribute)):
        return ast.unparse(node.func)
    return ""


def _name_of(fn: Callable[..., object]) -> str:
    inner = getattr(fn, "__wrapped__", fn)
    return getattr(inner, "__name__", None) or getattr(fn, "__name__", None) or type(fn).__name__
