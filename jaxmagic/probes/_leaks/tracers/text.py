"""Reading JAX's tracer error messages: the one place that parses their text.

JAX puts the facts a person needs into the message of a tracer error, as
sentences rather than attributes: the traced function and the transformation
("The error occurred while tracing the function clip_positive at
/path:4 for jit."), the arguments the value depends on ("depends on the values
of the arguments x and limit."), where a leaked value was created, and - for
``jax.checking_leaks()`` - a chain of "<list 4665787840> is referred to by ..."
lines per leaked tracer. The functions here turn those sentences into data;
the tests in tests/test_tracer_text.py pin the exact texts of JAX 0.12.
"""

from __future__ import annotations

import dataclasses
import io
import keyword
import re
import tokenize

_TRACING = re.compile(
    r"The error occurred while tracing the function (?P<function>\S+)"
    r"(?: at (?P<file>.+?):(?P<line>\d+))? for (?P<transformation>[\w.]+)\."
)
_DEPENDS = re.compile(r"depends on the values? of the arguments? (?P<args>.+?)\.(?=\s|$)")
# vmap (and other non-jaxpr traces) say where the tracer was made instead
_CREATED_ON = re.compile(
    r"This (?P<tracer>\w+) with object id \d+ was created on line:\s*(?P<file>.+?):(?P<line>\d+)(?::\d+)?"
    r" \((?P<function>[^)]*)\)"
)
# UnexpectedTracerError
_LEAKED_FROM = re.compile(
    r"The function being traced when the value leaked was (?P<function>\S+) traced for "
    r"(?P<transformation>[\w.]+)\."
)
_LEAK_CREATED = re.compile(
    r"The leaked intermediate value was created on line (?P<file>.+?):(?P<line>\d+)"
    r"(?::\d+)? \((?P<function>[^)]*)\)"
)
_ESCAPED_TYPE = re.compile(r"intermediate value with type (?P<aval>\S+) wrapped in a (?P<tracer>\w+)")
# jax.checking_leaks()
_LEAK_HEADER = re.compile(r"^Leaked (?P<what>\w+) (?P<trace>\w+)\. Leaked tracer\(s\):")
_TRACER_REPR = re.compile(r"^(?P<tracer>\w+)\((?P<aval>.*)\)$")
_CHAIN_LINE = re.compile(r"^<(?P<type>[\w.]+) (?P<id>\d+)> is referred to by (?P<holder>.*)$")
_OBJECT_REF = re.compile(r"<(?P<type>[\w.]+) (?P<id>\d+)>")

# Tracer classes by the transformation that makes them.
TRANSFORMATION_OF_TRACER = {
    "DynamicJaxprTracer": "jit",
    "JitTracer": "jit",
    "JaxprTracer": "jit",
    "BatchTracer": "vmap",
    "VmapTracer": "vmap",
    "JVPTracer": "jvp/grad",
    "LinearizeTracer": "grad",
    "GradTracer": "grad",
    "JaxprTracerLinearize": "grad",
}


def short_qualname(name: str) -> str:
    """``"make.<locals>.Model.__call__"`` -> ``"Model.__call__"``: the part a person wrote."""
    return name.rsplit("<locals>.", 1)[-1]


def one_line(text: str) -> str:
    """``text`` with all whitespace runs (JAX wraps its messages) collapsed to one space."""
    return " ".join(text.split())


@dataclasses.dataclass
class TracingContext:
    """Which function was being traced, for which transformation, and what the value depends on."""

    function: str = ""  # "clip_positive", "<lambda>", "<unknown>" (a callable object)
    file: str = ""  # where the function is defined ("" if JAX did not say)
    line: int = 0
    transformation: str = ""  # "jit", "scan", "vmap", ...
    depends_on: list[str] = dataclasses.field(default_factory=list)  # argument names
    # from "was created on line ...": where the tracer was made (a vmap's inputs: at the vmap call), which is
    # not the traced function's definition, nor always inside it
    created_on: bool = False


def tracing_context(message: str) -> TracingContext:
    """The "while tracing the function ..." and "depends on ..." facts of a tracer error message.

    Fields stay empty for what the message does not say (e.g. a vmap error
    names no arguments; a NonConcreteBooleanIndexError names no function).
    """
    flat = one_line(message)
    context = TracingContext()
    match = _TRACING.search(flat)
    if match:
        context.function = match["function"]
        context.file = match["file"] or ""
        context.line = int(match["line"] or 0)
        context.transformation = match["transformation"]
    else:
        created = _CREATED_ON.search(flat)
        if created:
            context.function = short_qualname(created["function"])
            context.file, context.line = created["file"], int(created["line"])
            context.transformation = TRANSFORMATION_OF_TRACER.get(created["tracer"], "")
            context.created_on = True
    depends = _DEPENDS.search(flat)
    if depends:
        context.depends_on = split_names(depends["args"])
    return context


def split_names(text: str) -> list[str]:
    """``"x, y and z"`` -> ``["x", "y", "z"]``; brackets (``p['a, b']``) are kept whole."""
    names, current, depth = [], "", 0
    i = 0
    while i < len(text):
        char = text[i]
        depth += char in "([{"
        depth -= char in ")]}"
        if depth == 0 and text.startswith(", ", i):
            names.append(current)
            current, i = "", i + 2
            continue
        if depth == 0 and text.startswith(" and ", i):
            names.append(current)
            current, i = "", i + 5
            continue
        current += char
        i += 1
    names.append(current)
    return [n.strip() for n in names if n.strip()]


def english_list(names: list[str], code: bool = True) -> str:
    """``["x", "limit"]`` -> "`x` and `limit`" (JAX's own way of listing argument names)."""
    shown = [f"`{n}`" if code else n for n in names]
    if len(shown) <= 1:
        return "".join(shown)
    return ", ".join(shown[:-1]) + " and " + shown[-1]


@dataclasses.dataclass
class EscapedTracer:
    """The facts of an UnexpectedTracerError message."""

    aval: str = ""  # "float32[3]"
    tracer_type: str = ""  # "DynamicJaxprTracer"
    function: str = ""  # the function being traced when the value leaked
    transformation: str = ""
    created_file: str = ""  # where the leaked value was created
    created_line: int = 0
    created_function: str = ""  # "Model.__call__"


def escaped_tracer(message: str) -> EscapedTracer:
    flat = one_line(message)
    facts = EscapedTracer()
    if match := _ESCAPED_TYPE.search(flat):
        facts.aval, facts.tracer_type = match["aval"], match["tracer"]
    if match := _LEAKED_FROM.search(flat):
        facts.function, facts.transformation = match["function"], match["transformation"]
    if match := _LEAK_CREATED.search(flat):
        facts.created_file, facts.created_line = match["file"], int(match["line"])
        facts.created_function = short_qualname(match["function"])
    return facts


@dataclasses.dataclass
class ChainLink:
    """One "<list 4665787840> is referred to by <dict 4665>['h']" line."""

    child_type: str
    child_id: int
    holder: str  # the text after "is referred to by"

    @property
    def holder_ids(self) -> list[int]:
        """Ids of the objects named in ``holder`` (the parent object), in order."""
        return [int(m["id"]) for m in _OBJECT_REF.finditer(self.holder)]


@dataclasses.dataclass
class LeakBlock:
    """One leaked tracer of a ``jax.checking_leaks()`` error."""

    tracer_type: str  # "JitTracer" (the repr's name)
    aval: str  # "float32[3]"
    tracer_id: int  # id of the leaked tracer object (0 if JAX named none)
    context: TracingContext
    chain: list[ChainLink]
    frame_holders: list[str]  # "the local variable 'leaked', a list containing it, of the frame ..."
    text: str  # the block as JAX wrote it

    def held_through_tracer(self, tracer_ids: set[int]) -> int | None:
        """The id of another leaked tracer this one is reachable from (kept alive by), if any."""
        for link in self.chain:
            if link.child_id != self.tracer_id and link.child_id in tracer_ids:
                return link.child_id
        return None


def is_leak_message(message: str) -> bool:
    return bool(_LEAK_HEADER.match(message.lstrip()))


def tracer_aval(inner: str) -> str:
    """The abstract value inside a tracer's repr, whole: ``float32[3]``, ``float32[] (batched float32[2])``.

    ``VmapTracer(aval=float32[], batched=float32[2])`` and
    ``GradTracer(primal=2.0, typeof(tangent)=f32[])`` name it by field.
    """
    inner = inner.strip().lstrip("~")
    aval = _field(inner, "aval")
    if aval:
        batched = _field(inner, "batched")
        return aval + (f" (batched {batched})" if batched else "")
    tangent = _field(inner, "typeof(tangent)")
    if tangent:
        return tangent
    return inner


def _field(inner: str, name: str) -> str:
    """The value of ``name=`` in a repr's fields, whole: up to the next comma outside brackets, so
    ``aval=f32[16,32], batched=...`` gives ``f32[16,32]`` (not ``f32[16``)."""
    match = re.search(rf"(?:^|, ){re.escape(name)}=", inner)
    if match is None:
        return ""
    depth, start = 0, match.end()
    for position in range(start, len(inner)):
        char = inner[position]
        if char in "[({":
            depth += 1
        elif char in "])}":
            depth -= 1
        elif char == "," and depth == 0:
            return inner[start:position].strip()
    return inner[start:].strip()


def leak_trace_kind(message: str) -> str:
    """ "DynamicJaxprTrace" from "Leaked trace DynamicJaxprTrace. ..." ("" if not a leak message)."""
    match = _LEAK_HEADER.match(message.lstrip())
    return match["trace"] if match else ""


def leak_blocks(message: str) -> list[LeakBlock]:
    """Each leaked tracer of a "Leaked trace ..." message, with its reference chain."""
    if not is_leak_message(message):
        return []
    body = message.lstrip().split("\n", 1)[1] if "\n" in message.strip() else ""
    blocks = []
    for chunk in re.split(r"\n\s*\n", body.strip()):
        lines = [line for line in chunk.strip().splitlines() if line.strip()]
        if not lines:
            continue
        head = _TRACER_REPR.match(lines[0].strip())
        tracer_type, aval = (head["tracer"], tracer_aval(head["aval"])) if head else (lines[0].strip(), "")
        chain, frames, context_lines, tracer_id = [], [], [], 0
        for line in lines[1:]:
            link = _CHAIN_LINE.match(line.strip())
            if link is None:
                context_lines.append(line)
                continue
            tracer_id = tracer_id or int(link["id"])  # the first line starts at the leaked tracer
            if link["holder"].startswith("the local variable "):
                frames.append(link["holder"])
                continue
            chain.append(ChainLink(link["type"], int(link["id"]), link["holder"]))
        blocks.append(
            LeakBlock(
                tracer_type, aval, tracer_id, tracing_context("\n".join(context_lines)), chain, frames, chunk.strip()
            )
        )
    return blocks


def without_ids(text: str) -> str:
    """JAX's "<list 4665787840>" references as "<list>": ids mean nothing to a reader."""
    return _OBJECT_REF.sub(lambda m: f"<{m['type']}>", text)


def names_in(code: str) -> list[str]:
    """The names (not keywords) on a line of Python, in order, each once."""
    names: list[str] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(code.strip() + "\n").readline):
            if token.type == tokenize.NAME and not keyword.iskeyword(token.string) and token.string not in names:
                names.append(token.string)
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    return names


# "Argument of type <class '...DynamicJaxprTracer'> is not a valid JAX type", "JitTracer(float32[3])"
_TRACER_MENTION = re.compile(r"\b(?P<tracer>[A-Z]\w*Tracer)\b")


_JAX_TRACERS = set(TRANSFORMATION_OF_TRACER) | {"Tracer", "LinearizeTracer", "JVPTracer", "EvalTracer"}


def mentioned_tracer(message: str) -> str:
    """The JAX tracer class a message names (``DynamicJaxprTracer``, ``JitTracer(float32[3])``), "" if none."""
    for match in _TRACER_MENTION.finditer(message):
        if match["tracer"] in _JAX_TRACERS:
            return match["tracer"]
    return ""


def mentions_tracer(message: str) -> bool:
    """True when a message speaks of a JAX tracer: a tracer class (``DynamicJaxprTracer``) or JAX's
    words for one ("... is not available on traced array with shape float32[3]")."""
    return bool(mentioned_tracer(message)) or "traced array with shape" in message


# "This value became a tracer due to JAX operations on these lines:\n\n  operation a:i32[] = add 3:i32[] 1:i32[]
#     from line /tmp/m.py:7:8 (f)"
_OPERATION = re.compile(
    r"operation (?P<operation>[^\n]*?)\n\s*from line (?P<file>.+?):(?P<line>\d+)(?::\d+)? \((?P<function>[^)]*)\)"
)
_LITERAL = re.compile(r"^(?:-?[\d.]+(?:e[-+]?\d+)?|True|False|inf|-inf|nan):")


@dataclasses.dataclass
class TracedOperation:
    """One operation JAX names as a reason a value became a tracer, in the message's order."""

    operation: str  # "a:i32[] = add 3:i32[] 1:i32[]"
    file: str
    line: int
    function: str
    static_inputs: bool  # every input is a literal (a static value JAX turned into a constant)


def traced_operations(message: str) -> list[TracedOperation]:
    """The operations of "This value became a tracer due to JAX operations on these lines", in order."""
    found = []
    for match in _OPERATION.finditer(message):
        operation = match["operation"].strip()
        right = re.sub(r"\[[^\]]*\]", "", operation.split(" = ", 1)[-1])  # drop [axes=(0,)] and the like
        inputs = right.split()[1:]
        found.append(
            TracedOperation(
                operation,
                match["file"],
                int(match["line"]),
                short_qualname(match["function"]),
                bool(inputs) and all(_LITERAL.match(token) for token in inputs),
            )
        )
    return found
