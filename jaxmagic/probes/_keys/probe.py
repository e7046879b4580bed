"""The key probe itself: ``keys()``, one pass over the block's calls with JAX's key-reuse checker on."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import jax

from jaxmagic._jax import jit_calls
from jaxmagic._jax.own_settings import note_own_value
from jaxmagic._jax.restore import preserved_jax_state
from jaxmagic._jax.types import Params
from jaxmagic.probes._keys.draws import random_calls_followed
from jaxmagic.probes._keys.findings import KeyReuse
from jaxmagic.probes._keys.flows import KeyWatch
from jaxmagic.probes._keys.report import KeyReport
from jaxmagic.probes._keys.reuse import explain_key_reuse
from jaxmagic.probes._support.explained import mark_explained
from jaxmagic.report.wording import error_line

CONFIG_NAMES = ("jax_debug_key_reuse",)


@contextlib.contextmanager
def keys(
    *,
    record: bool = False,
    check_calls: bool = True,
    also_observe: tuple[jit_calls.CallObserver, ...] = (),
    only_user_calls: bool = False,
    fast_path: bool = False,
    on_calls_unseen: Callable[[], None] | None = None,
    sampler: jit_calls.CallSampler | None = None,
) -> Iterator[KeyReport]:
    """Check the block for reused PRNG keys; count the keys each jitted function of yours receives.

    Default: the first reuse raises JAX's ``KeyReuseError`` (the report is
    filled in first). ``record=True``: every reuse is recorded and the block
    runs on as it would without the checker. ``check_calls=False`` checks each
    traced function but not each call (much cheaper: the per-call check traces
    some operations again at every call); keys passed again are then still
    seen by the distinct-key count. ``also_observe``: more call observers for
    the same pass over the calls (the observation does not nest).
    ``only_user_calls``: watch only the jitted calls your own code makes (much
    cheaper; eager code is then not checked). ``fast_path``: the same calls,
    left on JAX's C++ path (cheaper still; needs ``record`` and not
    ``check_calls``; ``on_calls_unseen``, ``sampler``: see ``jit_calls.observing_calls``).
    """
    report = KeyReport(recorded=record)
    mode = "record" if record else "raise"
    report.calls_checked = check_calls
    reuses = _Reuses(report)
    watch = KeyWatch(report)
    try:
        with (
            preserved_jax_state(CONFIG_NAMES),
            random_calls_followed(report, sampler),
            jit_calls.observing_calls(
                watch,
                *also_observe,
                trace_checks=mode,
                call_checks=mode if check_calls else "off",
                on_key_reuse=reuses.on_reuse,
                only_user_calls=only_user_calls,
                fast_path=fast_path,
                on_calls_unseen=on_calls_unseen,
                sampler=sampler,
            ) as followed,
        ):
            report.followed = followed
            if not followed:  # at least JAX's own checker
                note_own_value("jax_debug_key_reuse", True)
                with jax.debug_key_reuse(True):
                    yield report
            else:
                yield report
    except jax.errors.KeyReuseError as error:
        if not report.reuse:  # raised without passing our observer (e.g. an older JAX)
            report.reuse.append(explain_key_reuse(error))
        mark_explained(error, report)
        raise
    except BaseException as error:
        report.other_error = error_line(error)
        raise
    finally:
        watch.finish()


class _Reuses:
    """The reuses JAX's checker reports during the block, each kept once (counted when seen again); those of
    keys a library made and consumed itself kept apart (``KeyReport.library_reuse``)."""

    def __init__(self, report: KeyReport) -> None:
        self.report = report
        self.seen: dict[tuple[object, ...], KeyReuse] = {}

    def on_reuse(
        self, error: BaseException, where: str, function: str, params: Params, args: tuple[object, ...] = ()
    ) -> None:
        reuse = explain_key_reuse(error, where, function, params, args)
        report = self.report
        if reuse.library_own:
            kept = next(
                (r for r in report.library_reuse if (r.consumer, r.where) == (reuse.consumer, reuse.where)), None
            )
            if kept is not None:
                kept.count += 1
            elif len(report.library_reuse) < 16:
                report.library_reuse.append(reuse)
            return
        spot = (
            reuse.consumer,
            reuse.index,
            reuse.where,
            (reuse.reused_at.filename, reuse.reused_at.lineno) if reuse.reused_at else None,
        )
        if spot in self.seen:
            self.seen[spot].count += 1
            return
        self.seen[spot] = reuse
        report.reuse.append(reuse)
