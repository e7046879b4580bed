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
from typing import Any

import numpy as np

from jaxmagic._jax import compat, jit_calls
from jaxmagic.probes._support.nan.watch import call_site
from jaxmagic.report import SourceLine
from jaxmagic.report.source import source_line
from jaxmagic.report.wording import short_dtype


@dataclasses.dataclass
class HostArgumentUse:
    """A NumPy array (more than one element) given to a jitted function: copied to the device at each call."""

    function: str
    argument: str  # the path the user types: "x", "batch['x']", "params['w']", or "argument 2"
    value: str  # as the transfer guard writes it: "f32[512,16]" (a float64 array is copied as f32 without x64)
    line: SourceLine | None = None
    calls: int = 0

    @property
    def title(self) -> str:
        """The finding's one sentence, the same in ``%%jax_transfers``, ``%%jax_doctor`` and ``%jax_watch``."""
        return (
            f"`{self.function}` was given a NumPy array ({self.value}, argument `{self.argument}`) in "
            f"{self.calls} calls: copied to the device every time"
        )


def host_type(value) -> str:
    """How the transfer guard writes a host value's type (``f32[8,5]``, ``f32[] weak``); "" for no host value."""
    if isinstance(value, bool):
        return "bool[] weak"
    if isinstance(value, int):
        return "i32[] weak"
    if isinstance(value, float):
        return "f32[] weak"
    if isinstance(value, (np.ndarray, np.generic)):
        import jax  # deferred: importing jaxmagic.probes imports no JAX

        try:
            dtype = jax.dtypes.canonicalize_dtype(value.dtype)
        except Exception:
            dtype = value.dtype
        return f"{short_dtype(str(dtype))}[{','.join(str(d) for d in np.shape(value))}]"
    return ""


# A step of a path into the arguments that can be followed again without JAX: ("item", key) or ("attr", name).
_Step = tuple[str, Any]


class HostArguments(jit_calls.CallObserver):
    """Counts, per (function, argument path, shape, dtype), the calls that were given a NumPy array."""

    def __init__(self):
        self.seen: dict[tuple, HostArgumentUse] = {}
        # function (the Python one jit wraps) -> [(key in seen, steps to the leaf)]: where its looked-at
        # calls held NumPy arrays, followed again in the calls a sampler skips
        self._paths: dict[Any, list[tuple[tuple, tuple[_Step, ...]]]] = {}
        self._last_counted: dict[Any, int] = {}  # function -> the number of the last call counted

    def before(self, name, is_jit, args, params) -> None:
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
        for argument, steps, value in host_leaves(fun, local.get("jit_info"), local.get("args"), local.get("kwargs")):
            typed = host_type(value)
            key = (name, argument, typed)
            entry = self.seen.get(key)
            if entry is None:
                user, lineno = call_site()
                entry = self.seen[key] = HostArgumentUse(
                    name,
                    argument,
                    typed,
                    line=source_line(user.f_code.co_filename, lineno, user.f_code.co_name) if user else None,
                )
                if fun is not None and steps is not None:
                    self._paths.setdefault(fun, []).append((key, steps))
            entry.calls += 1

    def after(self, *args) -> None:
        pass

    def count_skipped(self, function, number: int, args: tuple, kwargs: dict) -> None:
        """A call the sampler did not look at: count the NumPy arrays it holds where looked-at calls held them."""
        paths = self._paths.get(function)
        if not paths:
            return
        self._last_counted[function] = number
        seen = self.seen
        for key, steps in paths:
            value = _follow(args, kwargs, steps)
            if type(value) is np.ndarray and host_type(value) == key[2]:
                seen[key].calls += 1


def host_leaves(fun, jit_info, args, kwargs) -> list[tuple[str, tuple[_Step, ...] | None, np.ndarray]]:
    """``[(argument path, steps to follow it again or None, array)]``: the NumPy arrays of more than one
    element among the dynamic arguments of a call, anywhere in their pytrees, in JAX's flattening order."""
    args, kwargs = tuple(args or ()), dict(kwargs or {})
    static_numbers = set(getattr(jit_info, "static_argnums", ()) or ())
    static_names = set(getattr(jit_info, "static_argnames", ()) or ())
    found = []
    for index, value in enumerate(args):
        if index not in static_numbers:
            name = parameter_name(fun, index) or f"argument {index}"
            found += _arrays_in(value, name, (("item", 0), ("item", index)))
    for keyword, value in kwargs.items():
        if keyword not in static_names:
            found += _arrays_in(value, keyword, (("item", 1), ("item", keyword)))
    return found


def _arrays_in(value, name: str, first: tuple[_Step, ...]) -> list:
    if type(value) is np.ndarray:  # the usual case, without flattening
        return [(name, first, value)] if value.size > 1 else []
    import jax  # deferred: importing jaxmagic.probes imports no JAX

    if isinstance(value, (jax.Array, int, float, complex, str, bytes, type(None))):
        return []
    try:
        leaves = jax.tree_util.tree_flatten_with_path(value)[0]
    except Exception:
        return []
    found = []
    for path, leaf in leaves:
        if isinstance(leaf, np.ndarray) and leaf.size > 1:
            found.append((name + jax.tree_util.keystr(path), _steps(first, path), leaf))
    return found


def _steps(first: tuple[_Step, ...], path) -> tuple[_Step, ...] | None:
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


def _follow(args: tuple, kwargs: dict, steps: tuple[_Step, ...]):
    """The value at ``steps`` in ``(args, kwargs)``, reading containers only (no user code); None if absent."""
    value: Any = (args, kwargs)
    try:
        for kind, key in steps:
            if kind == "item":
                value = value[key] if isinstance(value, (dict, list, tuple)) else None
            else:  # a field of a dataclass-like node: its own attribute (a slot read through its descriptor)
                owner, value = value, inspect.getattr_static(value, key, None)
                if isinstance(value, types.MemberDescriptorType):
                    value = value.__get__(owner, type(owner))
            if value is None:
                return None
    except (LookupError, TypeError):
        return None
    return value


def parameter_name(fun, index: int) -> str:
    """The name of the ``index``-th positional parameter of ``fun`` ("" when it has none)."""
    try:
        names = [
            p.name
            for p in inspect.signature(fun).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]
    except (TypeError, ValueError):
        return ""
    return names[index] if index < len(names) else ""


def live_counts(skip_ids: frozenset = frozenset()) -> tuple[dict[tuple, int], int]:
    """Live JAX arrays counted by (shape, dtype), and their bytes; ({}, 0) before the backend starts.

    Arrays whose ``id`` is in ``skip_ids`` (e.g. those IPython's ``Out`` holds) are not counted.
    The dtype is NumPy's object (equal to its name: ``np.dtype("float32") == "float32"``): naming
    it costs microseconds of Python per array, which a count of 100,000 arrays after every cell
    cannot pay.
    """

    if not compat.backend_started():
        return {}, 0
    import jax

    counts: dict[tuple, int] = {}
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
