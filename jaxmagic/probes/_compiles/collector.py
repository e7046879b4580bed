"""Building the compilation report as compilations happen, from monitoring events, log lines and the stack."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import threading
from types import FrameType
from typing import Any

import jax

from jaxmagic._jax import own_programs, program_prints
from jaxmagic._jax.compile_log import (
    CacheMissExplanation,
    bare_name,
    parse_cache_miss,
    parse_compile_log_line,
    parse_persistent_cache_line,
    signature_text,
)
from jaxmagic._jax.own_settings import users_values
from jaxmagic._jax.program_inputs import UnreadDonation, donated_unread_at_compile
from jaxmagic.probes._compiles import model
from jaxmagic.probes._compiles.baked import BakedValue
from jaxmagic.probes._compiles.baked_trial import say_baked_untried, try_baked_fix
from jaxmagic.probes._compiles.cache_misses import CacheMisses
from jaxmagic.probes._compiles.cause import FIRST, Cause, CauseKind
from jaxmagic.probes._compiles.causes import classify
from jaxmagic.probes._compiles.donations import KEPT as DONATIONS_KEPT
from jaxmagic.probes._compiles.donations import unread_donations
from jaxmagic.probes._compiles.field_trial import say_field_untried, try_field_fix
from jaxmagic.probes._compiles.fixes import fix_for
from jaxmagic.probes._compiles.function_state import CompileHistory, FunctionState
from jaxmagic.probes._compiles.model import Compilation, FunctionCompiles
from jaxmagic.probes._compiles.program_size import ProgramSize
from jaxmagic.probes._compiles.report import CompileReport
from jaxmagic.probes._compiles.slow_programs import SlowPrograms
from jaxmagic.probes._compiles.stack import (
    TRANSFORMATION_RULES,
    CallInfo,
    StaticValue,
    read_jit_frame,
    read_transformed_program,
)
from jaxmagic.probes._compiles.stale_globals import stale_globals
from jaxmagic.probes._compiles.static_trial import say_untried, try_static_fix
from jaxmagic.probes._compiles.user_arguments import read_user_arguments, user_paths
from jaxmagic.probes._compiles.why_again import why_compiled_again
from jaxmagic.probes._support import attribution
from jaxmagic.probes._support.calls.wrapped import jax_dirs, library_of
from jaxmagic.report import SourceLine
from jaxmagic.report.wording import error_line
from jaxmagic.usercode.source import cell_label, is_jaxmagic_file, is_user_file, source_line

# why a probe made with try_fixes=False (the watch: it shows a finding once, so a trial after a later cell
# would run the user's function again unsaid) offers the static-number fix untried
UNTRIED_HERE = "jaxmagic does not trace your function again here; %%jax_compiles on the cell tries it"


EVENT_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
EVENT_TRACE = "/jax/core/compile/jaxpr_trace_duration"
EVENT_LOWER = "/jax/core/compile/jaxpr_to_mlir_module_duration"


class Collector:
    """Receives monitoring events and compile log lines; builds the report as compilations happen."""

    def __init__(
        self,
        report: CompileReport,
        stack: contextlib.ExitStack,
        history: CompileHistory | None = None,
        try_fixes: bool = True,
        slowest: bool = True,
    ):
        self.report = report
        self._slow = SlowPrograms(slowest)  # compilations whose size is examined after the block
        self._cache = CacheMisses(report.cache_misses)
        self._history = history
        self._try_fixes = try_fixes  # keep each call's abstract arguments to try static fixes on after the block
        self._stack = stack
        self._thread = threading.get_ident()
        self._lock = threading.Lock()
        self._functions: dict[tuple[str, str, str, int], FunctionState] = {}
        self._last_of_name: dict[tuple[str, str], FunctionState] = {}
        # What arrived for a function since its last compilation, by bare name. Cleared at every
        # compilation: leftovers belong to functions traced inside another one (inlined, never compiled).
        self._pending_log: dict[str, list[str]] = {}
        self._pending_types: dict[str, list[str]] = {}
        self._pending_explanation: dict[str, CacheMissExplanation] = {}
        self._pending_trace: dict[str, float] = {}
        self._pending_lower: dict[str, float] = {}
        self._explaining = True
        self._user_values = users_values()  # the user's own values of the settings jaxmagic sets (own_settings)
        # A process of a multi-process job digests each program it compiles, for %jax_gather to compare
        # (programs.py): only there, so a single process pays nothing.
        self._print_programs = program_prints.in_multi_process_job()

    # -- inputs --------------------------------------------------------------

    def on_log(self, message: str) -> None:
        if threading.get_ident() != self._thread:  # logged while another thread compiled: not the block's
            return
        if own_programs.running():  # a program of jaxmagic's own (the NaN watch's verdict): not the user's
            return
        with self._lock:
            self.report.log_lines += 1
            cache_line = parse_persistent_cache_line(message)
            if cache_line is not None:
                self._cache.read(cache_line, _innermost_user_line() if cache_line.event == "miss" else None)
                return
            line = parse_compile_log_line(message)
            explanation = None if line else parse_cache_miss(message)
            name = line.name if line else explanation.name if explanation else ""
            kept = self._pending_log.setdefault(name, [])
            if len(kept) < 8:
                kept.append(message[: model.LOG_LINE_CHARS])
            if line is not None and line.stage == "compiling":
                self._pending_types[name] = line.types
            if explanation is not None:
                self._pending_explanation[name] = explanation

    def on_duration(self, event: str, duration: float, **kwargs: Any) -> None:
        if threading.get_ident() != self._thread:  # another thread's work (a data loader): not the block's
            if event == EVENT_BACKEND_COMPILE:
                with self._lock:
                    self.report.other_thread_compilations += 1
            return
        if own_programs.running():  # a program of jaxmagic's own (the NaN watch's verdict): not the user's
            return
        if event == EVENT_BACKEND_COMPILE:
            info = self._inspect_stack()  # before taking the lock: only reads this thread's frames
            unread: list[UnreadDonation] = []
            with contextlib.suppress(Exception):  # private frame layout: a donation unread is not recorded
                unread = donated_unread_at_compile(sys._getframe(1))
            if self._print_programs:
                with contextlib.suppress(Exception):  # private frame layout: a program unread is not recorded
                    info.program = program_prints.print_of_compilation(_user_line_text)
            with self._lock:
                name = bare_name(str(kwargs.get("fun_name", "?")))
                trace, lower = self._pending_trace.get(name), self._pending_lower.get(name)
                total = duration + (trace or 0.0) + (lower or 0.0)
                sized = info.kind == "user" and self._slow.wants(total)
                name, number = self._compiled(name, duration, info)
                if unread and len(self.report.donations) < DONATIONS_KEPT:
                    call_line = source_line(*info.call_site) if info.call_site else None
                    started_line = source_line(*info.started_site) if info.started_site else None
                    self.report.donations.extend(unread_donations(unread, name, call_line, started_line))
                if sized:
                    size = ProgramSize(name, number, total, trace, lower, duration, why_examined="")
                    call = source_line(*info.call_site) if info.call_site else None
                    started = source_line(*info.started_site) if info.started_site else None
                    self._slow.keep(sys._getframe(1), size, call, started)
        elif event == EVENT_TRACE:
            with self._lock:
                self._pending_trace[bare_name(str(kwargs.get("fun_name", "?")))] = duration
        elif event == EVENT_LOWER:
            with self._lock:
                self._pending_lower[bare_name(str(kwargs.get("fun_name", "?")))] = duration

    # -- the stack at a compilation -------------------------------------------

    def _inspect_stack(self) -> CallInfo:
        info = CallInfo()
        found_jit = False
        held = None  # a library's callable holding the user's function, with jit's static arguments
        inner: FrameType | None = None  # the frame the current one called
        entry: FrameType | None = None  # the library frame the user's line called, on the way to jit: its entry
        jit_frame: FrameType | None = None  # jit's cache_miss: the call the library made
        user: FrameType | None = None  # the user's line that called the library
        frame: FrameType | None = sys._getframe(1)
        try:
            for _ in range(400):
                if frame is None:
                    break
                code = frame.f_code
                if not found_jit and code.co_filename.endswith("pjit.py"):
                    # A program compiled by the jit primitive's own implementation under a transformation
                    # rule: the jitted function vmapped or differentiated outside jit (not its own call).
                    if code.co_name == "_pjit_call_impl" and not info.transformed:
                        with contextlib.suppress(Exception):
                            read_transformed_program(frame.f_locals, info, is_user_file)
                            info.transformed = "?"
                    elif info.transformed == "?" and code.co_name in TRANSFORMATION_RULES:
                        info.transformed = TRANSFORMATION_RULES[code.co_name]  # the cache_miss further out
                        # is the call that was transformed: its frame names the parameters
                if not found_jit and code.co_name == "cache_miss" and code.co_filename.endswith("pjit.py"):
                    found_jit, jit_frame = True, frame
                    with contextlib.suppress(Exception):  # private frame layout: use it only if it is there
                        held = read_jit_frame(
                            frame.f_locals, info, is_user_file, self._try_fixes, _called_from_user(frame)
                        )
                if info.call_site is None and is_user_file(code.co_filename):
                    info.call_site = (code.co_filename, frame.f_lineno, code.co_name)
                    if held is not None and inner is not None and not inner.f_code.co_filename.startswith(jax_dirs()):
                        entry, user = inner, frame
                if is_user_file(code.co_filename):
                    info.started_site = (code.co_filename, frame.f_lineno, code.co_name)  # outermost so far
                elif info.started_site is not None and is_jaxmagic_file(code.co_filename):
                    break  # further out: what ran the magic (run_cell_magic), not the cell
                inner, frame = frame, frame.f_back
            if held is not None and entry is not None:  # the library called jit: its arguments are not the user's
                info.library = held[0].library
                read = False
                with contextlib.suppress(Exception):  # the user's objects, read as they are
                    read = read_user_arguments(entry.f_locals, entry.f_code, held[0], held[1], info, self._try_fixes)
                if not read:  # what jit was given is the library's own packing: not the user's to read
                    info.parameter_names, info.static_argnames, info.static_values, info.metadata = [], [], {}, {}
                if jit_frame is not None:
                    with contextlib.suppress(Exception):  # JAX's names for the packing's leaves, as the user's
                        info.user_paths = user_paths(user, jit_frame.f_locals)
        finally:
            del frame, inner, entry, held, jit_frame, user
        if info.transformed == "?":  # the jit primitive run eagerly under no rule we know: its own call
            info.transformed = ""
        return info

    # -- one compilation -------------------------------------------------------

    def _compiled(self, name: str, seconds: float, info: CallInfo) -> tuple[str, int]:
        """Record one compilation; its function's name as reported and which compilation of it this is."""
        self.report.total_compilations += 1
        pending = self._take_pending(name)
        name = _reported_name(name, info, pending.explanation)
        state = self._state_of(name, info)
        summary = state.summary
        traced = pending.trace_seconds is not None
        found = classify(summary, state, pending.explanation, pending.types, info, traced, self._user_values)
        _count(summary, found, pending, seconds)
        _remember(summary, state, info, pending.types)
        line = source_line(*info.call_site) if info.call_site else None
        if summary.first_line is None:
            summary.first_line = line
        if state.detailed < model.DETAILS_PER_FUNCTION and len(self.report.compilations) < model.DETAILS_TOTAL:
            state.detailed += 1
            self.report.compilations.append(_compilation(name, summary, found, pending, seconds, info, line))
        if pending.explanation is not None:
            state.explained += 1
            if state.explained >= model.EXPLAIN_LIMIT and self._explaining:
                self._stop_explaining(name)
        return name, summary.count

    def _take_pending(self, name: str) -> _Pending:
        """What the logs and the trace and lowering events said before this compilation; forgotten after it."""
        pending = _Pending(
            self._pending_explanation.get(name),
            self._pending_types.get(name),
            self._pending_trace.get(name),
            self._pending_lower.get(name),
            self._pending_log.get(name, []),
        )
        self._pending_log.clear()
        self._pending_types.clear()
        self._pending_explanation.clear()
        self._pending_trace.clear()
        self._pending_lower.clear()
        return pending

    def _state_of(self, name: str, info: CallInfo) -> FunctionState:
        """The function's state in the block (its summary is in the report), made at its first compilation."""
        key = (name, info.kind, info.defined_file, info.defined_line)
        state = self._functions.get(key)
        if state is None and not info.defined_file:
            # No frame or explanation said where it is defined (an AOT .compile(), or explanations
            # switched off): it is the function of that name seen last.
            state = self._last_of_name.get((name, info.kind))
        if state is None:
            fresh = FunctionCompiles(
                name=name,
                kind=info.kind,
                defined_at=_defined_at(info),
                library=library_of(info.defined_file) if info.kind == "library" and info.defined_file else "",
                static_argnames=list(info.static_argnames),
            )
            earlier = self._history.states.get(key) if self._history is not None else None
            state = self._functions[key] = earlier.carried(fresh) if earlier is not None else FunctionState(fresh)
            self.report.functions.append(state.summary)
        self._last_of_name[(name, info.kind)] = state
        return state

    def _stop_explaining(self, name: str) -> None:
        # JAX compares each cache miss with every key seen before, so explanations cost more with every
        # compilation (1,000 shapes: ~50 s instead of ~1 s). The first ones say what there is to say.
        if threading.get_ident() != self._thread:
            return  # the setting is thread-local; another thread's context is not ours to change

        self._explaining = False
        self.report.explanations_stopped = name
        self._stack.enter_context(jax.explain_cache_misses(False))

    def finish(self, block_seconds: float = 0.0) -> None:
        """After the block (JAX's logs and listeners already off): try each static-number fix by tracing, then
        drop what the trials needed, so the report holds nothing of the user's; examine the slow compilations'
        programs and say why persistent-cache misses missed."""
        with self._lock:
            self.report.sizes = self._slow.finish(block_seconds)
            self._cache.finish()
            yours = {f.name for f in self.report.functions if f.kind == "user"}
            self.report.cache_misses.sort(key=lambda miss: miss.function not in yours)  # the user's first
            self.report.cache_hits = self._cache.hits
            for state in self._functions.values():
                if state.summary.kind == "user":
                    self.report.stale_globals += stale_globals(
                        state.summary.name,
                        state.last_function,
                        state.last_baked,
                        is_user_file,
                        state.summary.first_line,
                    )
                if not self._try_fixes:
                    say_untried(state.summary, UNTRIED_HERE)
                    say_field_untried(state.summary, state.changed_fields, UNTRIED_HERE)
                    say_baked_untried(state.summary, UNTRIED_HERE)
                elif state.trial_arguments is not None:
                    # through a library's jit wrapper: the user's function it holds, traced with the
                    # wrapper's rule (arrays traced, every other value static), as the user's call gave them
                    reference = state.trial_function or state.last_function
                    function = reference() if reference is not None else None
                    try:
                        try_static_fix(state.summary, function, *state.trial_arguments)
                    except Exception as failure:  # jaxmagic's own trial failed: the fix is offered untried
                        say_untried(state.summary, f"jaxmagic's trial failed: {error_line(failure)}")
                    try:
                        try_field_fix(state.summary, function, *state.trial_arguments, state.changed_fields)
                    except Exception as failure:
                        why = f"jaxmagic's trial failed: {error_line(failure)}"
                        say_field_untried(state.summary, state.changed_fields, why)
                    try:
                        try_baked_fix(state.summary, state.trial_partial, *state.trial_arguments[:2], state.last_baked)
                    except Exception as failure:
                        say_baked_untried(state.summary, f"jaxmagic's trial failed: {error_line(failure)}")
                    del function
                else:
                    say_field_untried(state.summary, state.changed_fields, "the call's arguments were not kept")
                    say_baked_untried(state.summary, "the call's arguments were not kept")
                for compilation in self.report.compilations:  # the compilations' fixes say what the trials found
                    kind = compilation.cause_kind
                    if compilation.function == state.summary.name and kind.fix_tried_after:
                        compilation.fix = fix_for(state.summary, kind)
                state.trial_arguments = state.trial_partial = state.trial_function = None
            self.report.functions.sort(key=lambda f: (f.kind != "user", -f.count))
            for state in self._functions.values():
                state.summary.again = why_compiled_again(state.summary) if state.summary.recompiled else None
            if self._history is not None:
                self._history.states.update(self._functions)


@dataclasses.dataclass
class _Pending:
    """What was said about a compilation before its backend-compile event: JAX's explanation and argument
    types (the compile log), the trace and lowering durations (their events), the log lines kept."""

    explanation: CacheMissExplanation | None
    types: list[str] | None
    trace_seconds: float | None
    lower_seconds: float | None
    log: list[str]


def _reported_name(name: str, info: CallInfo, explanation: CacheMissExplanation | None) -> str:
    """The function's name as the report gives it; where it is defined filled in from JAX's explanation."""
    if info.function_name:  # the user's function a library's callable holds, not the library's
        name = info.function_name
    if info.transformed:  # a program of its own, beside the function's jit programs: vmap(predict)
        name = info.transformed.format(name)
    if explanation is not None and not info.defined_file and explanation.defined_at:
        info.defined_file, _, number = explanation.defined_at.rpartition(":")
        info.defined_line = int(number) if number.isdigit() else 0
    return name


def _defined_at(info: CallInfo) -> str:
    """``"In [3], line 2"`` for a cell, ``"model.py:14"`` for a file, "" when unknown."""
    if not info.defined_file:
        return ""
    label = cell_label(info.defined_file)
    return f"{label}, line {info.defined_line}" if label else f"{info.defined_file}:{info.defined_line}"


def _count(summary: FunctionCompiles, found: list[Cause], pending: _Pending, seconds: float) -> None:
    """The compilation counted in its function's summary: its causes, what changed, its durations."""
    summary.count += 1
    for each in found:
        summary.causes[each.cause] = summary.causes.get(each.cause, 0) + 1
        if each.kind is not FIRST:
            _record_changes(summary, each.kind, each.changes)
    summary.trace_seconds += pending.trace_seconds or 0.0
    summary.lower_seconds += pending.lower_seconds or 0.0
    summary.compile_seconds += seconds


def _remember(summary: FunctionCompiles, state: FunctionState, info: CallInfo, types: list[str] | None) -> None:
    """What the next compilation of the function is compared with: its types, static values, metadata,
    function object, leaves and baked values; and what a fix's trial calls it with."""
    if types is not None:
        if len(state.signatures) < 100_000:
            state.signatures.add(hash(tuple(types)))
        summary.distinct_argument_types = len(state.signatures)
        summary.last_argument_types = signature_text(types)
        state.last_types = types
    _record_static(summary, state, info.static_values)
    state.last_static = dict(info.static_values)
    state.last_metadata = dict(info.metadata)
    state.last_function = info.function
    if info.trial_arguments is not None:
        state.trial_arguments = info.trial_arguments
        state.trial_partial = info.trial_partial
        state.trial_function = info.trial_function
    state.last_leaves = dict(info.leaves) if info.leaves else None
    _record_baked(summary, state, info.baked)
    if info.program is not None and len(summary.programs) < model.PROGRAMS_KEPT:
        summary.programs.append(info.program.to_dict())


def _compilation(
    name: str,
    summary: FunctionCompiles,
    found: list[Cause],
    pending: _Pending,
    seconds: float,
    info: CallInfo,
    line: SourceLine | None,
) -> Compilation:
    """The compilation kept in full for the report's table."""
    cause = found[0].cause
    types = pending.types
    return Compilation(
        function=name,
        number=summary.count,
        kind=info.kind,
        cause=cause,
        why=" ".join(c.why for c in found),
        also=[c.cause for c in found[1:]],
        changes=[x for c in found for x in c.changes][: model.CHANGES_KEPT],
        argument_types=signature_text(types) if types is not None else "",
        static_arguments={k: v.text for k, v in info.static_values.items()},
        trace_seconds=pending.trace_seconds,
        lower_seconds=pending.lower_seconds,
        compile_seconds=seconds,
        line=line,
        jax_explanation=pending.explanation.text if pending.explanation else "",
        log=list(pending.log),
        fix=fix_for(summary, found[0].kind) if found[0].kind.fix_per_compilation else "",
        provenance=attribution.of_source_line(
            line,
            source_line(*info.started_site) if info.started_site else None,
            [] if info.kind == "eager" else [name] if info.transformed else [f"jit({name})"],
        ),
    )


def _innermost_user_line() -> SourceLine | None:
    """The user's line running now (a persistent-cache miss is logged inside the call that compiles)."""
    frame: FrameType | None = sys._getframe(2)
    try:
        for _ in range(400):
            if frame is None:
                return None
            if is_user_file(frame.f_code.co_filename):
                return source_line(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
            frame = frame.f_back
        return None
    finally:
        del frame


def _user_line_text(filename: str, lineno: int) -> str:
    """``In [3], line 4: h = x @ w`` for a user's line, "" for a library's (a program's operation's line)."""
    if not is_user_file(filename):
        return ""
    line = source_line(filename, lineno, "")
    return (
        f"{line.label or filename}, line {lineno}: {line.code}"
        if line.code
        else f"{line.label or filename}, line {lineno}"
    )


def _record_static(summary: FunctionCompiles, state: FunctionState, values: dict[str, StaticValue]) -> None:
    for name, value in values.items():
        summary.static_kinds[name] = value.kind
        summary.static_types[name] = value.type_name
        ids = summary.static_ids.setdefault(name, [])
        if value.by_identity and len(ids) < model.STATIC_VALUES_KEPT and f"{value.ident:#x}" not in ids:
            ids.append(f"{value.ident:#x}")
        text = value.text
        seen = state.static_seen.setdefault(name, set())
        if text in seen or len(seen) >= 100_000:
            continue
        seen.add(text)
        summary.static_value_counts[name] = len(seen)
        kept = summary.static_values.setdefault(name, [])
        if len(kept) < model.STATIC_VALUES_KEPT:
            kept.append(text)


def _record_baked(summary: FunctionCompiles, state: FunctionState, baked: dict[str, BakedValue] | None) -> None:
    """Keep the values the function carried, and the first distinct texts of each (the values seen)."""
    state.last_baked = dict(baked) if baked is not None else None
    for name, value in (baked or {}).items():
        seen = state.baked_seen.setdefault(name, [])
        if value.by_value and value.text not in seen and len(seen) < model.STATIC_VALUES_KEPT:
            seen.append(value.text)
    summary.baked_values = {name: list(texts) for name, texts in state.baked_seen.items() if len(texts) > 1}


def _record_changes(summary: FunctionCompiles, kind: CauseKind, changes: list[str]) -> None:
    examples = summary.change_examples.setdefault(kind.key, [])
    for change in changes[: model.CHANGES_KEPT]:
        if change not in examples and not _continued(examples, change) and len(examples) < 6:
            examples.append(change)
    if kind.types:
        for change in changes[: model.CHANGES_KEPT]:
            key = change.split(":", 1)[0]
            if key in summary.changed_arguments or len(summary.changed_arguments) < 50:
                summary.changed_arguments[key] = summary.changed_arguments.get(key, 0) + 1


def _continued(examples: list[str], change: str) -> bool:
    """Add "`n`: 1 -> 2" to the example "`n`: 0 -> 1" as "`n`: 0 -> 1 -> 2" (one field changing at every call
    reads as one sequence, not as one example per call); False when no example ends where this one starts."""
    what, _, values = change.partition(": ")
    parts = values.split(" -> ")
    if len(parts) != 2:
        return False
    for index, example in enumerate(examples):
        if example.startswith(f"{what}: ") and example.endswith(f" -> {parts[0]}"):
            if example.count(" -> ") < 8:
                examples[index] = f"{example} -> {parts[1]}"
            elif not example.endswith(" -> ..."):
                examples[index] = f"{example} -> ..."
            return True
    return False


def _called_from_user(frame: FrameType) -> bool:
    """True when the first frame outside JAX's own code, outward from jit's ``cache_miss``, is the user's:
    the user's line called the jitted callable (no library's code between)."""
    outer = frame.f_back
    try:
        for _ in range(100):
            if outer is None:
                return False
            if not outer.f_code.co_filename.startswith(jax_dirs()):
                return is_user_file(outer.f_code.co_filename)
            outer = outer.f_back
        return False
    finally:
        del outer
