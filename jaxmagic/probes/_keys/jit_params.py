"""What the parameters of a jitted call tell about its function: an argument's name, whether the
function is the user's (read from the traced program's debug info)."""

from __future__ import annotations

import re

from jaxmagic._jax.types import Params
from jaxmagic.usercode.source import is_user_file


def argument_name(params: Params, index: int) -> str:
    closed = params.get("jaxpr")
    info = getattr(getattr(closed, "jaxpr", closed), "debug_info", None)
    names = getattr(info, "arg_names", None)
    if names and 0 <= index < len(names) and names[index]:
        return str(names[index])
    return ""


_users_functions: dict[str, bool] = {}  # a traced function's "f at file:line" -> whether the file is the user's


def function_is_users(params: Params) -> bool:
    closed = params.get("jaxpr")
    info = getattr(getattr(closed, "jaxpr", closed), "debug_info", None)
    where = str(getattr(info, "func_src_info", "") or "")
    known = _users_functions.get(where)  # asked at every call of a jitted function: answered once per function
    if known is None:
        match = re.search(r" at (.+):\d+$", where)
        known = match is not None and is_user_file(match.group(1))
        if len(_users_functions) < 10_000:
            _users_functions[where] = known
    return known
