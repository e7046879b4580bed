"""Which entry parameters of a compiled program an instruction's operands are computed from, through loops.

Read from the optimized HLO (``_hlo/hlo_text.py``). Inside the entry computation that is a walk over
operands. A ``while`` (what ``lax.scan``, ``fori_loop`` and ``while_loop`` compile to) carries one tuple:
its body reads element ``k`` with ``get-tuple-element(param), index=k``, and element ``k`` holds, on the
first iteration, element ``k`` of the loop's initial tuple and, on a later one, element ``k`` of the
body's own result. Both are followed. A tuple value whose element cannot be read from the text (a tuple
built elsewhere than by a ``tuple`` instruction, a branch of a ``conditional``) is not followed, and the
answer says it is incomplete: a cause read from it must not claim what it did not see.
"""

from __future__ import annotations

import dataclasses
import re

from jaxmagic.probes._hlo.hlo_text import HloInstruction, HloModuleText

_INDEX = re.compile(r"\bindex=(\d+)")


@dataclasses.dataclass
class Reached:
    parameters: list[HloInstruction]  # entry parameters, in parameter order
    complete: bool  # False: some path was not followed back (a cause from these must say so)


def parameters_reached(module: HloModuleText, instruction: HloInstruction) -> Reached:
    """The entry parameters ``instruction``'s operands are computed from, followed out of loop bodies."""
    flow = _Flow(module)
    for operand in instruction.operands:
        flow.value(instruction.computation, operand)
    return Reached([flow.found[n] for n in sorted(flow.found)], flow.complete)


class _Flow:
    def __init__(self, module: HloModuleText):
        self.module = module
        self.by_name = {
            name: {i.name: i for i in computation.instructions} for name, computation in module.computations.items()
        }
        self.found: dict[int, HloInstruction] = {}
        self.complete = True
        self._seen: set[tuple[str, str, int | None]] = set()

    def value(self, computation: str, name: str) -> None:
        """Every entry parameter the value ``name`` of ``computation`` is computed from."""
        stack = [(computation, name)]
        while stack:
            computation, name = stack.pop()
            if (computation, name, None) in self._seen:
                continue
            self._seen.add((computation, name, None))
            source = self.by_name.get(computation, {}).get(name)
            if source is None:
                continue
            if source.opcode == "parameter":
                self._parameter(source)
            elif source.opcode == "get-tuple-element" and (index := _index(source)) is not None and source.operands:
                self.element(computation, source.operands[0], index)
            else:
                stack += [(computation, operand) for operand in source.operands]

    def element(self, computation: str, name: str, index: int) -> None:
        """Every entry parameter element ``index`` of the tuple value ``name`` is computed from."""
        if (computation, name, index) in self._seen:
            return
        self._seen.add((computation, name, index))
        source = self.by_name.get(computation, {}).get(name)
        if source is None:
            self.complete = False
        elif source.opcode == "tuple" and index < len(source.operands):
            self.value(computation, source.operands[index])
        elif source.opcode == "get-tuple-element":  # a tuple inside a tuple: not what loops carry; not followed
            self.complete = False
        elif source.opcode == "while" and source.operands:
            self._loop_element(computation, source, index)
        elif source.opcode == "parameter" and not self._is_entry(computation):
            caller = self.module.callers.get(computation)
            if caller is not None and caller[1].opcode == "while" and ("body", computation) in caller[1].called:
                self._loop_element(caller[1].computation, caller[1], index)
            else:  # a branch of a conditional, a called computation: not followed
                self.complete = False
        elif source.opcode == "parameter":
            self._parameter(source)  # a tuple-typed entry parameter: the whole of it
        else:
            self.complete = False

    def _loop_element(self, computation: str, loop: HloInstruction, index: int) -> None:
        """Element ``index`` of a while's carry: the initial tuple's, and the body result's."""
        self.element(computation, loop.operands[0], index)
        body = next((target for attribute, target in loop.called if attribute == "body"), None)
        found = self.module.computations.get(body) if body else None
        root = next((i for i in found.instructions if i.is_root), None) if found is not None else None
        if root is None or body is None:
            self.complete = False
            return
        self.element(body, root.name, index)

    def _parameter(self, source: HloInstruction) -> None:
        if self._is_entry(source.computation) and source.parameter_number is not None:
            self.found[source.parameter_number] = source
        else:  # a parameter of a fused or called computation read whole: not followed
            self.complete = False

    def _is_entry(self, computation: str) -> bool:
        found = self.module.computations.get(computation)
        return found is not None and found.is_entry


def _index(instruction: HloInstruction) -> int | None:
    match = _INDEX.search(instruction.text)
    return int(match.group(1)) if match else None
