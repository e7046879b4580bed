"""Which frames of a traceback are the user's own code.

The user's code is the notebook cells and the files no installed package holds (their own modules,
a project installed editable): JAX, IPython, the standard library, installed packages - wherever
they were imported from - and jaxmagic itself are not (``usercode.code_owner`` decides whose a file
is). A report shows the lines a person wrote.
"""

from __future__ import annotations

import ast
import functools
import linecache
import os
import re
import sys
import traceback
from collections.abc import Callable
from types import CodeType, FrameType, TracebackType
from typing import Any

from jaxmagic.report import SourceLine
from jaxmagic.usercode.code_owner import JAXMAGIC_DIR, kind_of_file


@functools.lru_cache(maxsize=16_384)  # asked for every frame walked: each file name is judged once
def is_user_file(filename: str) -> bool:
    """True for notebook cells and the user's own files, False for libraries, JAX and jaxmagic."""
    return kind_of_file(filename) == "user"


def innermost_user_frame(frame: FrameType | None) -> FrameType | None:
    """``frame``, or the nearest frame it was called from, that runs the user's code; None if none does."""
    while frame is not None and not is_user_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def names_in_scope(frame: FrameType) -> dict[str, object]:
    """The variables the line running in ``frame`` can name: its locals, and for a module's or a
    cell's own code its globals too. A comprehension at the top of a cell runs inline (Python
    3.12+, PEP 709): while it runs, the cell frame's ``f_locals`` holds only the comprehension's
    own variables, not the cell's namespace (``[apply(params, rng, x) for _ in range(3)]``)."""
    try:
        local = dict(frame.f_locals)
    except Exception:  # a frame whose locals cannot be read
        return {}
    if frame.f_code.co_name != "<module>" or frame.f_locals is frame.f_globals:
        return local
    return {**frame.f_globals, **local}


# How far outward a call made by a library's wrapper is followed to the user's line that called the
# wrapper: eqx.filter_jit, nnx.jit and a numpyro handler are a few frames deep.
_WRAPPER_DEPTH = 12


@functools.lru_cache(maxsize=16_384)
def code_kind(filename: str) -> str:
    """Whose code a file is: "user", "jaxmagic", "jax" (jax and jaxlib: JAX's own operations and
    helpers), "python" (frozen and generated code) or "library" (any other installed package), by
    what its module is (``usercode.code_owner``), wherever it was imported from."""
    return kind_of_file(filename)


def user_call_site(frame: FrameType | None) -> FrameType | None:
    """The user's frame behind a call that ``frame`` made: ``frame`` itself when it runs the user's
    code; when it runs a library's (the wrapper ``eqx.filter_jit`` or ``nnx.jit`` puts around the
    user's function, ``MCMC.run``), the nearest user frame reached through that library's frames
    alone. None when JAX's own code or jaxmagic's made the call (``jnp`` helpers, a library calling
    ``jnp``), or no user frame is near: those calls are not the user's."""
    for _ in range(_WRAPPER_DEPTH):
        if frame is None:
            return None
        kind = code_kind(frame.f_code.co_filename)
        if kind == "user":
            return frame
        if kind != "library" and kind != "python":
            return None
        frame = frame.f_back
    return None


def running_shell() -> Any:
    """The running IPython shell, or None. Never imports IPython: without it loaded there is no shell."""
    ipython = sys.modules.get("IPython")
    get_ipython = getattr(ipython, "get_ipython", None)
    try:
        return get_ipython() if get_ipython is not None else None
    except Exception:
        return None


def cell_label(filename: str) -> str:
    """ "In [3]" when ``filename`` is a notebook cell of the running IPython, else ""."""
    compiler = getattr(running_shell(), "compile", None)
    format_name = getattr(compiler, "format_code_name", None)
    if format_name is None:
        return ""
    try:
        named = format_name(filename)
    except Exception:
        return ""
    if not named:
        return ""
    _kind, name = named  # ("Cell", "In[3]")
    return name.replace("In[", "In [")


# IPython keeps a cell's lines as it rewrote them: ``%jax_bisect f(x)`` is
# ``get_ipython().run_line_magic('jax_bisect', 'f(x)')`` in linecache.
_MAGIC_CALL = re.compile(
    r"get_ipython\(\)\.run_line_magic\((?P<name>'[^']*'|\"[^\"]*\"), (?P<line>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\)"
)
_SHELL_CALL = re.compile(r"get_ipython\(\)\.system\((?P<line>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")\)")


def as_typed(code: str) -> str:
    """A cell line as the user typed it: IPython's rewrite of a magic (``%name args``) or a shell
    escape (``!cmd``) put back; any other line unchanged."""
    if "get_ipython()" not in code:
        return code

    def magic(match: re.Match[str]) -> str:
        try:
            name, line = ast.literal_eval(match["name"]), ast.literal_eval(match["line"])
        except (ValueError, SyntaxError):
            return match[0]
        return f"%{name} {line}".rstrip()

    def shell(match: re.Match[str]) -> str:
        try:
            return "!" + ast.literal_eval(match["line"])
        except (ValueError, SyntaxError):
            return match[0]

    return _SHELL_CALL.sub(shell, _MAGIC_CALL.sub(magic, code))


def source_line(filename: str, lineno: int, function: str) -> SourceLine:
    code = as_typed(linecache.getline(filename, lineno).strip())
    return SourceLine(filename=filename, lineno=lineno, function=function, code=code, label=cell_label(filename))


def line_of(frame: FrameType | None, lineno: int | None = None) -> SourceLine | None:
    """The line ``frame`` is running (or line ``lineno`` of its code, recorded earlier), or None for no frame."""
    if frame is None:
        return None
    return source_line(frame.f_code.co_filename, lineno or frame.f_lineno, frame.f_code.co_name)


def innermost_user_line(frame: FrameType | None) -> SourceLine | None:
    """The line of the user's code running in ``frame`` or nearest below it on the stack; None if none."""
    return line_of(innermost_user_frame(frame))


def user_lines_of_stack(frame: FrameType | None) -> list[SourceLine]:
    """The user's lines on the stack from ``frame`` outwards, outermost first. A frame of jaxmagic's
    own outside the user's ends them: what is further out ran the magic (a notebook's
    ``get_ipython().run_cell_magic(...)`` line), not the cell's code."""
    lines = []
    while frame is not None:
        filename = frame.f_code.co_filename
        if is_user_file(filename):
            lines.append(source_line(filename, frame.f_lineno, frame.f_code.co_name))
        elif lines and is_jaxmagic_file(filename):
            break
        frame = frame.f_back
    return lines[::-1]


def outermost_user_frame(frame: FrameType | None) -> FrameType | None:
    """The frame of ``user_lines_of_stack(frame)``'s first line (the outermost user frame, by the same rule),
    found without reading a line or a line number: a caller that caches the line by the frame's code and
    instruction (a loop's eager draws) pays for the walk alone. None if no frame is the user's."""
    found = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if is_user_file(filename):
            found = frame
        elif found is not None and is_jaxmagic_file(filename):
            break
        frame = frame.f_back
    return found


def runs_a_cell_magic(filename: str, lineno: int) -> bool:
    """Whether this line of a cell is IPython's call of a cell magic (``%%jax_nans`` rewritten as
    ``get_ipython().run_cell_magic(...)``): the magic's call, not a line of the user's code. An error the
    magic raises again passes through it, so it heads the traceback."""
    return linecache.getline(filename, lineno).lstrip().startswith("get_ipython().run_cell_magic(")


def enclosing_function(filename: str, lineno: int) -> str:
    """The name of the innermost function whose body holds this line of a file or cell ("" at the top
    level, or when the source cannot be read): for frames recorded without their code (JAX's debugger)."""
    tree = _parsed(filename, "".join(linecache.getlines(filename)))
    if tree is None:
        return ""
    name, start = "", 0
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            end = node.end_lineno or node.lineno
            if node.lineno <= lineno <= end and node.lineno >= start:  # the innermost: the latest start
                name, start = (node.name if not isinstance(node, ast.Lambda) else "<lambda>"), node.lineno
    return name


@functools.lru_cache(maxsize=64)
def _parsed(filename: str, text: str) -> ast.Module | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def is_jaxmagic_file(filename: str) -> bool:
    return os.path.abspath(filename).startswith(JAXMAGIC_DIR)


def user_lines(tb: TracebackType | None, below_jaxmagic: bool = True) -> list[SourceLine]:
    """The user's frames of a traceback, outermost first.

    When jaxmagic itself called the user's code again (a re-run), only the
    frames below jaxmagic's last frame belong to that call (``below_jaxmagic``;
    False when jaxmagic's own frames sit between the user's, as a checker's do).
    """
    if tb is None:
        return []
    frames: list[traceback.FrameSummary] = list(traceback.extract_tb(tb))
    ours = [i for i, f in enumerate(frames) if is_jaxmagic_file(f.filename)]
    if ours and below_jaxmagic:
        frames = frames[ours[-1] + 1 :]
    return [
        source_line(f.filename, f.lineno or 0, f.name)
        for f in frames
        if is_user_file(f.filename) and not runs_a_cell_magic(f.filename, f.lineno or 0)
    ]


def user_tracebacks(tb: TracebackType | None) -> list[TracebackType]:
    """The entries of a traceback whose frames run the user's code, outermost first (with their frames)."""
    found = []
    while tb is not None:
        if is_user_file(tb.tb_frame.f_code.co_filename):
            found.append(tb)
        tb = tb.tb_next
    return found


def first_library_function(tb: TracebackType | None) -> str:
    """Name of the first non-user function called from the innermost user frame.

    For ``jnp.linalg.norm(b)`` failing deep inside JAX this is ``norm``: the
    library call the user's line made.
    """
    if tb is None:
        return ""
    frames = traceback.extract_tb(tb)
    last_user = max((i for i, f in enumerate(frames) if is_user_file(f.filename)), default=None)
    if last_user is None or last_user + 1 >= len(frames):
        return ""
    return frames[last_user + 1].name


def _own_code(fun: object) -> CodeType | None:
    code = getattr(fun, "__code__", None)
    if code is None:
        call = next((vars(cls)["__call__"] for cls in type(fun).__mro__ if "__call__" in vars(cls)), None)
        code = getattr(call, "__code__", None)  # a callable object: where its class's __call__ is defined
    return code


def defining_code(fun: object, is_user: Callable[[str], bool] = is_user_file) -> tuple[CodeType | None, str]:
    """(the code object where the function jax.jit was given is defined, what was wrapped around it).

    jit is often given a wrapper: ``functools.partial(f, ...)``, ``jax.grad(f)``
    (whose wrappers keep ``__wrapped__``), a jitted function, a decorator made
    with ``functools.wraps``. What was written by the user is decided by where
    the innermost function of that chain is defined, never by its name.
    """
    chain, wrapper = [], ""
    for _ in range(32):
        if fun is None:
            break
        if isinstance(fun, functools.partial):
            wrapper = wrapper or "functools.partial"
            fun = fun.func
            continue
        code = _own_code(fun)
        if code is not None:
            chain.append(code)
        inner = getattr(fun, "__wrapped__", None)
        if inner is None or inner is fun:
            break
        if code is not None and not is_user(code.co_filename):
            wrapper = wrapper or "a JAX transformation of it"
        fun = inner
    users = [code for code in chain if is_user(code.co_filename)]
    if users:
        return users[-1], wrapper
    return (chain[0] if chain else None), ""


def whole_expression(line: str, start: int, end: int, called: str = "") -> str:
    """The part of a source ``line`` between byte columns ``start`` and ``end`` (as Python and JAX record
    them), only if it is one whole expression of that line; else the one call on the line of a function
    named ``called`` (``log`` finds ``jnp.log(x)``); else "". JAX's recorded columns can be wrong (inside a
    lambda, a notebook kernel's cell: ``ax.jit(lam`` out of ``jax.jit(lambda x: jnp.log(x))``): a quoted
    part of a line is code of that line or is not quoted."""
    encoded = line.encode()
    part = encoded[start:end].decode(errors="replace").strip()
    stripped = line.strip()
    tree = None
    for statement in (stripped, stripped + " pass"):  # the head of a block (`if jnp.any(x < 0):`) with a body
        try:
            tree = ast.parse(statement)
            break
        except SyntaxError:
            continue
    if tree is None:  # a line that is not a statement alone (the head of a block, part of a call)
        try:
            ast.parse(part, mode="eval")
        except SyntaxError:
            return ""
        return part
    expressions = [
        node for node in ast.walk(tree) if isinstance(node, ast.expr) and node.end_lineno == 1 == node.lineno
    ]
    segments = {stripped.encode()[n.col_offset : n.end_col_offset].decode(errors="replace") for n in expressions}
    if part and part in segments:
        return part
    if called:
        calls = [
            n
            for n in expressions
            if isinstance(n, ast.Call) and getattr(n.func, "attr", getattr(n.func, "id", "")) == called
        ]
        if len(calls) == 1:
            return stripped.encode()[calls[0].col_offset : calls[0].end_col_offset].decode(errors="replace")
    return ""


def quoted_code(line: SourceLine) -> str:
    """The code of ``line`` as a sentence quotes it: the line without its comment when it is a whole statement
    (or the head of a block); the body of its lambda when the frame ran a lambda on a line that is a piece of
    a longer statement (``("NumPy", lambda: f(np.ones(3))),`` in a list of cases quotes ``f(np.ones(3))``);
    the piece itself when it is one expression once a trailing comma goes; else "" - a headline never ends in
    a fragment cut from a statement. Whether the line is a whole statement is read from its file (a cell's
    source), where there is one: a piece of a list can parse alone (`(a, b),` is a tuple)."""
    code = line.code.split("  #")[0].strip()
    whole = _whole_statement(line.filename, line.lineno)
    if whole is True:
        return code
    if whole is None:  # no source to tell by: the line alone
        for text in (code, code + " pass"):
            try:
                ast.parse(text)
                return code
            except SyntaxError:
                continue
    piece = code.rstrip(",").strip()
    try:
        tree = ast.parse(piece, mode="eval")
    except SyntaxError:
        return ""
    lambdas = [node for node in ast.walk(tree) if isinstance(node, ast.Lambda)]
    if line.function == "<lambda>" and len(lambdas) == 1:
        return ast.get_source_segment(piece, lambdas[0].body) or piece
    return piece


def _whole_statement(filename: str, lineno: int) -> bool | None:
    """Whether line ``lineno`` of ``filename`` is a statement on its own (or the head of a compound one) in
    its file; None when the file's source cannot be read or parsed."""
    text = "".join(linecache.getlines(filename))
    tree = _parsed(filename, text) if text else None
    if tree is None:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.stmt) and node.lineno <= lineno <= (node.end_lineno or node.lineno):
            body = [
                child for field in ("body", "orelse", "finalbody", "handlers") for child in getattr(node, field, [])
            ]
            inner = [child for child in body if child.lineno <= lineno <= (child.end_lineno or child.lineno)]
            if inner:
                continue  # a statement inside it holds the line: that one decides
            head_end = min((child.lineno for child in body), default=(node.end_lineno or node.lineno) + 1) - 1
            return node.lineno == lineno and (node.end_lineno == lineno or head_end == lineno)
    return None
