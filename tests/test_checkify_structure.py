"""The structure of checkify's ``Error`` value that ``jaxmagic._jax.checkify_errors`` reads.

Those reads are of private fields; if a JAX upgrade changes them, these tests
fail here, in one place, instead of ``%jax_check`` quietly listing only the
first error.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import checkify
from jax.tree_util import tree_unflatten

from jaxmagic._jax import checkify_errors


def two_errors(x, i):
    y = jnp.log(x)  # NaN for a negative x
    return y.sum() + x[i]  # out of bounds for a large i


def _err(fn, *args, vmap=False):
    checked = checkify.checkify(fn, errors=checkify.all_checks)
    if vmap:
        checked = jax.vmap(checked)
    err, _ = jax.jit(checked)(*args)
    return err


def test_error_has_the_private_fields_read():
    err = _err(two_errors, jnp.array([-1.0, 2.0]), 5)
    for field in ("_pred", "_code", "_metadata", "_payload"):
        assert hasattr(err, field), f"checkify's Error lost {field}"
    # _pred, _code and _payload are keyed by the same effects, one per kind of check that can fail
    assert isinstance(err._pred, dict) and err._pred
    assert set(err._code) == set(err._pred) == set(err._payload)
    assert isinstance(err._metadata, dict)


def test_pred_flags_code_indexes_metadata_and_payload_rebuilds_the_exception():
    err = _err(two_errors, jnp.array([-1.0, 2.0]), 5)
    failed = [effect for effect, pred in err._pred.items() if bool(np.asarray(pred))]
    assert len(failed) == 2  # both errors are kept, one per effect: more than err.get() shows
    kinds = set()
    for effect in failed:
        code = int(np.asarray(err._code[effect]))
        assert code in err._metadata  # the code names the treedef of the exception object
        payload = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(err._payload[effect])]
        exc = tree_unflatten(err._metadata[code], payload)
        assert isinstance(exc, Exception) and str(exc)  # the exception object, its message filled in
        kinds.add(type(exc).__name__)
    assert kinds == {"NaNError", "OOBError"}


def test_under_vmap_pred_has_one_flag_per_sample():
    err = _err(lambda x: jnp.log(x).sum(), jnp.array([[1.0], [-1.0], [-2.0]]), vmap=True)
    (pred,) = [np.asarray(p) for p in err._pred.values() if np.asarray(p).any()]
    assert pred.shape == (3,) and pred.tolist() == [False, True, True]


def test_every_error_lists_all_and_the_mapped_index():
    found = checkify_errors.every_error(_err(two_errors, jnp.array([-1.0, 2.0]), 5))
    assert sorted(type(exc).__name__ for exc, _ in found) == ["NaNError", "OOBError"]
    assert all(index is None for _, index in found)
    found = checkify_errors.every_error(_err(lambda x: jnp.log(x).sum(), jnp.array([[1.0], [-1.0]]), vmap=True))
    assert [(type(exc).__name__, index) for exc, index in found] == [("NaNError", [1])]


def test_no_error_gives_nothing():
    assert checkify_errors.every_error(_err(two_errors, jnp.array([1.0, 2.0]), 1)) == []


def test_exception_frames_name_file_line_function():
    (exc, _), *_ = checkify_errors.every_error(_err(lambda x: jnp.log(x).sum(), jnp.array([-1.0])))
    frames = exc.traceback_info.frames  # innermost first
    assert frames
    assert all(hasattr(frame, name) for frame in frames for name in ("file_name", "line_num", "function_name"))
    assert any(name.endswith("test_checkify_structure.py") for name, _, _ in checkify_errors.error_frames(exc))


def test_exception_class_names_are_the_kinds_check_maps():
    from jaxmagic.probes._check import _KIND_OF_CLASS

    def every_kind(x, i):
        checkify.check(jnp.all(x > 0), "x must be positive")
        return jnp.log(x).sum() + x[i] + 7 // i

    found = checkify_errors.every_error(_err(every_kind, jnp.array([-1.0, 2.0]), 0))
    found += checkify_errors.every_error(_err(every_kind, jnp.array([1.0, 2.0]), 5))
    assert {type(exc).__name__ for exc, _ in found} == set(_KIND_OF_CLASS)
