"""The call being bisected, and the ways to run it again that the checks of ``before_program`` use."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from typing import Any


@dataclasses.dataclass
class BisectedCall:
    """The call being bisected and the ways to run it again (see ``before_program.py``)."""

    fn: Callable[..., object]
    args: tuple[object, ...]
    kwargs: dict[str, object]
    is_static: Callable[[Any], bool]
    run_eager: Callable[[tuple[object, ...], dict[str, object]], Any]
    run_jit: Callable[[], Any]
    eager_result: Any
    jit_result: Any
    distance: Callable[[Any, Any], float]
    rtol: float
    fresh_jit: Callable[[], tuple[Any, Any, Any]] | None = None

    def __post_init__(self) -> None:
        self.names = argument_names(self.fn, self.args, self.kwargs)
        self.inner = python_function(self.fn)
        self.dynamic = [i for i, a in enumerate(self.args) if not self.is_static(a)]
        self.dynamic_kw = [k for k, v in self.kwargs.items() if not self.is_static(v)]
        self.dynamic_names = [self.names[i] for i in self.dynamic] + self.dynamic_kw
        self.given = ([self.args[i] for i in self.dynamic], {k: self.kwargs[k] for k in self.dynamic_kw})

    def with_dynamic(
        self, new_args: list[object], new_kwargs: dict[str, object]
    ) -> tuple[tuple[object, ...], dict[str, object]]:
        """The call's arguments with the traced ones replaced (the static ones as given)."""
        full = list(self.args)
        for i, value in zip(self.dynamic, new_args):
            full[i] = value
        return tuple(full), {**self.kwargs, **new_kwargs}

    def gap_to_jit(self, dynamic_tree: tuple[list[Any], dict[str, Any]]) -> float:
        """Max relative difference between jit's result and eager run with these traced arguments."""
        return self.distance(self.run_eager(*self.with_dynamic(*dynamic_tree)), self.jit_result)


def argument_names(fn: Callable[..., object], args: tuple[object, ...], kwargs: dict[str, object]) -> list[str]:
    try:
        bound = inspect.signature(python_function(fn)).bind_partial(*args, **kwargs)
        positional = list(bound.arguments)[: len(args)]
        if len(positional) == len(args):
            return positional
    except (TypeError, ValueError):
        pass
    return [f"argument {i}" for i in range(len(args))]


def python_function(fn: Callable[..., object]) -> Callable[..., object]:
    """The user's Python function behind a ``jax.jit`` wrapper (``__wrapped__``)."""
    inner = fn
    for _ in range(8):
        wrapped = getattr(inner, "__wrapped__", None)
        if wrapped is None or wrapped is inner:
            break
        inner = wrapped
    return inner
