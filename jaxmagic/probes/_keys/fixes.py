"""The fix a key reuse calls for, read from the user's own lines.

The common shape (BlackJAX, NumPyro and Flax threads): ``key, sub = jax.random.split(key)``,
then a draw with ``key`` instead of ``sub``. The key carried forward is consumed by the draw and
split again at the next step, while the key split off for the draw is never used. That is found
in the source of the function holding the draw (``ast``), with the variables named as written;
where it is not that shape, there is no specific fix and the report keeps the general one.
"""

from __future__ import annotations

import ast
import dataclasses
import linecache

from jaxmagic.report import SourceLine


@dataclasses.dataclass
class SplitOffFix:
    drawn_with: str  # "key": the key the line draws with (the one carried forward)
    split_off: str  # "sub": the key split off for this use, never read
    split_line: int  # the line of ``key, sub = jax.random.split(key)``
    split_code: str
    draw_call: str  # "jax.random.normal(key, (3,))"
    fixed_call: str  # "jax.random.normal(sub, (3,))"

    @property
    def text(self) -> str:
        return (
            f"`{self.split_code}` splits off `{self.split_off}` for this draw, but `{self.draw_call}` draws "
            f"with `{self.drawn_with}`, the key carried forward, which the next split consumes again. Draw with "
            f"`{self.split_off}`: `{self.fixed_call}`, and keep `{self.drawn_with}` only for the next split"
        )


_PARSED: dict[str, tuple[int, int, str, ast.AST]] = {}  # filename -> (id and length of its lines, source, tree)


def _parsed(filename: str) -> tuple[str, ast.AST] | None:
    """The source and syntax tree of a file (a notebook cell), parsed once while linecache keeps its lines:
    a reuse recorded at every pass of a loop is explained at every pass."""
    lines = linecache.getlines(filename)
    if not lines:
        return None
    known = _PARSED.get(filename)
    if known is not None and known[0] == id(lines) and known[1] == len(lines):
        return known[2], known[3]
    source = "".join(lines)
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    if len(_PARSED) > 64:
        _PARSED.clear()
    _PARSED[filename] = (id(lines), len(lines), source, tree)
    return source, tree


def _enclosing_scope(tree: ast.AST, lineno: int) -> ast.AST:
    best: ast.AST = tree
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            end = getattr(node, "end_lineno", None) or node.lineno
            if node.lineno <= lineno <= end and node.lineno >= getattr(best, "lineno", 0):
                best = node
    return best


def _is_split(call: ast.AST) -> bool:
    if not isinstance(call, ast.Call):
        return False
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name == "split"


def _key_argument(call: ast.Call) -> ast.Name | None:
    if call.args and isinstance(call.args[0], ast.Name):
        return call.args[0]
    for keyword in call.keywords:
        if keyword.arg == "key" and isinstance(keyword.value, ast.Name):
            return keyword.value
    return None


def _draw_calls(scope: ast.AST, lineno: int) -> list[ast.Call]:
    """Calls on the line of a function with an attribute name (``jax.random.normal``, ``random.uniform``)."""
    found = []
    for node in ast.walk(scope):
        if isinstance(node, ast.Call) and node.lineno <= lineno <= (node.end_lineno or node.lineno):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr != "split" and _key_argument(node) is not None:
                found.append(node)
    return found


def _is_read(scope: ast.AST, name: str) -> bool:
    """Whether ``name`` is read anywhere in the scope (a loop repeats: before the split counts too)."""
    return any(
        isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Load) for node in ast.walk(scope)
    )


def split_off_fix(draw: SourceLine | None) -> SplitOffFix | None:
    """The specific fix when ``draw`` draws with the key a ``key, sub = split(key)`` before it carries
    forward while ``sub`` is never read; None when the code is not of that shape (or cannot be read)."""
    if draw is None or not draw.filename:
        return None
    parsed = _parsed(draw.filename)
    if parsed is None:
        return None
    source, tree = parsed
    scope = _enclosing_scope(tree, draw.lineno)
    for call in _draw_calls(scope, draw.lineno):
        key = _key_argument(call)
        if key is None:
            continue
        split = _split_before(scope, key.id, draw.lineno)
        if split is None:
            continue
        assign, names = split
        unused = [n for n in names if n not in (key.id, "_") and not _is_read(scope, n)]
        if len(unused) != 1:
            continue
        call_text = ast.get_source_segment(source, call) or ""
        key_text = ast.get_source_segment(source, key) or key.id
        if not call_text or call.lineno != call.end_lineno or key.lineno != call.lineno:
            continue
        start = key.col_offset - call.col_offset
        fixed = call_text[:start] + unused[0] + call_text[start + len(key_text) :]
        return SplitOffFix(
            drawn_with=key.id,
            split_off=unused[0],
            split_line=assign.lineno,
            split_code=(ast.get_source_segment(source, assign) or "").strip(),
            draw_call=call_text,
            fixed_call=fixed,
        )
    return None


def _split_before(scope: ast.AST, name: str, lineno: int) -> tuple[ast.Assign, list[str]] | None:
    """The last ``name, other = <...>.split(name)`` before ``lineno`` in the scope: (statement, target names)."""
    best = None
    for node in ast.walk(scope):
        if not (isinstance(node, ast.Assign) and node.lineno < lineno and _is_split(node.value)):
            continue
        if len(node.targets) != 1 or not isinstance(node.targets[0], (ast.Tuple, ast.List)):
            continue
        elements = node.targets[0].elts
        if not all(isinstance(e, ast.Name) for e in elements):
            continue
        names = [e.id for e in elements]  # type: ignore[attr-defined]
        source = _key_argument(node.value)  # type: ignore[arg-type]
        if name in names and source is not None and source.id == name:
            if best is None or node.lineno > best[0].lineno:
                best = (node, names)
    return best


_NOT_DRAWS = frozenset({"split", "fold_in", "key_data", "key_impl", "wrap_key_data", "clone"})


@dataclasses.dataclass
class SameKeyDrawsFix:
    key: str  # "k"
    calls: list[str]  # the draws with that key, as written: ["jax.random.normal(k)", "jax.random.uniform(k)"]
    fixed: list[str]  # the same draws, each with its own key

    @property
    def text(self) -> str:
        names = [f"{self.key}{i + 1}" for i in range(len(self.calls))]
        drawn = " and ".join(f"`{c}`" for c in self.calls)
        return (
            f"{drawn} {'both' if len(self.calls) == 2 else 'all'} draw with `{self.key}`, so they get the same random bits. Split it once for them, "
            f"`{', '.join(names)} = jax.random.split({self.key}{'' if len(names) == 2 else f', {len(names)}'})`, "
            f"and give each draw its own key: " + ", ".join(f"`{c}`" for c in self.fixed) + " (a suggestion: not tried)"
        )


def same_key_draws_fix(line: SourceLine | None, consumer: str) -> SameKeyDrawsFix | None:
    """When the line's draw (``consumer``, e.g. ``jax.random.uniform``) uses a key an earlier draw of the same
    function drew with, the key not being assigned between them: the draws, named as written."""
    if line is None or not line.filename:
        return None
    parsed = _parsed(line.filename)
    if parsed is None:
        return None
    source, tree = parsed
    scope = _enclosing_scope(tree, line.lineno)
    api = consumer.rsplit(".", 1)[-1]
    draws = [
        node
        for node in ast.walk(scope)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr not in _NOT_DRAWS
        and _key_argument(node) is not None
        and node.lineno <= line.lineno
    ]
    draws.sort(key=lambda n: (n.lineno, n.col_offset))
    reused = [n for n in draws if n.lineno <= line.lineno <= (n.end_lineno or n.lineno) and n.func.attr == api]  # type: ignore[attr-defined]
    if not reused:
        return None
    key = _key_argument(reused[-1])
    assert key is not None
    same = [n for n in draws if (_key_argument(n) or key).id == key.id and n.lineno <= reused[-1].lineno]
    if len(same) < 2 or _assigned_between(scope, key.id, same[0].lineno, reused[-1].lineno):
        return None
    texts, fixed = [], []
    for i, call in enumerate(same):
        text = ast.get_source_segment(source, call) or ""
        argument = _key_argument(call)
        if not text or argument is None or call.lineno != call.end_lineno:
            return None
        start = argument.col_offset - call.col_offset
        texts.append(text)
        fixed.append(text[:start] + f"{key.id}{i + 1}" + text[start + len(argument.id) :])
    return SameKeyDrawsFix(key.id, texts, fixed)


def _assigned_between(scope: ast.AST, name: str, first: int, last: int) -> bool:
    for node in ast.walk(scope):
        if isinstance(node, ast.Name) and node.id == name and isinstance(node.ctx, ast.Store):
            if first <= node.lineno <= last:
                return True
    return False


def draw_key_name(line: SourceLine | None, api: str) -> tuple[str, str]:
    """(the key's name, the call as written) of the ``api`` draw (``jax.random.normal``) on ``line``;
    ("", "") when the line has no such call with a plain name for its key."""
    if line is None or not line.filename:
        return "", ""
    parsed = _parsed(line.filename)
    if parsed is None:
        return "", ""
    source, tree = parsed
    scope = _enclosing_scope(tree, line.lineno)
    short = api.rsplit(".", 1)[-1]
    for call in _draw_calls(scope, line.lineno):
        key = _key_argument(call)
        if key is not None and isinstance(call.func, ast.Attribute) and call.func.attr == short:
            return key.id, ast.get_source_segment(source, call) or ""
    return "", ""


# A library whose layers draw from random streams the Module keeps (not from a key the user's line passes):
# module -> how a vmap splits those streams per element (flax.nnx: google/flax#4195)
_STREAM_SPLITS = {
    "flax.nnx": (
        "`{api}` draws from the random stream its Module keeps (`nnx.Rngs`), not from a key your line passes, so "
        "`jax.random.split` on your line does not reach it: split the streams across the batch where you vmap - "
        "`@nnx.split_rngs(splits=n)` above `@nnx.vmap(in_axes=(nnx.StateAxes({{nnx.RngState: 0, ...: None}}), 0))` "
        "(n the batch size: the random state gets one key per element, the rest of the Module is shared) - a "
        "suggestion: not tried (it changes how you vmap). If the same mask for every element is what you want, "
        "nothing needs changing."
    ),
    "flax.linen": (
        "`{api}` draws from the random stream the Module's scope keeps (`make_rng`), not from a key your line "
        "passes: with Linen's own vmap, `nn.vmap(..., variable_axes={{'params': None}}, split_rngs={{'params': "
        "False, 'dropout': True}})`, each element gets its own stream - a suggestion: not tried (it changes how "
        "you vmap). If the same mask for every element is what you want, nothing needs changing."
    ),
}


def shared_key_fix(line: SourceLine | None, api: str) -> tuple[str, str]:
    """(the key's name, the fix) for a draw under vmap with one key for the whole batch. A library layer that
    draws from its own streams (``flax.nnx.Dropout.__call__``) gets the library's way to split them."""
    stream = next((words for module, words in _STREAM_SPLITS.items() if api.startswith(module + ".")), None)
    if stream is not None:
        return "", stream.format(api=api)
    key, call = draw_key_name(line, api)
    if not key:
        return "", (
            "Give each element of the batch its own key: split the key into one key per element "
            "(`jax.random.split(key, n)`, n the batch size) and pass them through `jax.vmap` with the data "
            "(a suggestion: not tried). If the same numbers for every element are what you want, nothing needs "
            "changing."
        )
    return key, (
        f"`{call}` draws with `{key}`, which is not batched: vmap runs the draw once and every element gets "
        f"its numbers. Split `{key}` into one key per element (`jax.random.split({key}, n)`, n the batch size) "
        f"and pass those keys through `jax.vmap` beside the data (in_axes 0), drawing with each element's own "
        f"key inside (a suggestion: not tried). If the same numbers for every element are what you want, "
        f"nothing needs changing."
    )
