"""The library function a user's line called, by the name the user wrote it with.

A value made (a NaN, a consumed key) deep inside a library is named after the public callable the
user's line called: ``numpyro.distributions.Normal.log_prob``, ``optax.softmax_cross_entropy``,
``flax.linen.LayerNorm.__call__`` - never a decorator's ``wrapper`` or a private helper the library
calls on the way. Frames are walked from the user's line inwards through the library's own frames;
the first whose function the library's modules expose under a public dotted name is the one.
Names are read from the modules the user's program already imported (``sys.modules``): nothing is
imported here, and a library that is not loaded is never looked up.
"""

from __future__ import annotations

import functools
import os
import sys

from jaxmagic.usercode.code_owner import module_of_file

# frames of the standard library's plumbing between a library's public function and its body
_PLUMBING = ("functools.py", "contextlib.py", "abc.py", "source_info_util.py")  # the last: jax.named_scope


@functools.lru_cache(maxsize=8_192)  # asked per frame walked: each function is resolved once
def public_name(filename: str, qualname: str) -> str:
    """The public dotted name of the function ``qualname`` defined in ``filename`` (its shortest
    import path among the package's loaded modules); "" when it has none - a local function, a
    private helper, a module the user's program has not imported."""
    return _resolve(module_of_file(filename), qualname)


def _resolve(module_name: str, qualname: str) -> str:
    parts = qualname.split(".")
    if not module_name or "<locals>" in parts or any(p.startswith("<") for p in parts):
        return ""
    if any(p.startswith("_") and not (p.startswith("__") and p.endswith("__")) for p in parts):
        return ""  # a private helper or method
    module = sys.modules.get(module_name)
    owner = getattr(module, parts[0], None) if module is not None else None
    if owner is None or not _reaches(owner, parts[1:]):
        return ""
    packages = module_name.split(".")
    for depth in range(1, len(packages) + 1):
        prefix = ".".join(packages[:depth])
        space = sys.modules.get(prefix)
        if space is not None and not any(p.startswith("_") for p in packages[1:depth]):
            if getattr(space, parts[0], None) is owner:
                return f"{prefix}.{qualname}"
    if any(p.startswith("_") for p in packages):
        return ""
    return f"{module_name}.{qualname}"


def _reaches(owner: object, attributes: list[str]) -> bool:

    value = owner
    for name in attributes:
        value = getattr(value, name, None)
        if value is None:
            return False
    return True


def package_of(filename: str) -> str:
    return module_of_file(filename).split(".", 1)[0]


def library_called(frames: list[tuple[str, str]]) -> str:
    """The public callable of the first library the user's line called.

    ``frames``: ``(filename, qualname)`` of the frames the user's line led to, outermost first (the
    first is the one the line called). Walks the first library package's own frames inwards and
    returns the first with a public name; "" when none has one."""
    package = ""
    made_by = ""  # the public factory of the innermost closure met (see ``factory_name``)
    for filename, qualname in frames:
        if os.path.basename(filename) in _PLUMBING:
            continue
        here = package_of(filename)
        if not here:
            return made_by
        if package and here != package:
            return made_by  # left the library the user called (e.g. into JAX)
        package = here
        name = public_name(filename, qualname)
        if name:
            return name
        made_by = factory_name(filename, qualname) or made_by
    return made_by


def factory_name(filename: str, qualname: str) -> str:
    """The public function that defined the closure ``qualname`` (``optax.clip_by_global_norm`` for
    ``clip_by_global_norm.<locals>.update_fn``); "" when it is no closure or its maker is private.

    A library built of factories (Optax's transformations, ``optax.chain`` around them) runs closures
    only, and the user wrote the factory's name. A closure is named only when no public callable is
    met on the way in: a decorator's ``wrapper`` closure (``validate_sample``) wraps the public method
    that is the name. The innermost factory wins: ``optax.chain``'s closure calls the transformation
    that made the value."""
    if ".<locals>." not in qualname:
        return ""
    return public_name(filename, qualname.split(".<locals>.", 1)[0])
