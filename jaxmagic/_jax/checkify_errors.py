"""Every error a ``checkify`` ``Error`` value holds, read from its private fields in one place.

``Error.get()`` and ``Error.get_exception()`` give only the first error. To
list them all, ``every_error`` reads the fields JAX 0.12 keeps per kind of check
(one entry per effect): ``_pred`` (did it fail; one flag per sample under
``vmap``), ``_code`` (which of the ``_metadata`` entries describes the error),
``_metadata`` (code -> the treedef of the exception object) and ``_payload``
(the exception's array leaves). ``tests/test_checkify_structure.py`` asserts this
structure, so a JAX release that changes it fails there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
from jax.tree_util import tree_map, tree_unflatten

if TYPE_CHECKING:
    from jax._src.checkify import Error


def every_error(err: Error) -> list[tuple[Any, list[int] | None]]:
    """``(exception, mapped_index)`` for every error ``err`` holds, in JAX's effect order.

    ``mapped_index`` is the sample's index under ``vmap`` (None without one).
    A JAX without the private fields gives the first error only (public API).
    """
    try:  # private fields: one entry per kind of check that can fail
        preds, codes, metadata, payloads = err._pred, err._code, err._metadata, err._payload
    except AttributeError:  # a future JAX: fall back to the public, first-error-only API
        exc = err.get_exception()
        return [] if exc is None else [(exc, None)]
    found = []
    for effect, effect_pred in preds.items():
        pred = np.asarray(effect_pred)
        code = np.asarray(codes[effect])
        for index in zip(*np.nonzero(pred)) if pred.ndim else ([()] if pred else []):
            payload = tree_map(lambda x, i=index: np.asarray(x)[i], payloads[effect])
            exc = tree_unflatten(metadata[int(code[index])], payload)
            found.append((exc, [int(i) for i in index] if pred.ndim else None))
    return found


def error_frames(exc: BaseException) -> list[tuple[str, int, str]]:
    """``(file, line, function)`` of the frames where a checkify exception was made, innermost first."""
    frames = getattr(getattr(exc, "traceback_info", None), "frames", None) or []
    return [(frame.file_name, frame.line_num, frame.function_name) for frame in frames]
