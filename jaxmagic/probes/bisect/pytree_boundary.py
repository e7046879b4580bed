"""What a jitted call receives, against what the same call receives op by op.

``jax.jit`` does not hand the function the arguments it was given: it flattens them
(a dict by its *sorted* keys, a custom pytree node by its flatten function), turns
every leaf into an array (a Python ``int`` into a weakly typed int32, a float64 NumPy
array into float32 without x64) and rebuilds the tree from the flat list. The
function body runs once, when it is traced: a NumPy random draw, ``time.time()`` or a
Python counter in the body is frozen into the program. An eager run sees none of
this. So a difference between a jitted and an eager run can be made before the
compiled program runs at all; :func:`before_program` tells, by re-running the eager
function with what jit gave it, and names the stage, the user's line and a fix.
"""

from __future__ import annotations

import ast
import dataclasses
import hashlib
import inspect
import random
import textwrap
import types
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from jaxmagic._jax import compat
from jaxmagic.probes._support import attribution
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance
from jaxmagic.report.source import is_user_file, source_line

STAGES = {
    "pytree_order": "the pytree flattening order of a dict argument (jit iterates its keys sorted)",
    "custom_node": "a custom pytree node, rebuilt by its unflatten function under jit",
    "argument_dtypes": "the arguments' dtypes (jit turns Python numbers and NumPy arrays into JAX arrays)",
    "trace_time_python": "Python code in the function that runs once, when jit traces it",
    "nondeterministic": "the call itself: it gives new numbers at each run, jitted or not",
    "stale_trace": "a Python value read when jit traced the function (a global, a closed-over value, a static "
    "argument), changed since: jit reuses the program traced with the old value",
    "none": "not found before the program: what the runs receive does not explain the difference",
    "not_checked": "could not tell",
}

_NONDETERMINISTIC = ("random", "time", "perf_counter", "monotonic", "datetime", "now", "urandom", "uuid")


@dataclasses.dataclass
class ReorderedDict:
    """A dict in the arguments whose keys jit iterates in another order than the call gave them."""

    path: str  # "d", "params['encoder']"
    given_order: list[str]
    jit_order: list[str]
    # sorting this dict alone makes eager give jit's numbers (checked when several dicts are reordered)
    explains: bool | None = None


@dataclasses.dataclass
class BeforeProgram:
    """Whether a jit/eager difference is already there in what the runs receive, and where."""

    stage: str = "not_checked"  # a key of STAGES
    explains: bool = False  # True: this stage explains the difference; compilation is not the cause
    checked: str = ""  # "checked: ... -> outcome"
    line: SourceLine | None = None  # the user's line that depends on it (order, draw, counter)
    line_how: str = ""  # how the line was found
    provenance: Provenance | None = None
    fix: str = ""
    dicts: list[ReorderedDict] = dataclasses.field(default_factory=list)
    argument: str = ""  # the argument it concerns ("d", "lr")

    @property
    def stage_text(self) -> str:
        return STAGES.get(self.stage, self.stage)


# -- the checks ----------------------------------------------------------------------


def before_program(fn: Callable, args: tuple, kwargs: dict, **checks: Any) -> BeforeProgram:
    """Re-run the eager call with what jit gave the function, stage by stage; the first stage after
    which eager gives jit's numbers is where the difference was made (see :func:`_checks` for the
    keywords). The finding's provenance is started by the user's line that made the bisecting call."""
    found = _checks(fn, args, kwargs, **checks)
    if found.provenance is not None and found.provenance.started_by is None:
        found.provenance.started_by = attribution.started_by()
    return found


@dataclasses.dataclass
class _Call:
    """The call being bisected and the ways to run it again (see :func:`_checks`)."""

    fn: Callable
    args: tuple
    kwargs: dict
    is_static: Callable[[Any], bool]
    run_eager: Callable[[tuple, dict], Any]
    run_jit: Callable[[], Any]
    eager_result: Any
    jit_result: Any
    distance: Callable[[Any, Any], float]
    rtol: float
    fresh_jit: Callable[[], tuple[Any, Any, Any]] | None = None

    def __post_init__(self) -> None:
        self.names = _argument_names(self.fn, self.args, self.kwargs)
        self.inner = python_function(self.fn)
        self.dynamic = [i for i, a in enumerate(self.args) if not self.is_static(a)]
        self.dynamic_kw = [k for k, v in self.kwargs.items() if not self.is_static(v)]
        self.dynamic_names = [self.names[i] for i in self.dynamic] + self.dynamic_kw
        self.given = ([self.args[i] for i in self.dynamic], {k: self.kwargs[k] for k in self.dynamic_kw})

    def with_dynamic(self, new_args: list, new_kwargs: dict) -> tuple[tuple, dict]:
        """The call's arguments with the traced ones replaced (the static ones as given)."""
        full = list(self.args)
        for i, value in zip(self.dynamic, new_args):
            full[i] = value
        return tuple(full), {**self.kwargs, **new_kwargs}

    def gap_to_jit(self, dynamic_tree) -> float:
        """Max relative difference between jit's result and eager run with these traced arguments."""
        return self.distance(self.run_eager(*self.with_dynamic(*dynamic_tree)), self.jit_result)


def _checks(fn: Callable, args: tuple, kwargs: dict, **options: Any) -> BeforeProgram:
    """Re-run the eager call with what jit gave the function, stage by stage; the first stage after
    which eager gives jit's numbers is where the difference was made.

    ``distance(a, b)``: max relative difference of two results (inf when they do not match in
    structure). ``run_eager(args, kwargs)`` runs ``fn`` op by op; ``run_jit()`` the jitted call again;
    ``fresh_jit()`` jits a new function object calling ``fn`` (a new trace, nothing cached) and returns
    (its result, the program it traced, the program the jitted call used).
    """
    call = _Call(fn, args, kwargs, **options)
    found = BeforeProgram()
    # 1. does the eager run even repeat itself? If not, jit froze the first trace's Python values.
    try:
        eager_again = call.distance(call.run_eager(args, kwargs), call.eager_result)
    except Exception as error:
        found.checked = (
            f"checked: running the eager call again failed ({type(error).__name__}), so nothing was compared"
        )
        return found
    if eager_again > call.rtol:
        _nondeterministic_stage(found, call, eager_again)
        return found
    notes = [f"the eager call run again repeats its numbers (max relative difference {_number(eager_again)})"]

    import jax

    try:
        leaves, treedef = jax.tree_util.tree_flatten(call.given)
        rebuilt = jax.tree_util.tree_unflatten(treedef, leaves)
    except Exception as error:
        found.checked = f"checked: flattening the arguments as jit does failed ({type(error).__name__})"
        return found
    # 2. the pytree boundary: the same leaves, the tree rebuilt as jit rebuilds it
    if _pytree_stage(found, call, rebuilt):
        return found
    # 3. the leaves: Python numbers and NumPy arrays become JAX arrays under jit
    if _dtype_stage(found, call, treedef):
        return found
    # 4. was the program jit ran traced when a global, a closed-over or a static value was different?
    #    (last: it compiles the function once more)
    if call.fresh_jit is not None and _stale_stage(found, call, notes):
        return found
    found.stage = "none"
    done = "; ".join(notes)
    if found.checked:
        found.checked = f"checked: {done}; {found.checked.removeprefix('checked: ')}"
    else:
        found.checked = (
            f"checked: {done}; the arguments hold no dict whose order jit changes, no custom pytree node and no "
            "Python number or NumPy array jit would convert"
        )
    return found


def _nondeterministic_stage(found: BeforeProgram, call: _Call, eager_again: float) -> None:
    """Two eager runs differ: is jit frozen (trace-time Python) or new at each run too?"""
    rtol = call.rtol
    try:
        jit_again = call.distance(call.run_jit(), call.jit_result)
    except Exception:
        jit_again = None
    frozen = jit_again is not None and jit_again <= rtol
    found.stage, found.explains = ("trace_time_python" if frozen else "nondeterministic"), True
    found.checked = (
        f"checked: two eager runs of the same call differ from each other (max relative difference "
        f"{_number(eager_again)})"
        + (
            ", two jit runs give the same numbers: the function's Python code makes new values at each run, "
            "and under jit it ran once, when it was traced, so the program keeps the values of that run"
            if frozen
            else (", two jit runs differ too" if jit_again is not None else "")
            + ": the call gives new numbers at each run, so a difference between a jit and an eager run "
            "says nothing about compilation"
        )
    )
    seeded = _with_global_random_state_kept(call.run_eager, call.args, call.kwargs, call.distance)
    if seeded is not None:
        found.checked += (
            "; with NumPy's and Python's global random states set back before the second run, two eager runs "
            + (
                f"repeat their numbers (max relative difference {_number(seeded)}): the new values come from "
                "a global random draw"
                if seeded <= rtol
                else f"still differ (max relative difference {_number(seeded)}): not (only) a global random draw"
            )
        )
    lines = _nondeterministic_lines(call.inner)
    if lines:
        found.line, found.line_how = lines[0], "the function's source calls this when it runs (found by reading it)"
        found.provenance = attribution.of_source_line(lines[0])
        found.fix = (
            f"Make the value an argument of the function (a `jax.random` key for random numbers, the time or "
            f"counter as an input) instead of computing it in the body at `{lines[0].code}`: a suggestion, "
            "not tried."
        )
    else:
        found.provenance = Provenance(unknown="no call of random, time or a counter was found in its source")
        found.fix = (
            "Pass anything that changes between calls (random keys, times, counters) as an argument instead "
            "of computing it in Python inside the function: a suggestion, not tried."
        )


def _stale_stage(found: BeforeProgram, call: _Call, notes: list[str]) -> bool:
    """A new trace gives eager's numbers: the program jit ran is an old one (True: named in ``found``)."""
    assert call.fresh_jit is not None
    try:
        fresh, fresh_program, used_program = call.fresh_jit()
        fresh_gap = call.distance(fresh, call.eager_result)
    except Exception:
        fresh_gap, fresh_program, used_program = None, None, None
    if fresh_gap is not None and fresh_gap <= call.rtol:
        found.stage, found.explains = "stale_trace", True
        found.checked = (
            f"checked: a new trace of the function (jit of a new function object calling it, so nothing "
            f"cached is reused) gives eager's numbers (max relative difference {_number(fresh_gap)}), while "
            "the program the jitted call ran gives other numbers: that program was traced earlier, when a "
            "Python value the function reads was different"
        )
        statics = [n for n, a in zip(call.names, call.args) if call.is_static(a)]
        statics += [k for k, v in call.kwargs.items() if call.is_static(v)]
        _stale_line(found, call.inner, used_program, fresh_program, statics)
        return True
    notes.append(
        "a new trace of the function (nothing cached) could not be run"
        if fresh_gap is None
        else f"a new trace of the function (nothing cached) differs from eager too (max relative difference "
        f"{_number(fresh_gap)}), so the program jit ran is not an old one"
    )
    return False


def _pytree_stage(found: BeforeProgram, call: _Call, rebuilt) -> bool:
    """Eager with the arguments rebuilt as jit rebuilds them (True: that explains it, named in ``found``)."""
    reordered = _reordered_dicts(call.given, rebuilt, call.dynamic_names)
    customs = _custom_nodes(call.given, call.dynamic_names)
    if not reordered and not customs:
        return False
    try:
        gap = call.gap_to_jit(rebuilt)
    except Exception as error:
        gap, failure = None, type(error).__name__
    what = (
        f"{_dict_words(reordered)} rebuilt in sorted key order"
        if reordered and not customs
        else "the arguments flattened and rebuilt as jit does ("
        + ", ".join([f"{_dict_words(reordered)} in sorted key order"] if reordered else [])
        + (", " if reordered else "")
        + ", ".join(f"`{path}` ({kind}) by its unflatten function" for path, kind in customs[:3])
        + ")"
    )
    if gap is None:
        found.checked = f"checked: eager with {what} failed ({failure})"
        return False
    if gap > call.rtol:
        found.dicts = reordered
        found.checked = (
            f"checked: eager with {what} still differs from jit (max relative difference {_number(gap)}), "
            "so the flattening order does not explain the difference"
        )
        return False
    found.explains = True
    found.checked = (
        f"checked: eager with {what} gives jit's numbers (max relative difference {_number(gap)}), "
        f"while with the arguments as given it differs from jit"
    )
    if len(reordered) > 1 or (reordered and customs):
        _which_dicts(reordered, call.given, rebuilt, call.dynamic_names, call.gap_to_jit, call.rtol)
        alone = [d for d in reordered if d.explains]
        if alone:
            found.checked += f"; sorting {_dict_words(alone)} alone does too" + (
                f", sorting {_dict_words([d for d in reordered if d.explains is False])} alone does not"
                if any(d.explains is False for d in reordered)
                else ""
            )
            reordered = alone + [d for d in reordered if not d.explains]
        elif customs and all(d.explains is False for d in reordered[:4]):
            found.checked += (
                f"; sorting {_dict_words(reordered)} alone does not, so the custom nodes as jit rebuilds them "
                "make the difference"
            )
            found.dicts, reordered = reordered, []
    found.stage = "pytree_order" if reordered else "custom_node"
    found.dicts = reordered or found.dicts
    if reordered:
        _order_line(found, call, rebuilt, reordered)
    else:
        _custom_node_line(found, call.inner, customs)
    return True


def _dtype_stage(found: BeforeProgram, call: _Call, treedef) -> bool:
    """Eager with the leaves converted as jit converts them (True: that explains it, named in ``found``)."""
    import jax

    converted, changed = _as_jit_leaves(jax.tree_util.tree_flatten_with_path(call.given)[0], call.dynamic_names, jax)
    if not changed:
        return False
    kinds = ", ".join(sorted(changed))
    try:
        # the dicts kept in the order given: only the leaves change
        gap = call.gap_to_jit(in_order_of(call.given, jax.tree_util.tree_unflatten(treedef, converted)))
    except Exception as error:
        found.checked += f"; eager with the arguments converted as jit does failed ({type(error).__name__})"
        return False
    if gap > call.rtol:
        found.checked = (
            (found.checked + "; " if found.checked else "")
            + f"eager with {kinds} converted to JAX arrays as jit does still differs from jit "
            f"(max relative difference {_number(gap)})"
        )
        return False
    argument = next(iter(changed.values()))
    found.stage, found.explains, found.argument = "argument_dtypes", True, argument
    found.checked = (
        (found.checked + "; " if found.checked else "checked: ")
        + f"eager with {kinds} converted to JAX arrays, as jit converts them, gives jit's numbers "
        f"(max relative difference {_number(gap)})"
    )
    reads = _reading_lines(call.inner, argument.split("[", 1)[0])
    if reads:
        found.line = reads[0]
        found.line_how = f"the first line of the function that reads `{argument}` (read in its source)"
        found.provenance = attribution.of_source_line(reads[0])
    else:
        found.provenance = Provenance(unknown=f"no line of the function's source reads `{argument}` by name")
    found.fix = (
        f"Pass `{argument}` as the JAX array the function should compute with (e.g. `jnp.asarray(...)` with "
        "the dtype you mean) so that both runs see the same dtype, or mark it static if it is a setting: "
        "a suggestion, not tried."
    )
    return True


# -- dicts, custom nodes, leaves --------------------------------------------------------


def _argument_names(fn: Callable, args: tuple, kwargs: dict) -> list[str]:
    try:
        bound = inspect.signature(python_function(fn)).bind_partial(*args, **kwargs)
        positional = list(bound.arguments)[: len(args)]
        if len(positional) == len(args):
            return positional
    except (TypeError, ValueError):
        pass
    return [f"argument {i}" for i in range(len(args))]


def python_function(fn: Callable) -> Callable:
    """The user's Python function behind a ``jax.jit`` wrapper (``__wrapped__``)."""
    inner = fn
    for _ in range(8):
        wrapped = getattr(inner, "__wrapped__", None)
        if wrapped is None or wrapped is inner:
            break
        inner = wrapped
    return inner


def _reordered_dicts(given, rebuilt, names: list[str]) -> list[ReorderedDict]:
    found: list[ReorderedDict] = []
    positional, keywords = given
    positional_rebuilt, keywords_rebuilt = rebuilt
    pairs = list(
        zip(
            names,
            positional + [keywords[k] for k in keywords],
            positional_rebuilt + [keywords_rebuilt[k] for k in keywords],
        )
    )
    for name, a, b in pairs:
        _walk_dicts(a, b, name, found, 0)
    return found


def _which_dicts(reordered: list[ReorderedDict], given, rebuilt, names: list[str], gap, rtol: float) -> None:
    """Sort each reordered dict alone (the first four) and see whether eager then gives jit's numbers."""
    for entry in reordered[:4]:
        positional, keywords = given
        positional_rebuilt, keywords_rebuilt = rebuilt
        new_positional = [_sort_at(a, b, name, entry.path) for name, a, b in zip(names, positional, positional_rebuilt)]
        new_keywords = {k: _sort_at(keywords[k], keywords_rebuilt[k], k, entry.path) for k in keywords}
        try:
            entry.explains = gap((new_positional, new_keywords)) <= rtol
        except Exception:
            entry.explains = None


def _sort_at(a, b, path: str, target: str):
    """``a`` with the one dict at ``target`` in jit's key order (``b``'s), every other dict as given."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        keys = list(b.keys()) if path == target else list(a.keys())
        items = [(k, _sort_at(a[k], b[k], f"{path}[{k!r}]", target)) for k in keys if k in a and k in b]
        try:
            return type(a)(items)
        except Exception:
            return dict(items)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        items = [_sort_at(x, y, f"{path}[{i}]", target) for i, (x, y) in enumerate(zip(a, b))]
        if isinstance(a, tuple) and hasattr(a, "_fields"):
            return type(a)(*items)
        return type(a)(items)
    return a


def _walk_dicts(a, b, path: str, found: list[ReorderedDict], depth: int) -> None:
    if depth > 20 or len(found) > 16:
        return
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        given, got = list(a.keys()), list(b.keys())
        if given != got and sorted(map(repr, given)) == sorted(map(repr, got)):
            found.append(ReorderedDict(path, [repr(k) for k in given], [repr(k) for k in got]))
        for key in given:
            if key in b:
                _walk_dicts(a[key], b[key], f"{path}[{key!r}]", found, depth + 1)
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            _walk_dicts(x, y, f"{path}[{i}]", found, depth + 1)


def _custom_nodes(given, names: list[str]) -> list[tuple[str, str]]:
    """(path, type name) of the custom pytree nodes among the arguments (not dict, list, tuple, None)."""
    import jax

    found: list[tuple[str, str]] = []

    def visit(node, path: str, depth: int) -> None:
        if depth > 20 or len(found) > 16 or node is None:
            return
        if isinstance(node, Mapping) and type(node) in (dict,):
            for key, value in node.items():
                visit(value, f"{path}[{key!r}]", depth + 1)
        elif isinstance(node, (list, tuple)):
            for i, value in enumerate(node):
                visit(value, f"{path}[{i}]", depth + 1)
        else:
            try:
                leaf = jax.tree_util.treedef_is_leaf(jax.tree_util.tree_structure(node))
            except Exception:
                return
            if not leaf:
                found.append((path, type(node).__name__))

    positional, keywords = given
    for name, value in zip(names, positional + [keywords[k] for k in keywords]):
        visit(value, name, 0)
    return found


def _as_jit_leaves(paths_and_leaves: list, names: list[str], jax) -> tuple[list, dict[str, str]]:
    """The leaves as jit hands them to the function, and {what was converted: the first argument
    (path) holding such a leaf}."""
    converted, changed = [], {}
    for path, leaf in paths_and_leaves:
        if isinstance(leaf, (bool, int, float, complex)):
            changed.setdefault(f"Python {type(leaf).__name__}s", _leaf_name(path, names))
            converted.append(jax.numpy.asarray(leaf))
        elif isinstance(leaf, (np.ndarray, np.generic)):
            changed.setdefault("NumPy arrays", _leaf_name(path, names))
            converted.append(jax.numpy.asarray(leaf))
        else:
            converted.append(leaf)
    return converted, changed


def _leaf_name(path: tuple, names: list[str]) -> str:
    """``(SequenceKey(0), SequenceKey(1), DictKey('w'))`` of ``(positional, keywords)`` -> ``n['w']``."""
    import jax

    if len(path) < 2:
        return "an argument"
    which, key = path[0], path[1]
    if getattr(which, "idx", None) == 0:
        index = getattr(key, "idx", None)
        name = names[index] if index is not None and index < len(names) else "an argument"
    else:
        name = str(getattr(key, "key", "an argument"))
    return name + jax.tree_util.keystr(tuple(path[2:]))


def _reading_lines(fn, name: str) -> list[SourceLine]:
    """Lines of ``fn``'s source that read the name ``name``."""
    tree, filename, offset = _source_tree(fn)
    if tree is None:
        return []
    hits = sorted(
        {n.lineno for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == name and isinstance(n.ctx, ast.Load)}
    )
    lines = [_line(filename, offset + n, fn) for n in hits]
    return [line for line in lines if line is not None]


def _dict_words(reordered: list[ReorderedDict]) -> str:
    paths = ", ".join(f"`{d.path}`" for d in reordered[:3])
    return f"the dict {paths}" if len(reordered) == 1 else f"the dicts {paths}"


# -- the line that depends on the order ---------------------------------------------------


def _order_line(found: BeforeProgram, call: _Call, rebuilt, reordered: list[ReorderedDict]) -> None:
    """Trace the function twice, the dicts in the order given and in jit's order: the first operation
    that differs is where the order reaches the computation (its ``source_info``); the line that
    iterates the dict is read from the function's source."""
    import jax

    leaves, treedef = jax.tree_util.tree_flatten(call.given)
    inner = call.inner

    def traced(in_given_order: bool):
        def run(flat):
            tree = jax.tree_util.tree_unflatten(treedef, flat)
            if in_given_order:
                tree = in_order_of(call.given, tree)
            full_args, full_kwargs = call.with_dynamic(*tree)
            return inner(*full_args, **full_kwargs)

        return jax.make_jaxpr(run)(leaves)

    eqn_line = None
    try:
        as_given, as_jit = traced(True), traced(False)
        eqn = _first_difference(*compat.closed_parts(as_given), *compat.closed_parts(as_jit))
        if eqn is not None:
            found.provenance = attribution.of_equation(eqn)
            eqn_line = found.provenance.made_at
    except Exception:
        pass
    iterating = _iterating_lines(inner, [d.path.split("[", 1)[0] for d in reordered])
    line = None
    if eqn_line is not None:
        line = next((it for it in iterating if it.lineno == eqn_line.lineno and it.filename == eqn_line.filename), None)
        if line is None:
            line = next(
                (it for it in iterating if it.filename == eqn_line.filename and it.lineno < eqn_line.lineno), None
            )
            line = line if line is not None and _loop_holds(inner, line.lineno, eqn_line.lineno) else None
    if line is not None:
        found.line = line
        found.line_how = (
            "it iterates the dict (read in the function's source), and the first operation whose operands "
            "change with the order is on "
            + ("this line" if eqn_line is not None and eqn_line.lineno == line.lineno else f"line {eqn_line.lineno}")
            + " (the traced program's source_info)"
        )
    elif eqn_line is not None:
        found.line = eqn_line
        found.line_how = "the first operation whose operands change with the order (the traced program's source_info)"
    elif iterating:
        found.line = iterating[0]
        found.line_how = "it iterates the dict (read in the function's source); no operation of the traced program differs, so the order decides which value is used"
    if found.line is not None and (found.provenance is None or found.provenance.made_at != found.line):
        found.provenance = attribution.of_source_line(found.line)
    elif found.provenance is None:
        found.provenance = Provenance(unknown="no line of the function's source iterates the dict by name")
    first = reordered[0]
    keys = ", ".join(first.given_order)
    found.argument = first.path
    found.fix = (
        f"Do not rely on the order of `{first.path}` (built with keys {keys}; under jit the function sees "
        f"{', '.join(first.jit_order)}): iterate `sorted({first.path})` keys, e.g. "
        f"`[{first.path}[k] for k in sorted({first.path})]`, or pass a list or a NamedTuple instead of the dict. "
        "A suggestion, not tried: the check above rebuilt the dict in sorted order, it did not change your code."
    )


def _custom_node_line(found: BeforeProgram, inner, customs: list[tuple[str, str]]) -> None:
    path, kind = customs[0]
    found.argument = path
    iterating = _iterating_lines(inner, [p.split("[", 1)[0] for p, _ in customs])
    if iterating:
        found.line = iterating[0]
        found.line_how = "it iterates the argument in its own order (read in the function's source)"
        found.provenance = attribution.of_source_line(iterating[0])
    else:
        found.provenance = Provenance(unknown="no line of the function's source iterates the argument by name")
    found.fix = (
        f"Under jit the function receives `{path}` as `{kind}`'s unflatten function rebuilds it from its "
        "flattened children, not the object you passed: make flatten and unflatten keep what the function "
        "reads (the order of its entries, attributes that are not children), or do not depend on that order "
        "(iterate sorted keys). A suggestion, not tried."
    )


def _stale_line(found: BeforeProgram, inner, used_program, fresh_program, statics: list[str]) -> None:
    eqn = None
    if used_program is not None and fresh_program is not None:
        try:
            eqn = _first_difference(*compat.closed_parts(fresh_program), *compat.closed_parts(used_program))
        except Exception:
            eqn = None
    names: list[str] = []
    static_read: list[str] = []
    if eqn is not None:
        found.provenance = attribution.of_equation(eqn)
        found.line = found.provenance.made_at
        found.line_how = (
            "the first operation that differs between the program jit ran and a new trace (its source_info)"
        )
        if found.line is not None:
            names = _outer_names_on(inner, found.line.lineno)
            static_read = [n for n in _names_on(inner, found.line.lineno) if n in statics]
    if found.provenance is None:
        found.provenance = Provenance(
            unknown="no operation differs between the two traces that JAX recorded a line for"
        )
    read = ", ".join(f"`{n}`" for n in names[:3])
    found.argument = static_read[0] if static_read else names[0] if names else ""
    static_words = ", ".join(f"`{n}`" for n in static_read[:3])
    found.fix = (
        (
            f"The line reads the static argument {static_words}: jit looks a static value up by its hash and "
            "equality, so an object changed in place after the first call finds the old program; make it "
            "immutable (a frozen dataclass, a tuple) and pass a new object when it changes. "
            if static_read
            else ""
        )
        + (f"The line reads {read} from outside the function. " if read else "")
        + "jit reads globals, closed-over Python values and static arguments once, when it traces, and reuses "
        "that program while the arguments' shapes and dtypes stay the same (a new `jax.jit(f)` of the same "
        "function reuses it too): pass the value as an argument, or mark it static with a value that compares "
        "unequal when it changes. A suggestion, not tried."
    )


def _outer_names_on(fn, lineno: int) -> list[str]:
    """Names read on ``lineno`` of ``fn`` that are its globals or closed-over variables."""
    code = getattr(fn, "__code__", None)
    tree, _filename, offset = _source_tree(fn)
    if code is None or tree is None:
        return []
    outer = set(code.co_names) | set(code.co_freevars)
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Name)
            and isinstance(node.ctx, ast.Load)
            and node.lineno + offset == lineno
            and node.id in outer
            and node.id not in found
            and not callable((getattr(fn, "__globals__", {}) or {}).get(node.id))
            and not _is_module((getattr(fn, "__globals__", {}) or {}).get(node.id))
        ):
            found.append(node.id)
    return found


def _names_on(fn, lineno: int) -> list[str]:
    """Names read on ``lineno`` of ``fn`` (file line number)."""
    tree, _filename, offset = _source_tree(fn)
    if tree is None:
        return []
    return [
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.lineno + offset == lineno
    ]


def _is_module(value) -> bool:
    return isinstance(value, types.ModuleType)


def in_order_of(original, tree):
    """``tree`` (as jit rebuilt it) with every dict in the key order of ``original``."""
    if isinstance(original, Mapping) and isinstance(tree, Mapping):
        items = [(k, in_order_of(original[k], tree[k])) for k in original if k in tree]
        try:
            return type(tree)(items)
        except Exception:
            return dict(items)
    if isinstance(original, (list, tuple)) and isinstance(tree, (list, tuple)) and len(original) == len(tree):
        items = [in_order_of(a, b) for a, b in zip(original, tree)]
        if isinstance(tree, tuple) and hasattr(tree, "_fields"):
            return type(tree)(*items)
        return type(tree)(items)
    return tree


def _digest(value) -> str:
    try:
        array = np.asarray(value)
    except Exception:
        return repr(type(value))
    if array.nbytes > 1 << 24:
        return f"{array.shape} {array.dtype}"
    return f"{array.shape} {array.dtype} {hashlib.sha1(array.tobytes()).hexdigest()}"


def _eqn_key(eqn, ids: dict) -> tuple:
    operands = []
    for var in eqn.invars:
        if compat.is_literal(var):
            operands.append(("literal", repr(getattr(var, "val", var))))
        else:
            operands.append(ids.get(id(var), "?"))
    for var in eqn.outvars:  # numbered in order of definition, apart from the inputs and constants
        ids[-1] = ids.get(-1, 0) + 1
        ids[id(var)] = ("value", ids[-1])
    params = tuple(
        (name, repr(value))
        for name, value in sorted(eqn.params.items())
        if isinstance(value, (int, float, str, bool, tuple))
        and not any(hasattr(v, "eqns") for v in (value if isinstance(value, tuple) else ()))
    )
    return (eqn.primitive.name, tuple(operands), params)


def _first_difference(a, consts_a: list, b, consts_b: list):
    """The first equation of ``a`` that differs from ``b``'s (primitive, operands by position, params,
    constants by value)."""
    ids_a: dict = {id(v): i for i, v in enumerate(a.invars)}
    ids_b: dict = {id(v): i for i, v in enumerate(b.invars)}
    for ids, program, consts in ((ids_a, a, consts_a), (ids_b, b, consts_b)):
        for var, value in zip(getattr(program, "constvars", ()), consts):
            ids[id(var)] = ("constant", _digest(value))
    for i, eqn in enumerate(a.eqns):
        if i >= len(b.eqns):
            return eqn
        if _eqn_key(eqn, ids_a) != _eqn_key(b.eqns[i], ids_b):
            return eqn
    return None


# -- reading the function's source ------------------------------------------------------


def _source_tree(fn) -> tuple[ast.AST | None, str, int]:
    try:
        lines, start = inspect.getsourcelines(fn)
        filename = inspect.getsourcefile(fn) or fn.__code__.co_filename
    except (OSError, TypeError, AttributeError):
        return None, "", 0
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return None, "", 0
    return tree, filename, start - 1


def _line(filename: str, lineno: int, fn) -> SourceLine | None:
    if not is_user_file(filename):
        return None
    return source_line(filename, lineno, getattr(fn, "__name__", ""))


def _names_of(node) -> str:
    """``d`` for ``d``, ``d.values()``'s receiver; ``params['x']`` -> ``params``."""
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
    return node.id if isinstance(node, ast.Name) else ""


def _iterating_lines(fn, names: list[str]) -> list[SourceLine]:
    """Lines of ``fn``'s source that iterate one of ``names`` in its own order: ``.values()``, ``.items()``,
    ``.keys()``, ``for k in d``, ``list(d)``, ``iter(d)``, ``zip(d, ...)``, ``*d``."""
    tree, filename, offset = _source_tree(fn)
    if tree is None or not names:
        return []
    wanted = set(names)
    hits: list[int] = []

    def iterable(node) -> bool:
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("values", "items", "keys")
        ):
            return _names_of(node.func.value) in wanted
        return isinstance(node, (ast.Name, ast.Subscript, ast.Attribute)) and _names_of(node) in wanted

    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("values", "items", "keys")
        ):
            if _names_of(node.func.value) in wanted:
                hits.append(node.lineno)
        elif isinstance(node, (ast.For, ast.comprehension)) and iterable(node.iter):
            hits.append(getattr(node, "lineno", None) or node.iter.lineno)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("list", "tuple", "iter", "zip", "enumerate", "next")
            and any(iterable(arg) for arg in node.args)
        ):
            hits.append(node.lineno)
        elif isinstance(node, ast.Starred) and iterable(node.value):
            hits.append(node.lineno)
    lines = [_line(filename, offset + n, fn) for n in sorted(set(hits))]
    return [line for line in lines if line is not None]


def _loop_holds(fn, loop_line: int, body_line: int) -> bool:
    """True when a ``for`` statement on ``loop_line`` has ``body_line`` in its body (file line numbers)."""
    tree, _filename, offset = _source_tree(fn)
    if tree is None:
        return False
    for node in ast.walk(tree):
        if isinstance(node, ast.For) and node.lineno + offset == loop_line:
            return node.lineno + offset <= body_line <= (node.end_lineno or node.lineno) + offset
        if (
            isinstance(node, (ast.ListComp, ast.GeneratorExp, ast.DictComp, ast.SetComp))
            and node.lineno + offset == loop_line
        ):
            return node.lineno + offset <= body_line <= (node.end_lineno or node.lineno) + offset
    return False


def _from_jax(fn, name: str) -> bool:
    """True when ``name`` in ``fn`` is JAX's (``from jax import random``): deterministic given its key."""
    value = (getattr(fn, "__globals__", {}) or {}).get(name)
    closure = dict(
        zip(getattr(getattr(fn, "__code__", None), "co_freevars", ()), getattr(fn, "__closure__", None) or ())
    )
    if value is None and name in closure:
        try:
            value = closure[name].cell_contents
        except ValueError:
            value = None
    module = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", "") or ""
    return module.split(".")[0] in ("jax", "jaxlib")


def _with_global_random_state_kept(run_eager, args, kwargs, distance) -> float | None:
    """Run the eager call twice from the same NumPy and Python global random states; the difference
    of the two runs (None when a run failed). The states are left as the first run left them."""
    numpy_state, python_state = np.random.get_state(), random.getstate()
    try:
        first = run_eager(args, kwargs)
        numpy_after, python_after = np.random.get_state(), random.getstate()
        np.random.set_state(numpy_state)
        random.setstate(python_state)
        second = run_eager(args, kwargs)
        np.random.set_state(numpy_after)
        random.setstate(python_after)
        return distance(first, second)
    except Exception:
        return None


def _nondeterministic_lines(fn) -> list[SourceLine]:
    """Lines of ``fn``'s source that call something giving new values at each call (``np.random.*``,
    ``random.*``, ``time.time()``, ``datetime.now()``) or change state outside the function
    (``global``/``nonlocal`` names assigned, ``.append`` on a name that is not local)."""
    tree, filename, offset = _source_tree(fn)
    if tree is None:
        return []
    hits: list[int] = []
    function = next(
        (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))), None
    )
    local_names = set()
    if function is not None and not isinstance(function, ast.Lambda):
        local_names = {a.arg for a in function.args.args + function.args.kwonlyargs}
        for node in ast.walk(function):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                local_names.add(node.id)
    outer = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            outer.update(node.names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            text = ast.unparse(node.func)
            parts = text.split(".")
            if parts[0] in ("jax", "jnp", "lax") or _from_jax(fn, parts[0]):
                continue
            if any(part in _NONDETERMINISTIC for part in parts):
                hits.append(node.lineno)
            elif isinstance(node.func, ast.Attribute) and node.func.attr in ("append", "extend", "pop", "update"):
                owner = _names_of(node.func.value)
                if owner and owner not in local_names:
                    hits.append(node.lineno)
        elif isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id in outer for t in targets):
                hits.append(node.lineno)
    lines = [_line(filename, offset + n, fn) for n in sorted(set(hits))]
    return [line for line in lines if line is not None]


def _number(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0:
        return "0"
    return f"{x:.3g}"
