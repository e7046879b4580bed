""" "Some donated buffers were not usable": which argument of which call, why, and what to change.

JAX's warning (jax#9237, jax#9675, jax#12514) lists only types. While the block runs, the warning is
seen as it is shown, and JAX's lowering frame - still on the stack - names the arguments it could not reuse
(``_jax.compile_frames.lowering_in_progress``). A warning the report explains that way is not shown as well
(the report says it, naming the argument, above the cell's output); one it could not read is shown as JAX
wrote it. On CPU, JAX 0.12
implements donation: a donated argument an output reuses is deleted by the call; one no output can reuse
is kept, and this warning is the only sign.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import sys
import threading
import warnings
from types import FrameType
from typing import Any, TextIO

from jaxmagic._jax.compile_frames import Lowering, lowering_in_progress
from jaxmagic._jax.compile_log import bare_name
from jaxmagic._jax.program_inputs import UnreadDonation
from jaxmagic.probes._support import attribution
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance
from jaxmagic.usercode.source import is_jaxmagic_file, is_user_file, source_line

WARNING_TEXT = "Some donated buffers were not usable"
KEPT = 20


@dataclasses.dataclass
class UnusableDonation:
    """One donated argument JAX could not reuse for an output."""

    function: str  # "step"
    argument: str  # the path inside the arguments: "batch", "state['opt'][0]"; "" when JAX named none
    type: str  # "float32[4,4]"
    why: str
    fix: str
    line: SourceLine | None = None  # the call that compiled (and warned)
    provenance: Provenance | None = None
    unread: bool = False  # True: the program never reads it, so JAX pruned it and donated nothing (no warning)

    @property
    def headline(self) -> str:
        name = f"`{self.argument}`" if self.argument else f"an argument of type {self.type}"
        if self.unread:
            return f"{name[0].upper()}{name[1:]} is donated to `{self.function}` but the program never reads it: {self.why}"
        return f"Donated {name} of `{self.function}` was not reused: {self.why}"

    @property
    def short(self) -> str:
        """A few words for a list of findings."""
        name = f"`{self.argument or self.type}`"
        return f"donated {name} of `{self.function}` " + ("never read" if self.unread else "not reused")


def donations_of(
    lowering: Lowering, function: str, line: SourceLine | None, started: SourceLine | None
) -> list[UnusableDonation]:
    """The unusable donations of one lowering, each with its reason and fix."""
    if lowering.platforms and not lowering.platforms_with_donation:
        why_platform = f"JAX does not implement donation on {', '.join(lowering.platforms)}: the buffer is copied."
    else:
        why_platform = ""
    found = []
    outputs = list(lowering.output_types)
    for argument in lowering.donated:
        same = outputs.count(argument.type)
        if why_platform:
            why = why_platform
            fix = "Drop donate_argnums on this platform (it saves nothing here), or keep it for the accelerator."
        elif same:
            why = (
                f"the {same} output(s) of type {argument.type} were already reused by other donated arguments, "
                "so none was left for this one."
            )
            fix = (
                f"Return one more output of type {argument.type} (the updated `{argument.name or 'value'}`), "
                f"or stop donating `{argument.name or 'it'}`."
            )
        else:
            shown = ", ".join(outputs[:6]) + (", ..." if len(outputs) > 6 else "") if outputs else "none"
            why = (
                f"no output has its shape and dtype ({argument.type}); the outputs are {shown}. A donated buffer "
                "is reused only for an output of the same shape and dtype; it is kept, not freed."
            )
            fix = (
                f"Stop donating `{argument.name or 'it'}` (remove it from donate_argnums / donate_argnames), "
                f"or return its updated value (shape and dtype {argument.type}) so the output can reuse it."
            )
        found.append(
            UnusableDonation(
                function=function,
                argument=argument.name,
                type=argument.type,
                why=why,
                fix=fix,
                line=line,
                provenance=attribution.of_source_line(line, started, [f"jit({function})"]),
            )
        )
    return found


def unread_donations(
    unread: list[UnreadDonation], function: str, line: SourceLine | None, started: SourceLine | None
) -> list[UnusableDonation]:
    """Donated arguments a compiled program never reads (``_jax.program_inputs.donated_unread_at_compile``).

    JAX prunes an input the program does not read (``keep_unused=False``, the default), and its donation
    with it: nothing is donated, the buffer stays allocated, and JAX says nothing (jax#9675 asks for loud
    failures when donation does not work; jax#2936 noted unused donated buffers are not deleted)."""
    found = []
    for argument in unread:
        name = f"`{argument.name}`" if argument.name else "it"
        found.append(
            UnusableDonation(
                function=function,
                argument=argument.name,
                type=argument.type,
                why=(
                    "JAX drops it from the compiled program, so nothing is donated (its buffer keeps its memory; "
                    "JAX does not warn)."
                ),
                fix=(
                    f"Remove {name} from donate_argnums / donate_argnames (or stop passing it), or use it in "
                    "the function if it should be read and its buffer reused."
                ),
                line=line,
                provenance=attribution.of_source_line(line, started, [f"jit({function})"]),
                unread=True,
            )
        )
    return found


_MODULE = re.compile(r"^jit_(?P<name>.+)$")


class DonationWarnings:
    """While entered, records each "donated buffers were not usable" warning of this thread, named.

    Adds one filter that passes that warning every time to ``warnings.showwarning`` (not once per place:
    each compilation is another function or argument), wrapped to record it and then do what the user's
    own filters say (ignored: not shown; error: raised; else shown - each time, where "default" would
    show one text once - unless ``hide_explained`` and the warning was recorded: the report tells it);
    both are taken back on exit, and only if still ours, so a cell that changes its warning filters keeps
    its own.
    """

    def __init__(self, found: list[UnusableDonation], hide_explained: bool = True):
        self.found = found
        self.hide_explained = hide_explained
        self._thread = threading.get_ident()
        self._shown: Any = None
        self._ours: Any = None
        self._filter: Any = None

    def __enter__(self) -> DonationWarnings:
        self._shown = warnings.showwarning
        shown = self._shown

        def showwarning(
            message: Warning | str,
            category: type[Warning],
            filename: str,
            lineno: int,
            file: TextIO | None = None,
            line: str | None = None,
        ) -> None:
            if WARNING_TEXT not in str(message):
                return shown(message, category, filename, lineno, file, line)
            explained = False
            if threading.get_ident() == self._thread:
                with contextlib.suppress(Exception):  # a frame layout we do not know: JAX's warning still shows
                    explained = self._record(sys._getframe(1))
            # What the user's own filters (those after ours) say of it: ignored stays unseen, an error raises.
            action = self._users_action(str(message), category, lineno, sys._getframe(1))
            if action == "error":
                raise message if isinstance(message, Warning) else category(message)
            if action != "ignore" and not (explained and self.hide_explained):
                shown(message, category, filename, lineno, file, line)

        warnings.showwarning = showwarning
        self._ours = showwarning
        warnings.filterwarnings("always", message=WARNING_TEXT)
        self._filter = warnings.filters[0]
        return self

    def __exit__(self, *exc: object) -> None:
        if warnings.showwarning is self._ours:
            warnings.showwarning = self._shown
        with contextlib.suppress(ValueError):
            warnings.filters.remove(self._filter)  # type: ignore[attr-defined]  # a list at run time

    def _users_action(self, text: str, category: type[Warning], lineno: int, frame: FrameType | None) -> str:
        """The action of the first of the user's filters matching the warning (ours put aside)."""
        module = ""
        while frame is not None and not module:
            if frame.f_code.co_name == "lower_jaxpr_to_module" or WARNING_TEXT in str(frame.f_code.co_consts):
                module = frame.f_globals.get("__name__", "")
            frame = frame.f_back
        for entry in warnings.filters:
            if entry is self._filter:
                continue
            action, message, kind, module_pattern, line = entry
            if (
                (message is None or message.match(text))
                and issubclass(category, kind)
                and (module_pattern is None or module_pattern.match(module))
                and (line == 0 or line == lineno)
            ):
                return action
        return getattr(warnings, "defaultaction", "default")  # not in the stubs

    def _record(self, frame: FrameType) -> bool:
        """Record the warning's donations; whether the report now names them (else JAX's text must show)."""
        lowering = lowering_in_progress(frame)
        if lowering is None or len(self.found) >= KEPT:
            return False
        line, started = None, None
        match = _MODULE.match(lowering.module)
        function = bare_name(match["name"] if match else lowering.module) or "?"
        current: FrameType | None = frame
        try:
            for _ in range(400):
                if current is None:
                    break
                filename = current.f_code.co_filename
                if is_user_file(filename):
                    site = source_line(filename, current.f_lineno, current.f_code.co_name)
                    line = line or site
                    started = site
                elif started is not None and is_jaxmagic_file(filename):
                    break
                current = current.f_back
        finally:
            del current
        named = donations_of(lowering, function, line, started)
        self.found.extend(named)
        return bool(named)
