"""What jit does at the pytree boundary, and whether that explains a jit/eager difference.

``jax.jit`` flattens the arguments (a dict by its *sorted* keys, a custom pytree node
by its flatten function), turns every leaf into an array (a Python ``int`` into a
weakly typed int32, a float64 NumPy array into float32 without x64) and rebuilds the
tree from the flat list. The checks here run the eager call with the tree rebuilt as
jit rebuilds it (dict order, custom nodes) and with the leaves converted as jit
converts them (argument dtypes), and name the line that depends on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import ModuleType
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from jaxmagic._jax import jaxpr_parts
from jaxmagic.probes._bisect.bisected_call import BisectedCall
from jaxmagic.probes._bisect.function_source import iterating_lines, loop_holds, reading_lines
from jaxmagic.probes._bisect.program_difference import first_difference
from jaxmagic.probes._bisect.report import BeforeProgram, ReorderedDict, short_number
from jaxmagic.probes._support import attribution
from jaxmagic.report.provenance import Provenance

if TYPE_CHECKING:
    from jax.tree_util import PyTreeDef

# A call's traced arguments: (positional, keyword), as ``BisectedCall.given`` holds them.
CallArguments = tuple[list[Any], dict[str, Any]]


def pytree_stage(found: BeforeProgram, call: BisectedCall, rebuilt: CallArguments) -> bool:
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
            f"checked: eager with {what} still differs from jit (max relative difference {short_number(gap)}), "
            "so the flattening order does not explain the difference"
        )
        return False
    found.explains = True
    found.checked = (
        f"checked: eager with {what} gives jit's numbers (max relative difference {short_number(gap)}), "
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


def dtype_stage(found: BeforeProgram, call: BisectedCall, treedef: PyTreeDef) -> bool:
    """Eager with the leaves converted as jit converts them (True: that explains it, named in ``found``)."""
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
            f"(max relative difference {short_number(gap)})"
        )
        return False
    argument = next(iter(changed.values()))
    found.stage, found.explains, found.argument = "argument_dtypes", True, argument
    found.checked = (
        (found.checked + "; " if found.checked else "checked: ")
        + f"eager with {kinds} converted to JAX arrays, as jit converts them, gives jit's numbers "
        f"(max relative difference {short_number(gap)})"
    )
    reads = reading_lines(call.inner, argument.split("[", 1)[0])
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


def _reordered_dicts(given: CallArguments, rebuilt: CallArguments, names: list[str]) -> list[ReorderedDict]:
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


def _which_dicts(
    reordered: list[ReorderedDict],
    given: CallArguments,
    rebuilt: CallArguments,
    names: list[str],
    gap: Callable[[CallArguments], float],
    rtol: float,
) -> None:
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


def _sort_at(a: Any, b: Any, path: str, target: str) -> Any:  # pytrees
    """``a`` with the one dict at ``target`` in jit's key order (``b``'s), every other dict as given."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        keys = list(b.keys()) if path == target else list(a.keys())
        items = [(k, _sort_at(a[k], b[k], f"{path}[{k!r}]", target)) for k in keys if k in a and k in b]
        mapping_type: Any = type(a)  # a concrete mapping class (dict, OrderedDict, ...), built from its items
        try:
            return mapping_type(items)
        except Exception:
            return dict(items)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b):
        items = [_sort_at(x, y, f"{path}[{i}]", target) for i, (x, y) in enumerate(zip(a, b))]
        if isinstance(a, tuple) and hasattr(a, "_fields"):
            return type(a)(*items)
        return type(a)(items)
    return a


def _walk_dicts(a: object, b: object, path: str, found: list[ReorderedDict], depth: int) -> None:
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


def _custom_nodes(given: CallArguments, names: list[str]) -> list[tuple[str, str]]:
    """(path, type name) of the custom pytree nodes among the arguments (not dict, list, tuple, None)."""
    found: list[tuple[str, str]] = []

    def visit(node: object, path: str, depth: int) -> None:
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


def _as_jit_leaves(
    paths_and_leaves: list[tuple[tuple[object, ...], object]], names: list[str], jax: ModuleType
) -> tuple[list[object], dict[str, str]]:
    """The leaves as jit hands them to the function, and {what was converted: the first argument
    (path) holding such a leaf}."""
    converted: list[object] = []
    changed: dict[str, str] = {}
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


def _leaf_name(path: tuple[object, ...], names: list[str]) -> str:
    """``(SequenceKey(0), SequenceKey(1), DictKey('w'))`` of ``(positional, keywords)`` -> ``n['w']``."""
    if len(path) < 2:
        return "an argument"
    which, key = path[0], path[1]
    if getattr(which, "idx", None) == 0:
        index = getattr(key, "idx", None)
        name = names[index] if index is not None and index < len(names) else "an argument"
    else:
        name = str(getattr(key, "key", "an argument"))
    return name + jax.tree_util.keystr(tuple(path[2:]))


def _dict_words(reordered: list[ReorderedDict]) -> str:
    paths = ", ".join(f"`{d.path}`" for d in reordered[:3])
    return f"the dict {paths}" if len(reordered) == 1 else f"the dicts {paths}"


# -- the line that depends on the order ---------------------------------------------------


def _order_line(
    found: BeforeProgram, call: BisectedCall, rebuilt: CallArguments, reordered: list[ReorderedDict]
) -> None:
    """Trace the function twice, the dicts in the order given and in jit's order: the first operation
    that differs is where the order reaches the computation (its ``source_info``); the line that
    iterates the dict is read from the function's source."""
    leaves, treedef = jax.tree_util.tree_flatten(call.given)
    inner = call.inner

    def traced(in_given_order: bool) -> Any:  # a ClosedJaxpr
        def run(flat: list[object]) -> Any:
            tree = jax.tree_util.tree_unflatten(treedef, flat)
            if in_given_order:
                tree = in_order_of(call.given, tree)
            full_args, full_kwargs = call.with_dynamic(*tree)
            return inner(*full_args, **full_kwargs)

        return jax.make_jaxpr(run)(leaves)

    eqn_line = None
    try:
        as_given, as_jit = traced(True), traced(False)
        eqn = first_difference(*jaxpr_parts.closed_parts(as_given), *jaxpr_parts.closed_parts(as_jit))
        if eqn is not None:
            found.provenance = attribution.of_equation(eqn)
            eqn_line = found.provenance.made_at
    except Exception:
        pass
    iterating = iterating_lines(inner, [d.path.split("[", 1)[0] for d in reordered])
    line = None
    if eqn_line is not None:
        line = next((it for it in iterating if it.lineno == eqn_line.lineno and it.filename == eqn_line.filename), None)
        if line is None:
            line = next(
                (it for it in iterating if it.filename == eqn_line.filename and it.lineno < eqn_line.lineno), None
            )
            line = line if line is not None and loop_holds(inner, line.lineno, eqn_line.lineno) else None
    if line is not None:
        # line is one of the lines iterating the dict that hold eqn_line's operation, so eqn_line is known here
        where = "this line" if eqn_line is None or eqn_line.lineno == line.lineno else f"line {eqn_line.lineno}"
        found.line = line
        found.line_how = (
            "it iterates the dict (read in the function's source), and the first operation whose operands "
            f"change with the order is on {where} (the traced program's source_info)"
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


def _custom_node_line(found: BeforeProgram, inner: Callable[..., Any], customs: list[tuple[str, str]]) -> None:
    path, kind = customs[0]
    found.argument = path
    iterating = iterating_lines(inner, [p.split("[", 1)[0] for p, _ in customs])
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


def in_order_of(original: Any, tree: Any) -> Any:  # pytrees
    """``tree`` (as jit rebuilt it) with every dict in the key order of ``original``."""
    if isinstance(original, Mapping) and isinstance(tree, Mapping):
        items = [(k, in_order_of(original[k], tree[k])) for k in original if k in tree]
        mapping_type: Any = type(tree)  # Mapping declares no constructor; dict-like ones take items (tried)
        try:
            return mapping_type(items)
        except Exception:
            return dict(items)
    if isinstance(original, (list, tuple)) and isinstance(tree, (list, tuple)) and len(original) == len(tree):
        items = [in_order_of(a, b) for a, b in zip(original, tree)]
        if isinstance(tree, tuple) and hasattr(tree, "_fields"):
            return type(tree)(*items)
        return type(tree)(items)
    return tree
