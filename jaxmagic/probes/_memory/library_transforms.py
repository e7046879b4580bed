"""How each library spells JAX's transformations the memory probe tries: its jit's donation, its remat.

A program made through ``nnx.jit`` or ``eqx.filter_jit`` is a ``jax.jit`` the library made around its own
function (``wrapped.find_held_function`` finds the user's inside it): donation is asked of the library's
wrapper (``nnx.jit(step, donate_argnames=...)``, ``eqx.filter_jit(step, donate="all")``), never of a
``jax.jit`` the user cannot reach. A layer that is a library module's method is checkpointed with the
library's own remat - ``nnx.remat``, ``eqx.filter_checkpoint``, Flax Linen's ``nn.remat`` (as a method
decorator it keeps the module's name and so its parameters' paths; ``nn.remat(Block)`` renames them
``CheckpointBlock_0``) - which handles the module's state where ``jax.checkpoint`` cannot take ``self``.

It lives with the memory probe, its one user; it reads the libraries' objects with ``_support/calls/wrapped``
(which user function a library's callable holds). Which ``jax.jit`` a wrapper's call runs is every probe's
question: ``_support/calls/library_wrappers``.

Which library a class or a wrapper belongs to is read from the modules its code lives in
(``code_owner.module_of_file``, ``__module__`` along the class's MRO); the library's functions are taken
from ``sys.modules`` - the user's program imported them; nothing is imported here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Callable
from typing import Any

from jaxmagic._jax import jit_internals
from jaxmagic.probes._support.calls.library_wrappers import function_tracing
from jaxmagic.probes._support.calls.wrapped import HeldFunction, find_held_function, own_code
from jaxmagic.usercode.code_owner import module_of_file
from jaxmagic.usercode.source import is_user_file


@dataclasses.dataclass(frozen=True)
class LibraryRemat:
    """A library's remat for a module's method: where to find it, and how the user writes it."""

    library: str  # "flax.nnx"
    module: str  # the module the library's public functions are read from
    function: str  # its name there: "remat"
    decorator: str  # "@nnx.remat"
    note: str = ""  # what to mind when writing it ("above @nn.compact")

    def make(self) -> Callable[..., Callable[..., object]] | None:
        """The library's remat, from the modules the user's program loaded (None when it is not loaded)."""
        return getattr(sys.modules.get(self.module), self.function, None)


# By the package a module class's base comes from (the longest prefix of its ``__module__`` wins).
REMATS = {
    "flax.nnx": LibraryRemat("flax.nnx", "flax.nnx", "remat", "@nnx.remat"),
    "flax.linen": LibraryRemat("flax.linen", "flax.linen", "remat", "@nn.remat", "above @nn.compact"),
    "equinox": LibraryRemat("equinox", "equinox", "filter_checkpoint", "@eqx.filter_checkpoint"),
}
# Libraries whose modules are known and whose remat cannot decorate a method: why, said in a report.
NO_METHOD_REMAT = {
    "haiku": "hk.remat works only inside hk.transform, so it cannot decorate a Haiku module's method where its "
    "class is defined (calling hk.remat inside the method was not tried)",
}


def remat_for_class(cls: type) -> LibraryRemat | str | None:
    """The remat of the library ``cls`` is a module of (by its bases); a str saying why there is none for
    a library known to have none for methods; None for a class of no library known here."""
    for base in cls.__mro__[1:]:
        module = getattr(base, "__module__", "") or ""
        for prefix in sorted(REMATS, key=len, reverse=True):
            if module == prefix or module.startswith(prefix + "."):
                return REMATS[prefix]
        for prefix, why in NO_METHOD_REMAT.items():
            if module == prefix or module.startswith(prefix + "."):
                return why
    return None


@dataclasses.dataclass(frozen=True)
class LibraryJit:
    """The library's jit that made a ``jax.jit``-ed function: its name and the user's function inside."""

    library: str  # "flax.nnx", "equinox"
    wrapper: str  # "nnx.jit", "eqx.filter_jit"
    held: HeldFunction  # the user's function
    function: Any = None  # the library's function jax.jit was given (nnx's ``JitFn``, eqx's ``fun_wrapped``)

    def tracing(self) -> contextlib.AbstractContextManager[object]:
        """What the library's function needs around it to be traced again outside the wrapper's call:
        ``nnx.jit``'s function merges the graph under its wrapper's update context (its ``ctxtag``)."""
        return function_tracing(self.function)

    def donate_code(self, names: list[str], every: bool) -> str:
        """The wrapper donating the user's arguments ``names`` (``every``: all the arrays it is given)."""
        function = self.held.name
        if self.library == "equinox":  # donates all or nothing (the first argument may be kept)
            return f'eqx.filter_jit({function}, donate="all")' if every else ""
        return f"nnx.jit({function}, donate_argnames={self.argnames(names)})"

    @staticmethod
    def argnames(names: list[str]) -> str:
        """``("model", "opt")``, ``("model",)``."""
        return f"({', '.join(repr(n) for n in names)}{',' if len(names) == 1 else ''})".replace("'", '"')


# By the module of the function a library hands ``jax.jit``: the wrapper the user wrote.
_JITS = {"flax.nnx": ("flax.nnx", "nnx.jit"), "equinox": ("equinox", "eqx.filter_jit")}


def library_jit(jitted: Any, args: tuple[object, ...] = ()) -> LibraryJit | None:
    """The library jit behind ``jitted`` (a ``jax.jit`` a library made for the user) called with ``args``,
    or None for the user's own ``jax.jit``. ``eqx.filter_jit`` makes one ``jax.jit`` per function name and
    passes the user's function among its static arguments: the call's ``args`` are searched too."""
    fun = getattr(jitted, "_fun", None) or getattr(jitted, "__wrapped__", None)
    code = own_code(fun) if fun is not None else None
    if code is None or is_user_file(code.co_filename):
        return None
    module = module_of_file(code.co_filename)
    for prefix, (library, wrapper) in _JITS.items():
        if module == prefix or module.startswith(prefix + "."):
            static = getattr(jit_internals.jit_options(jitted), "static_argnums", ()) or ()
            held = find_held_function(fun, tuple(args), static, is_user_file)
            return LibraryJit(library, wrapper, held, fun) if held is not None else None
    return None
