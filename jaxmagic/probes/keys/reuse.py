"""Explaining a ``KeyReuseError``: which function got the key, which argument, your lines of the use and the first use."""

from __future__ import annotations

import re
import sys

from jaxmagic.probes.keys.report import KeyReuse
from jaxmagic.report.source import first_library_function, is_user_file, user_lines, user_lines_of_stack
from jaxmagic.report.wording import message_of

_PASSED = re.compile(r"Previously-consumed key passed to (?P<function>.+?) at index (?P<index>\d+)")
_IN_TRACE = re.compile(r"In (?P<function>[\w\-.]+), argument (?P<index>\d+) is already consumed")


def explain_key_reuse(
    error: BaseException, where: str = "", function: str = "", params: dict | None = None
) -> KeyReuse:
    """The facts of a ``KeyReuseError``: who got the key, which argument, where it was used and first used."""
    message = message_of(error).strip().splitlines()[0] if message_of(error).strip() else ""
    reuse = KeyReuse(message=message, where=where or "call")
    passed, in_trace = _PASSED.search(message), _IN_TRACE.search(message)
    match = passed or in_trace
    if match:
        reuse.consumer = match.group("function")
        reuse.index = int(match.group("index"))
    if in_trace:
        reuse.where = "trace"
        reuse.function = function
    elif function and reuse.consumer in ("jit-compiled function", ""):
        reuse.consumer = function
    if params and reuse.index is not None:
        reuse.argument = argument_name(params, reuse.index)
    cause = error.__cause__
    if cause is not None and type(cause).__name__ == "KeyReuseError":
        first = user_lines(cause.__traceback__, below_jaxmagic=False)
        reuse.first_used_at = first[-1] if first else None
    if cause is not None and type(cause).__name__ == "JaxStackTraceBeforeTransformation":
        inner = user_lines(cause.__traceback__, below_jaxmagic=False)  # the traced line that reused it
        reuse.reused_at = inner[-1] if inner else None
        called = first_library_function(cause.__traceback__)  # "uniform": what that line called
        if called and reuse.consumer in ("jit", "pjit", "closed_call", ""):
            reuse.consumer = f"jax.random.{called}" if _is_random_api(called) else called
    if reuse.reused_at is None:
        lines = user_lines(error.__traceback__, below_jaxmagic=False) or user_lines_of_stack(sys._getframe(1))
        reuse.reused_at = lines[-1] if lines else None
    return reuse


def _is_random_api(name: str) -> bool:
    import jax  # deferred: importing jaxmagic does not import JAX

    return callable(getattr(jax.random, name, None))


def argument_name(params: dict, index: int) -> str:
    closed = params.get("jaxpr")
    info = getattr(getattr(closed, "jaxpr", closed), "debug_info", None)
    names = getattr(info, "arg_names", None)
    if names and 0 <= index < len(names) and names[index]:
        return str(names[index])
    return ""


_users_functions: dict[str, bool] = {}  # a traced function's "f at file:line" -> whether the file is the user's


def function_is_users(params: dict) -> bool:
    closed = params.get("jaxpr")
    info = getattr(getattr(closed, "jaxpr", closed), "debug_info", None)
    where = str(getattr(info, "func_src_info", "") or "")
    known = _users_functions.get(where)  # asked at every call of a jitted function: answered once per function
    if known is None:
        match = re.search(r" at (.+):\d+$", where)
        known = bool(match) and is_user_file(match.group(1))
        if len(_users_functions) < 10_000:
            _users_functions[where] = known
    return known


# -- the probe -------------------------------------------------------------------
