"""``%%jax_debug``: ``jax.debug.breakpoint()`` in the cell stops and reads commands from the notebook.

Usage without IPython::

    with jaxmagic.probes.breakpoints(ask=input) as report:   # ask=None: record each hit, never stop
        f(x)                                                # f calls jax.debug.breakpoint()
    report.hits[0].frame.values                             # the values at the first hit

A backend of jaxmagic's is registered above JAX's own for the block
(``_jax/debugger_backends.py``). At a hit it reads commands with ``ask`` (the kernel's
``input``, which the front end answers): jdb's ``p``, ``pp``, ``l``, ``u``, ``d``, ``w``,
``c`` and ``q``, and any Python statement, run in the frame's values. ``q`` stops the
cell (``DebuggerQuit``, which the magic ends the cell on, cleanly).
"""

from __future__ import annotations

import contextlib
import dataclasses
import linecache
import pprint
import traceback
from collections.abc import Callable
from types import TracebackType

from jaxmagic._jax.debugger_backends import BreakFrame, batch_elements_told, batch_position, breakpoint_backend
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic.probes._debug.report import FrameView, values_table
from jaxmagic.probes._debug.values import summarize
from jaxmagic.probes._support import progress
from jaxmagic.probes._support.report_base import Report
from jaxmagic.report import Concern, failed, note
from jaxmagic.report.document import Block, Document, Facts, Paragraph, Section
from jaxmagic.report.wording import error_line, exception_chain, message_of
from jaxmagic.usercode.source import enclosing_function, is_jaxmagic_file, is_user_file, source_line

MAX_HITS = 100  # hits recorded in full; later ones are counted
END_OF_INPUT, INTERRUPT = "<end of input>", "<interrupt>"  # recorded as the commands that ended a prompt


class DebuggerQuit(Exception):
    """Raised by ``q`` (or an end of input) at a breakpoint: the cell stops here, and the magic ends it
    without an error."""

    def __init__(self) -> None:
        super().__init__("jaxmagic debugger: quit at a breakpoint")


class DebuggerInterrupted(Exception):
    """An interrupt while the prompt waited (the kernel's interrupt button, Ctrl-C), carried out of JAX's
    callback as an ``Exception``: JAX wraps whatever a callback raises into its own runtime error
    ("CpuCallback error"), a ``KeyboardInterrupt`` too, so the block turns it back into one when it ends."""

    def __init__(self) -> None:
        super().__init__("jaxmagic debugger: interrupted at a breakpoint")


@dataclasses.dataclass
class BreakpointHit:
    frame: FrameView  # the user's frame that called jax.debug.breakpoint(), with its values then
    # the user's lines above it when JAX traced it (the call that traced the function; later calls reuse the
    # program), outermost first ("file, line N, in f: code")
    callers: list[str]
    commands: list[str] = dataclasses.field(default_factory=list)  # what the user typed at this hit
    batch_index: list[int] = dataclasses.field(default_factory=list)  # under vmap: the element, outermost vmap first


@dataclasses.dataclass
class BreakpointReport(Report):
    """Every ``jax.debug.breakpoint()`` hit of a ``%%jax_debug`` cell."""

    hits: list[BreakpointHit] = dataclasses.field(default_factory=list)
    hit_count: int = 0
    interactive: bool = False  # commands were read from the notebook at each hit
    quit: bool = False  # the user typed q (or ended the input): the cell was stopped there
    # interrupted while a prompt waited (or before any breakpoint was reached): the cell ended with a KeyboardInterrupt
    interrupted: bool = False
    error: str = ""  # the cell's own error, if it raised one

    kind = "jax_debug"

    def concerns(self) -> list[Concern]:
        # A breakpoint hit is what the user asked for, not a problem: the cell's own error is the only failure.
        hits = [note(f"{self.hit_count} breakpoint hit(s)")] if self.hit_count else []
        quit_ = [note("quit at a breakpoint (q): the cell ended there")] if self.quit else []
        where = "at a breakpoint" if self.hit_count else "before any breakpoint was reached"
        stopped = [note(f"interrupted {where}: the cell ended there")] if self.interrupted else []
        error = [failed(f"the cell raised {self.error}")] if self.error and not self.quit else []
        return error + hits + quit_ + stopped

    @property
    def summary(self) -> str:
        if not self.hit_count:
            if self.interrupted:
                return "No jax.debug.breakpoint() was hit: the cell was interrupted (KeyboardInterrupt) before one ran."
            return "No jax.debug.breakpoint() was hit." + (f" The cell raised {self.error}." if self.error else "")
        first = self.hits[0].frame.line
        said = f"{self.hit_count} breakpoint hit(s), the first at `{first.code}` ({first.where})"
        if self.quit:
            ended = "the input ended" if self.hits and self.hits[-1].commands[-1:] == [END_OF_INPUT] else "q"
            return said + f"; quit there ({ended}), which ended the cell."
        if self.interrupted:
            return said + "; interrupted at its prompt, which ended the cell (KeyboardInterrupt)."
        return said + (f"; the cell raised {self.error}." if self.error else ".")

    def document(self) -> Document:
        sections = []
        for number, hit in enumerate(self.hits, 1):
            facts = [("line", hit.frame.line.code), ("where", hit.frame.line.where)]
            if hit.batch_index:
                facts.append(("vmap", "batch element " + ", ".join(map(str, hit.batch_index))))
            blocks: list[Block] = [Facts(facts)]
            if hit.frame.values:
                blocks.append(values_table(hit.frame))
            if hit.callers:
                # JAX records the frames of the trace: the call that traced the function, which later calls reuse
                blocks.append(Paragraph("Traced from (the call that traced it): " + "; ".join(hit.callers)))
            if hit.commands:
                blocks.append(Paragraph("Commands: " + ", ".join(f"`{c}`" for c in hit.commands)))
            sections.append(Section(f"Hit {number}", blocks))
        if self.hit_count > len(self.hits):
            sections.append(Section("More hits", [Paragraph(f"{self.hit_count - len(self.hits)} more, not recorded.")]))
        if self.interactive and self.hit_count:
            how = "Commands were read from the notebook at each hit."
        elif self.interactive and self.interrupted:
            how = (
                "jaxmagic served jax.debug.breakpoint() for this cell: a hit would have read commands from the "
                "notebook (the kernel's input box), but the cell was interrupted before one ran."
            )
        elif self.interactive:
            how = (
                "jaxmagic served jax.debug.breakpoint() for this cell: a hit would have read commands from the "
                "notebook (the kernel's input box), but none was reached - no breakpoint ran (a branch not taken, "
                "or none in the code the cell ran)."
            )
        else:
            how = "No input could be read here (no stdin, or --no-stop): each hit was recorded and the cell went on."
        sections.append(Section("How", [Paragraph(how)]))
        return Document(
            title="%%jax_debug",
            status=self.status,
            headline=self.summary,
            sections=sections,
            nothing_to_do=self.unexplained(),
        )


HELP = (
    "p EXPR / pp EXPR: print a value; l: list the source; u / d: up / down a frame of yours; w: where; "
    "c: continue; q: quit the cell (JupyterLab's input box cannot send Ctrl-D: type q); anything else runs as Python "
    "in the frame's values."
)


class _Session:
    """The command loop at one hit."""

    def __init__(
        self,
        frames: list[BreakFrame],
        namespace: dict[str, object],
        ask: Callable[[str], str],
        say: Callable[[str], None],
    ):
        self.frames, self.namespace, self.ask, self.say = frames, namespace, ask, say
        self.index = 0  # 0 = innermost
        self.commands: list[str] = []
        self.scopes: dict[int, dict[str, object]] = {}

    def scope(self) -> dict[str, object]:
        """The frame's values over the notebook's names; names a statement binds stay for the next command."""
        if self.index not in self.scopes:
            self.scopes[self.index] = {**self.namespace, **self.frames[self.index].locals}
        return self.scopes[self.index]

    def context(self, around: int = 2) -> None:
        frame = self.frames[self.index]
        self.say(f"> {source_line(frame.filename, frame.lineno, '').where}")
        for number in range(max(1, frame.lineno - around), frame.lineno + around + 1):
            text = linecache.getline(frame.filename, number).rstrip()
            if text or number <= frame.lineno:
                self.say(f"{'->' if number == frame.lineno else '  '} {number:4d} {text}")

    def run(self) -> None:
        self.context()
        while True:
            try:
                line = self.ask("(jaxmagic jdb) ").strip()
            except EOFError:  # the input ended (Ctrl-D, a closed stdin): the cell ends as `q` ends it
                self.commands.append(END_OF_INPUT)
                raise DebuggerQuit from None
            except KeyboardInterrupt:
                self.commands.append(INTERRUPT)
                raise DebuggerInterrupted from None
            self.commands.append(line)
            word, _, rest = line.partition(" ")
            if word in ("c", "cont", "continue"):
                return
            if word in ("q", "quit", "exit"):
                raise DebuggerQuit
            if word in ("u", "up", "d", "down"):
                step = 1 if word in ("u", "up") else -1
                if 0 <= self.index + step < len(self.frames):
                    self.index += step
                else:
                    self.say("At the outermost frame of yours." if step > 0 else "At the innermost frame.")
                self.context()
            elif word in ("l", "list", "ll"):
                self.context(5)
            elif word in ("w", "where", "bt"):
                for position, frame in reversed(list(enumerate(self.frames))):
                    line_ = source_line(frame.filename, frame.lineno, "")
                    self.say(f"{'>' if position == self.index else ' '} {line_.where}: {line_.code}")
            elif word in ("h", "help"):
                self.say(HELP)
            elif word in ("p", "pp") and rest:
                self.evaluate(rest, pretty=word == "pp")
            elif line:
                self.statement(line.removeprefix("!"))

    def evaluate(self, text: str, pretty: bool = False) -> None:
        try:
            value = eval(text, self.scope())  # the user's own expression, typed at the prompt
        except Exception as error:
            self.say(f"*** {error_line(error)}")
            return
        self.say(pprint.pformat(value) if pretty else repr(value))

    def statement(self, text: str) -> None:
        scope = self.scope()
        try:
            code = compile(text, "<jaxmagic jdb>", "single")
        except SyntaxError as error:
            self.say(f"*** {error_line(error)}")
            return
        try:
            exec(code, scope)  # the user's own statement, typed at the prompt; "single" prints expressions
        except Exception:
            self.say("*** " + traceback.format_exc().strip().splitlines()[-1])


class breakpoints:
    """Serve ``jax.debug.breakpoint()`` for a block: read commands with ``ask``, or record each hit."""

    def __init__(
        self,
        ask: Callable[[str], str] | None = None,
        namespace: dict[str, object] | None = None,
        say: Callable[[str], None] = print,
    ):
        self.ask, self.namespace, self.say = ask, namespace or {}, say
        self.report = BreakpointReport(interactive=ask is not None)
        self._stack = contextlib.ExitStack()

    def _hit(self, frames: list[BreakFrame]) -> None:
        mine = []
        for frame in frames:  # innermost first; past jaxmagic's frames is what ran the magic, not the cell
            if is_jaxmagic_file(frame.filename):
                break
            if is_user_file(frame.filename):
                mine.append(frame)
        self.report.hit_count += 1
        if not mine:
            return
        record = self.report.hit_count <= MAX_HITS
        commands: list[str] = []
        batch = list(batch_position())
        try:
            if self.ask is not None:
                if batch:
                    self.say(f"jaxmagic: breakpoint in batch element {', '.join(map(str, batch))} (vmap)")
                session = _Session(mine, self.namespace, self.ask, self.say)
                where = source_line(mine[0].filename, mine[0].lineno, "").where
                try:
                    with progress.waiting_for_user(f"the breakpoint at {where}"):
                        session.run()
                finally:
                    commands = session.commands
        finally:
            if record:
                self.report.hits.append(_hit_record(mine, commands, batch))
        # the frames (and their arrays) are dropped here: the report keeps only their description

    def __enter__(self) -> BreakpointReport:
        with contextlib.ExitStack() as stack:
            stack.enter_context(preserved_jax_state(()))
            quiet = (DebuggerQuit, DebuggerInterrupted)
            stack.enter_context(breakpoint_backend("jaxmagic", self._hit, quiet=quiet))
            stack.enter_context(batch_elements_told())
            progress.publish(lambda: ([("breakpoint hits", self.report.hit_count)], []))
            self._stack = stack.pop_all()
        return self.report

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._stack.__exit__(kind, error, tb)
        if error is not None:
            self.report.quit = ended_by_quit(error)
            at_prompt = not self.report.quit and _ended_by(error, DebuggerInterrupted)
            # an interrupt at the prompt, or before any breakpoint was reached: the user stopped it, nothing failed
            self.report.interrupted = at_prompt or isinstance(error, KeyboardInterrupt)
            if at_prompt:
                # the interrupt the user made, not JAX's wrapping of it ("INTERNAL: CpuCallback error"), raised
                # with the traceback of the cell's line that was running (no frame of jaxmagic's is left last)
                interrupt = KeyboardInterrupt("Interrupted by user at a jax.debug.breakpoint() prompt")
                raise interrupt.with_traceback(tb) from None
            if not self.report.quit and not self.report.interrupted:
                self.report.error = error_line(error)


def ended_by_quit(error: BaseException) -> bool:
    """Whether ``error`` is (or was caused by) a ``q`` typed at a breakpoint - also when JAX wrapped it into
    the error of a compiled call's callback."""
    return _ended_by(error, DebuggerQuit)


def _ended_by(error: BaseException, kind: type[DebuggerQuit] | type[DebuggerInterrupted]) -> bool:
    """``error`` is (or was caused by) ``kind``, also when JAX wrapped it into a callback's error: its text."""
    text = str(kind())
    return any(isinstance(current, kind) or text in message_of(current) for current in exception_chain(error))


def _hit_record(frames: list[BreakFrame], commands: list[str], batch: list[int]) -> BreakpointHit:
    inner = frames[0]
    line = source_line(inner.filename, inner.lineno, enclosing_function(inner.filename, inner.lineno))
    values = [s for name, value in inner.locals.items() if (s := summarize(name, value)) is not None]
    callers = [
        source_line(f.filename, f.lineno, enclosing_function(f.filename, f.lineno)) for f in reversed(frames[1:])
    ]
    return BreakpointHit(FrameView(line, values), [f"{c.where}: {c.code}" for c in callers], commands, batch)
