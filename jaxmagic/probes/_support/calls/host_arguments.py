"""The one home of "what crossed from host to device" at a jitted call: the NumPy leaves of its arguments.

A NumPy array anywhere in a jitted function's arguments - a top-level argument, or a leaf of a
dict batch, a list, a params pytree - is copied to the device at every call. ``HostArguments``
is a call observer that finds them by walking the call's arguments as JAX flattens them, and
names each by the path the user types (``batch['x']``, ``params['dense']['kernel']``). Its
records (``HostArgumentUse``) and their wording (``HostArgumentUse.title``) are what
``%%jax_transfers`` (which names the copies of its transfer log with them), ``%%jax_doctor`` and
``%jax_watch`` all report, so the three cannot disagree.

Calls a ``CallSampler`` skips (``%jax_watch`` looks at a share of a fast loop's calls) are still
counted: ``count_skipped`` looks up, in each skipped call, only the paths where a looked-at call of
the same function held a NumPy array - a few dictionary reads - so the counts are every call's.
"""

from __future__ import annotations

import dataclasses
import inspect
import types
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeAlias, cast

import jax
import numpy as np

from jaxmagic._jax import jit_calls, program_inputs, runtime
from jaxmagic._jax.types import Params, Program, Value
from jaxmagic.probes._support.calls import call_names
from jaxmagic.probes._support.calls.call_site import call_site
from jaxmagic.report import SourceLine
from jaxmagic.report.wording import short_dtype
from jaxmagic.usercode.source import source_line

# One finding's key: (function, the user's (file, line), argument position or keyword, path inside, host type).
_UseKey: TypeAlias = tuple[str, tuple[str, int] | None, int | str, str, str]
# An array's (shape, dtype).
_Kind: TypeAlias = tuple[tuple[int, ...], np.dtype]


@dataclasses.dataclass
class HostArgumentUse:
    """A NumPy array (more than one element) given to a jitted function: copied to the device at each call."""

    function: str
    # what the user's line passed ("X_host", "self.Ainv", "batch['x']" for a dict `batch`), else the path in
    # the function's parameters ("batch['x']" for a dict literal given as `batch`), else "argument 2"
    argument: str
    value: str  # as the transfer guard writes it: "f32[512,16]" (a float64 array is copied as f32 without x64)
    line: SourceLine | None = None
    calls: int = 0
    # calls of the function before the first one seen with this array that were not looked at (a sampled
    # fast loop): they may have held it too, uncounted
    not_looked_at: int = 0

    @property
    def repeated(self) -> bool:
        """Whether it is a finding: given at more than one call - or possibly, when earlier calls were not
        looked at (a sampled loop), so a copy at every call is not left untold."""
        return self.calls >= 2 or (self.calls >= 1 and self.not_looked_at > 0)

    @property
    def title(self) -> str:
        """The finding's one sentence, the same in ``%%jax_transfers``, ``%%jax_doctor`` and ``%jax_watch``."""
        unseen = (
            f" (and perhaps in some of the {self.not_looked_at} earlier calls not looked at)"
            if self.not_looked_at
            else ""
        )
        return (
            f"`{self.function}` was given a NumPy array ({self.value}, argument `{self.argument}`) in "
            f"{self.calls} calls{unseen}: copied to the device every time"
        )


def host_type(value: object) -> str:
    """How the transfer guard writes a host value's type (``f32[8,5]``, ``f32[] weak``); "" for no host value."""
    if isinstance(value, bool):
        return "bool[] weak"
    if isinstance(value, int):
        return "i32[] weak"
    if isinstance(value, float):
        return "f32[] weak"
    if isinstance(value, (np.ndarray, np.generic)):
        try:
            dtype = jax.dtypes.canonicalize_dtype(value.dtype)
        except Exception:
            dtype = value.dtype
        return f"{short_dtype(str(dtype))}[{','.join(str(d) for d in np.shape(value))}]"
    return ""


# A step of a path into the arguments that can be followed again without JAX: ("item", key) or ("attr", name).
_Step = tuple[str, Any]


@dataclasses.dataclass
class HostLeaf:
    """A NumPy array in a call's arguments: the argument it is in (position or keyword), where inside it."""

    argument: int | str  # position, or keyword
    inside: str  # JAX's key path inside the argument: "['x']", "" for the argument itself
    steps: tuple[_Step, ...] | None  # how to reach it again without JAX (None: through a custom node)
    array: np.ndarray


class HostArguments(jit_calls.CallObserver):
    """Counts, per (function, argument path, shape, dtype), the calls that were given a NumPy array."""

    def __init__(self) -> None:
        self.seen: dict[_UseKey, HostArgumentUse] = {}
        # function (the Python one jit wraps) -> [(key in seen, steps to the leaf, (shape, dtype))]: where its
        # looked-at calls held NumPy arrays, followed again in the calls a sampler skips
        self._paths: dict[Any, list[tuple[_UseKey, tuple[_Step, ...], _Kind]]] = {}
        self.skipped_wanted = self._paths  # the functions whose skipped calls ``count_skipped`` is told
        self._last_counted: dict[Any, int] = {}  # function -> the number of the last call counted
        self._looked_at: dict[Any, int] = {}  # function -> its calls looked at (given to ``before``)
        self._unused: dict[int, tuple[Any, frozenset[int]]] = {}  # id(program) -> (it, inputs it never reads)

    def before(self, name: str, is_jit: bool, args: tuple[Value, ...], params: Params) -> None:
        if not is_jit:
            return
        local = jit_calls.call_locals()
        if local is None:
            return
        fun = local.get("fun")
        number = jit_calls.call_number()
        if number is not None and fun is not None:
            if number <= self._last_counted.get(fun, 0):
                return  # counted already, as a skipped call (the sampler's last call, observed at the end)
            self._last_counted[fun] = number
        looked_before = self._looked_at.get(fun, 0)
        self._looked_at[fun] = looked_before + 1
        jit_info = local.get("jit_info")
        leaves = host_leaves(jit_info, local.get("args"), local.get("kwargs"))
        if leaves and not getattr(jit_info, "keep_unused", False):
            # An input the program does not use is pruned by jit: never copied, so not told.
            unused = self._unused_inputs(params.get("jaxpr"), len(args))
            if unused:
                position = {id(value): k for k, value in enumerate(args) if type(value) is np.ndarray}
                leaves = [leaf for leaf in leaves if position.get(id(leaf.array)) not in unused]
        if not leaves:
            return
        names: dict[int | str, str] | None = None
        through: call_names.UserCall | None = None  # a library's jit wrapper the user's line called
        # One use per line of the user's too: two functions of one name (two lambdas, a `step` defined twice)
        # called from their own lines are two findings, not one with their calls added up
        user, lineno = call_site()
        where = (user.f_code.co_filename, lineno) if user is not None else None
        for leaf in leaves:
            typed = host_type(leaf.array)
            key = (name, where, leaf.argument, leaf.inside, typed)
            entry = self.seen.get(key)
            if entry is None:
                if names is None:
                    through = call_names.user_call(user) if user is not None else None
                    names = call_names.passed_expressions(fun, user, lineno) if user and through is None else {}
                base = names.get(leaf.argument) or (
                    leaf.argument if isinstance(leaf.argument, str) else parameter_name(fun, leaf.argument)
                )
                argument = base + leaf.inside if base else f"argument {leaf.argument}{leaf.inside}"
                entry = self.seen[key] = HostArgumentUse(
                    name,
                    (through.name_of(leaf.array, as_written=True) if through is not None else "") or argument,
                    typed,
                    line=source_line(user.f_code.co_filename, lineno, user.f_code.co_name) if user else None,
                    not_looked_at=max(0, (number or 0) - 1 - looked_before),
                )
                if fun is not None and leaf.steps is not None:
                    kind = (leaf.array.shape, leaf.array.dtype)
                    self._paths.setdefault(fun, []).append((key, leaf.steps, kind))
            entry.calls += 1

    def after(self, *args: object) -> None:
        pass

    def _unused_inputs(self, closed: Program | None, count: int) -> frozenset[int]:
        """The positions among a call's ``count`` flat inputs that jit prunes from its program (never read,
        or read only by code whose result is unused: not copied); empty when not known."""
        if closed is None:
            return frozenset()
        known = self._unused.get(id(closed))
        if known is not None and known[0] is closed:
            return known[1]
        jaxpr = getattr(closed, "jaxpr", closed)
        unused = program_inputs.inputs_jit_prunes(jaxpr) if len(getattr(jaxpr, "invars", ())) == count else frozenset()
        self._unused[id(closed)] = (closed, unused)
        return unused

    def count_skipped(self, function: object, number: int, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
        """A call the sampler did not look at: count the NumPy arrays it holds where looked-at calls held them."""
        paths = self._paths.get(function)
        if not paths:
            return
        self._last_counted[function] = number
        seen = self.seen
        for key, steps, (shape, dtype) in paths:
            value = _follow(args, kwargs, steps)
            if type(value) is np.ndarray and value.shape == shape and value.dtype == dtype:
                seen[key].calls += 1


def host_leaves(jit_info: object, args: Sequence[object] | None, kwargs: Mapping[str, object] | None) -> list[HostLeaf]:
    """The NumPy arrays of more than one element among the dynamic arguments of a call, anywhere in
    their pytrees, in JAX's flattening order."""
    args, kwargs = tuple(args or ()), dict(kwargs or {})
    static_numbers = set(getattr(jit_info, "static_argnums", ()) or ())
    static_names = set(getattr(jit_info, "static_argnames", ()) or ())
    found = []
    for index, value in enumerate(args):
        if index not in static_numbers:
            found += _arrays_in(value, index, (("item", 0), ("item", index)))
    for keyword, value in kwargs.items():
        if keyword not in static_names:
            found += _arrays_in(value, keyword, (("item", 1), ("item", keyword)))
    return found


def _arrays_in(value: object, argument: int | str, first: tuple[_Step, ...]) -> list[HostLeaf]:
    if type(value) is np.ndarray:  # the usual case, without flattening
        return [HostLeaf(argument, "", first, value)] if value.size > 1 else []

    if isinstance(value, (jax.Array, int, float, complex, str, bytes, type(None))):
        return []
    try:
        leaves = jax.tree_util.tree_flatten_with_path(value)[0]
    except Exception:
        return []
    return [
        HostLeaf(argument, jax.tree_util.keystr(path), _steps(first, path), leaf)
        for path, leaf in leaves
        if isinstance(leaf, np.ndarray) and leaf.size > 1
    ]


def _steps(first: tuple[_Step, ...], path: Sequence[object]) -> tuple[_Step, ...] | None:
    """The path as steps ``_follow`` can take again (dict keys, sequence indices, attributes); None when a
    step is only JAX's (a custom node's flattened index)."""
    steps = list(first)
    for entry in path:
        if hasattr(entry, "key"):  # DictKey
            steps.append(("item", entry.key))
        elif hasattr(entry, "idx"):  # SequenceKey
            steps.append(("item", entry.idx))
        elif hasattr(entry, "name"):  # GetAttrKey
            steps.append(("attr", entry.name))
        else:
            return None
    return tuple(steps)


def _follow(args: tuple[object, ...], kwargs: dict[str, object], steps: tuple[_Step, ...]) -> object:
    """The value at ``steps`` in ``(args, kwargs)``, reading containers only (no user code); None if absent."""
    value: Any = (args, kwargs)
    try:
        for kind, key in steps:
            if kind == "item":
                value = value[key] if isinstance(value, (Mapping, list, tuple)) else None  # FrozenDict too
            else:  # a field of a dataclass-like node: its own attribute (a slot read through its descriptor)
                owner, value = value, inspect.getattr_static(value, key, None)
                if isinstance(value, types.MemberDescriptorType):
                    value = value.__get__(owner, type(owner))
            if value is None:
                return None
    except (LookupError, TypeError):
        return None
    return value


def parameter_name(fun: object, index: int) -> str:
    """The name of the ``index``-th positional parameter of ``fun`` ("" when it has none)."""
    try:
        names = [
            p.name
            for p in inspect.signature(cast(Callable[..., Any], fun)).parameters.values()  # not one: TypeError
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return ""
    return names[index] if index < len(names) else ""


def live_counts(skip_ids: frozenset[int] = frozenset()) -> tuple[dict[_Kind, int], int]:
    """Live JAX arrays counted by (shape, dtype), and their bytes; ({}, 0) before the backend starts.

    Arrays whose ``id`` is in ``skip_ids`` (e.g. those IPython's ``Out`` holds) are not counted.
    The dtype is NumPy's object (equal to its name: ``np.dtype("float32") == "float32"``): naming
    it costs microseconds of Python per array, which a count of 100,000 arrays after every cell
    cannot pay.
    """

    if not runtime.backend_started():
        return {}, 0

    counts: dict[_Kind, int] = {}
    total = 0
    for array in jax.live_arrays():
        if skip_ids and id(array) in skip_ids:
            continue
        key = (array.shape, array.dtype)
        counts[key] = counts.get(key, 0) + 1
        try:
            total += array.nbytes
        except Exception:
            pass
    return counts, total
