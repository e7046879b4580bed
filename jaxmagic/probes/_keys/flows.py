"""The keys each jitted function of yours receives: distinct typed (and ``random_wrap``-ed legacy) keys per argument.

A called program is also searched for draws that give the same numbers at every call (one key for a vmapped
batch, a constant key, a key that does not change between a loop's passes) and for the key arguments it only
folds counters into. Each search walks the whole program: it is done once per program in the process
(``searched_once``), not once per block - a watched notebook calls the same compiled step cell after cell, and
the searches of a small MLP's step were ~1-2 ms of every watched cell (2% of a 300-step loop on a TPU, whose
cell is ~90 ms; issue 60 item 3). The findings themselves are made per block from what was found.
"""

from __future__ import annotations

import hashlib
import inspect
import sys
import threading
import weakref
from collections.abc import Callable, Iterable
from functools import partial
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar, cast

import numpy as np

from jaxmagic._jax import jaxpr_parts, jit_calls, key_internals, prng_checks
from jaxmagic.probes._keys import key_reads
from jaxmagic.probes._keys.findings import ConstantKeyDraw, KeyFlow, LoopKeyDraw, SameNumbersDraw, SharedKeyDraw
from jaxmagic.probes._keys.fixes import shared_key_fix
from jaxmagic.probes._keys.idle_keys import idle_inputs
from jaxmagic.probes._keys.jit_params import argument_name, function_is_users
from jaxmagic.probes._keys.key_reads import KeyReads
from jaxmagic.probes._keys.library_state import (
    dropped_update,
    folded_inputs,
    holder_of,
    state_jit_fix,
    tried_under_state_jit,
)
from jaxmagic.probes._keys.report import KeyReport
from jaxmagic.probes._support import attribution
from jaxmagic.probes._support.calls import call_names
from jaxmagic.probes._support.calls.call_site import call_site
from jaxmagic.report import SourceLine
from jaxmagic.report.provenance import Provenance
from jaxmagic.usercode.source import code_kind, line_of

if TYPE_CHECKING:
    from jaxmagic._jax.fast_path_calls import CallDetails
    from jaxmagic._jax.types import Jaxpr, Params, Value

# distinct key fingerprints kept per argument (a repeat of one kept is found; later new keys are counted only)
MAX_FLOW_VALUES = 1000


def made_by_users_line() -> bool:
    """Whether the observed jitted call was made by the user's own line, though its function is a library's
    (``jax.jit(model.apply)``, ``jax.jit(hk.transform(f).apply)``): the keys the user hands it are the user's,
    as the NaN watch takes the call as the user's. A call a library's code makes (numpyro's sampler) is not."""
    if jit_calls.call_site() is not None:  # the fast path records the user's own calls only
        return True
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and code_kind(frame.f_code.co_filename) in ("jax", "jaxmagic"):
        frame = frame.f_back
    return frame is not None and code_kind(frame.f_code.co_filename) == "user"


class KeyWatch(jit_calls.CallObserver):
    """Counts the distinct typed keys each argument of the user's jitted functions receives."""

    def __init__(self, report: KeyReport) -> None:
        self.report = report
        self.flows: dict[tuple[str, int], KeyFlow] = {}
        # flow -> key fingerprint -> [its text, times seen]: a record changed in place, so Any
        self.seen: dict[tuple[str, int], dict[bytes, list[Any]]] = {}
        self.legacy_arguments: dict[
            int, tuple[Jaxpr, frozenset[int]]
        ] = {}  # id(jaxpr) -> (jaxpr, argument indices), for the block
        # id(jaxpr) -> (jaxpr, its shared-key draws): programs already searched for shared draws
        self.shared_seen: dict[int, tuple[Jaxpr, list[SameNumbersDraw]]] = {}
        self.loops_seen: dict[
            int, tuple[Jaxpr, list[SameNumbersDraw]]
        ] = {}  # id(jaxpr) -> (jaxpr, its loop draws): programs searched once
        self.constants_seen: dict[
            int, tuple[Jaxpr, list[SameNumbersDraw]]
        ] = {}  # id(jaxpr) -> (jaxpr, its constant-key draws)
        # (search, function, file, line, api) -> finding: shared-key, loop and constant-key draws, one per place
        self.draw_findings: dict[tuple[str, str, str, int, str], SameNumbersDraw] = {}
        self.folded: dict[
            int, tuple[Jaxpr, dict[int, set[int]], dict[int, bool]]
        ] = {}  # id(jaxpr) -> (jaxpr, key -> folded arguments, dropped updates)
        self.state_asked: set[tuple[str, int]] = set()  # flows whose library-state fix was looked for
        self.carried: set[tuple[str, int]] = set()  # key arguments carried through without a draw, told once
        self.lock = threading.Lock()
        self.reads = KeyReads()  # the keys' data being read, counted once there (``key_reads``)

    def before(self, name: str, is_jit: bool, args: tuple[Value, ...], params: Params) -> None:
        if not is_jit or not (function_is_users(params) or made_by_users_line()):
            return
        self._shared_draws(name, params)
        self._loop_draws(name, params)
        self._constant_draws(name, params)
        legacy = self._legacy_arguments(params)
        folded, dropped = self._folded_arguments(params)
        idle = self._idle_arguments(params)
        self.reads.settle(wait=False)  # the keys of earlier calls whose data is there by now
        for index, value in enumerate(args):
            if not jit_calls.is_typed_key(value) and index not in legacy:
                continue
            if index in idle:  # a key the program makes no random numbers from (carried through): not counted
                self._carried(name, index, params)
                continue
            # a key only folded with other arguments (fold_in(key, count)) draws anew when they change
            with_data = [j for j in sorted(folded.get(index, ())) if j < len(args)]
            key = (name, index)
            with self.lock:
                flow = self.flows.get(key)
                if flow is None:
                    flow = self._new_flow(key, name, index, value, params, legacy, with_data)
                flow.calls += 1
            fix = None  # a library's key whose counter the jit drops: its fix, if the key turns out repeated
            if key not in self.state_asked and any(dropped.get(j) for j in with_data):
                counters = [args[j] for j in with_data if dropped.get(j)]
                fix = partial(self._library_state_fix, name, value, counters, dict(jit_calls.call_locals() or {}))
            # Read without waiting where looks are deferred (``key_reads``): counted once the data is there.
            data = [key_data(value), *(key_data(args[j]) for j in with_data)]
            self.reads.read(data, partial(self._count_key, key, fix))

    def _new_flow(
        self,
        key: tuple[str, int],
        name: str,
        index: int,
        value: object,
        params: Params,
        legacy: frozenset[int],
        with_data: list[int],
    ) -> KeyFlow:
        """The flow of an argument's keys, at its first call (its line and names are the call's: taken now).
        Called with ``lock`` held."""
        caller, lineno = call_site()
        through = call_names.user_call(caller) if caller is not None else None  # a library's wrapper
        argument = (
            (through.name_of(value) if through is not None else "")
            or argument_name(params, index)
            or f"argument {index}"
        )
        del through
        line = line_of(caller, lineno)
        flow = self.flows[key] = KeyFlow(
            name,
            argument,
            first_call=line,
            legacy=index in legacy,
            provenance=attribution.of_source_line(line, attribution.started_by(caller), [f"jit({name})"]),
            compared=0,
        )
        flow.folded_with = [argument_name(params, j) or f"argument {j}" for j in with_data]
        self.report.flows.append(flow)
        self.seen[key] = {}
        return flow

    def _count_key(self, key: tuple[str, int], fix: Callable[[], str] | None, data: list[np.ndarray]) -> None:
        """Count one call's key (and the arguments folded into it), read on the host: ``data``."""
        fingerprint, shown = data_fingerprint(data[0])
        for folded in data[1:]:
            fingerprint += data_fingerprint(folded)[0]
        with self.lock:
            flow, seen = self.flows[key], self.seen[key]
            flow.compared = (flow.compared or 0) + 1
            if fingerprint in seen:
                seen[fingerprint][1] += 1
                if fix is not None and key not in self.state_asked:
                    self.state_asked.add(key)  # asked once per argument: its holder does not change
                    flow.fix = fix()
            else:  # a new key past the first MAX_FLOW_VALUES is still a distinct one (counted, not kept)
                if len(seen) < MAX_FLOW_VALUES:
                    seen[fingerprint] = [shown, 1]
                flow.distinct += 1

    def _shared_draws(self, name: str, params: Params) -> None:
        """Draws under vmap with one key for the whole batch, searched once per program; counted per call."""

        def finding(line: SourceLine | None, api: str, provenance: Provenance, _site: object) -> SharedKeyDraw:
            key, fix = shared_key_fix(line, api)
            return SharedKeyDraw(name, api, line, key=key, fix=fix, provenance=provenance)

        self._draws_of_program(
            name, params, self.shared_seen, prng_checks.shared_key_draws, finding, self.report.shared
        )

    def _loop_draws(self, name: str, params: Params) -> None:
        """Draws in a loop body with a key that is the same at every pass, searched once per program."""

        def finding(line: SourceLine | None, api: str, provenance: Provenance, loop: Any) -> LoopKeyDraw:
            return LoopKeyDraw(name, api, line, loop=loop.primitive.name, provenance=provenance)

        self._draws_of_program(
            name, params, self.loops_seen, prng_checks.loop_invariant_draws, finding, self.report.loop_draws
        )

    def _constant_draws(self, name: str, params: Params) -> None:
        """Draws with a key made of constants inside the function (or closed over), searched once per program."""

        def finding(line: SourceLine | None, api: str, provenance: Provenance, maker: Any) -> ConstantKeyDraw:
            key_line = None
            if maker is not None:  # the line of the user's that made the key (jax.random.PRNGKey(0))
                made = attribution.of_equation(*maker).made_at
                key_line = made if made is not None and made != line else None
            return ConstantKeyDraw(name, api, line, key_line=key_line, provenance=provenance)

        self._draws_of_program(
            name, params, self.constants_seen, prng_checks.constant_key_draws, finding, self.report.constant_draws
        )

    def _draws_of_program(
        self,
        name: str,
        params: Params,
        searched: dict[int, tuple[Jaxpr, list[SameNumbersDraw]]],
        search: Callable[..., Iterable[Any]],
        make: Callable[[SourceLine | None, str, Provenance, Any], SameNumbersDraw],
        into: list[Any],
    ) -> None:
        """Count, once per call, the findings ``search`` (draw equations of a program) gives for the called
        program - one per line and API of ``name``, made by ``make`` and added to ``into`` when new. A
        program is searched once; ``searched`` remembers it."""
        jaxpr = _program_of(params)
        if jaxpr is None:
            return
        finding: SameNumbersDraw | None  # declared apart: the draws known, then the one found per spot
        known = searched.get(id(jaxpr))
        if known is not None and known[0] is jaxpr:
            for finding in known[1]:
                finding.calls += 1
            return
        found = []
        draws = searched_once(search.__name__, jaxpr, lambda j: list(search(j)))
        caller, _ = call_site() if draws else (None, 0)
        started = attribution.started_by(caller) if caller is not None else None
        for eqn, enclosing, *site in draws:
            provenance = attribution.of_equation(eqn, enclosing, started)
            provenance.transforms = [f"jit({name})", *provenance.transforms]
            line = provenance.made_at
            api = provenance.library_function or "jax.random"
            spot = (search.__name__, name, line.filename if line else "", line.lineno if line else 0, api)
            finding = self.draw_findings.get(spot)
            if finding is None:
                finding = self.draw_findings[spot] = make(line, api, provenance, site[0] if site else None)
                into.append(finding)
            finding.calls += 1
            found.append(finding)
        if len(searched) < 1000:
            searched[id(jaxpr)] = (jaxpr, found)

    def _folded_arguments(self, params: Params) -> tuple[dict[int, set[int]], dict[int, bool]]:
        """The key arguments the called program only folds other arguments into, with those; and, for each of
        those, whether the program computes a new value of it and drops it (a library's counter lost)."""
        jaxpr = _program_of(params)
        if jaxpr is None:
            return {}, {}
        cached = self.folded.get(id(jaxpr))
        if cached is not None and cached[0] is jaxpr:
            return cached[1], cached[2]
        folded, dropped = searched_once("folded", jaxpr, _folded_and_dropped)
        if len(self.folded) < 1000:
            self.folded[id(jaxpr)] = (jaxpr, folded, dropped)
        return folded, dropped

    def _library_state_fix(self, name: str, key: object, counters: list[object], details: CallDetails) -> str:
        """The fix of a key a library keeps with a counter the jit drops: the library's own jit, tried by tracing
        the user's function under it on the call's arguments (``details``: ``jit_calls.call_locals()`` at the
        call); "" when no library object holds the pair."""
        fun, arguments, kwargs = details.get("fun"), details.get("args"), details.get("kwargs") or {}
        if fun is None or arguments is None:
            return ""
        try:
            names = list(inspect.signature(fun).parameters)
        except (TypeError, ValueError):
            names = []
        holder = next(
            (h for c in counters if (h := holder_of(tuple(arguments), dict(kwargs), key, c, names))),
            None,
        )
        if holder is None:
            return ""
        path, kind, jit = holder
        worked, why = tried_under_state_jit(jit, fun, tuple(arguments), dict(kwargs))
        return state_jit_fix(name, path, kind, jit, worked, why)

    def _carried(self, name: str, index: int, params: Params) -> None:
        """Say once that argument ``index`` of ``name`` is a key the program carries without drawing from it."""
        if (name, index) not in self.carried:
            with self.lock:
                self.carried.add((name, index))
                self.report.carried.append(f"`{name}`'s `{argument_name(params, index) or f'argument {index}'}`")

    def _idle_arguments(self, params: Params) -> frozenset[int]:
        """The arguments the called program makes no random numbers from (``idle_keys``): an eval step's
        train-state key, carried through."""
        jaxpr = _program_of(params)
        return frozenset() if jaxpr is None else searched_once("idle", jaxpr, idle_inputs)

    def _legacy_arguments(self, params: Params) -> frozenset[int]:
        """The arguments the called program wraps into keys (``random_wrap``): raw uint32 keys."""
        jaxpr = _program_of(params)
        if jaxpr is None:
            return frozenset()
        cached = self.legacy_arguments.get(id(jaxpr))
        if cached is not None and cached[0] is jaxpr:
            return cached[1]
        found = searched_once("wrapped", jaxpr, _wrapped_or_none)
        if len(self.legacy_arguments) < 1000:
            self.legacy_arguments[id(jaxpr)] = (jaxpr, found)
        return found

    def finish(self) -> None:
        """Count the keys still being read, then fill in each flow's most repeated key (rendered once, at the end)."""
        self.reads.settle(wait=True)
        self.legacy_arguments.clear()
        self.folded.clear()
        self.shared_seen.clear()
        self.constants_seen.clear()
        for key, flow in self.flows.items():
            seen = self.seen.get(key)
            if seen:
                data, times = max(seen.values(), key=lambda item: item[1])
                flow.repeated_key, flow.repeated_times = render_key(data), times
        self.seen.clear()


# A program's searches (its shared-key, loop and constant-key draws, folded and wrapped key inputs), remembered
# across blocks by the program's identity: a watched notebook runs the same compiled step cell after cell, and
# each search walks the whole program (~1-2 ms a cell for a small MLP's step; a TPU loop of 300 such steps is
# ~90 ms). Held by a weak reference to the program: a program gone is searched again if its id comes back.
_searches: dict[tuple[str, int], tuple[weakref.ref[Any], Any]] = {}
SEARCHES_KEPT = 512  # searches remembered; past it all are forgotten (searched again once)
_T = TypeVar("_T")


def searched_once(kind: str, jaxpr: Any, search: Callable[[Any], _T]) -> _T:
    """``search(jaxpr)``, done once per program and ``kind`` in the process (``_searches``). Its result is
    shared: read it, never change it."""
    key = (kind, id(jaxpr))
    known = _searches.get(key)
    if known is not None and known[0]() is jaxpr:
        return cast(_T, known[1])
    result = search(jaxpr)
    try:
        reference = weakref.ref(jaxpr)
    except TypeError:  # a program that takes no weak reference: searched at each block
        return result
    if len(_searches) >= SEARCHES_KEPT:
        _searches.clear()
    _searches[key] = (reference, result)
    return result


def _folded_and_dropped(jaxpr: Any) -> tuple[dict[int, set[int]], dict[int, bool]]:
    """``folded_inputs`` of the program and, for each argument folded into a key, whether the program drops
    its new value (``dropped_update``); nothing where the program's layout is another."""
    try:
        folded = folded_inputs(jaxpr)
        return folded, {j: dropped_update(jaxpr, j) for data in folded.values() for j in data}
    except Exception:  # another jaxpr layout: keys counted by their own data
        return {}, {}


def _wrapped_or_none(jaxpr: Any) -> frozenset[int]:
    try:
        return frozenset(_wrapped_inputs(jaxpr))
    except Exception:  # another jaxpr layout: follow typed keys only
        return frozenset()


def _wrapped_inputs(jaxpr: Jaxpr, depth: int = 0) -> set[int]:
    """Indices of the program's inputs that reach ``random_wrap`` (a raw key made a typed one), through calls."""
    invars = list(jaxpr.invars)
    found: set[int] = set()
    for eqn in jaxpr.eqns:
        inputs = [invars.index(v) if v in invars else None for v in eqn.invars]
        if eqn.primitive.name == "random_wrap":
            found |= {i for i in inputs[:1] if i is not None}
        elif depth < 4:
            for sub in jaxpr_parts.sub_jaxprs(eqn):
                inner = getattr(sub, "jaxpr", sub)
                if len(inner.invars) == len(eqn.invars):  # a call: its inputs are the equation's
                    found |= {n for i in _wrapped_inputs(inner, depth + 1) if (n := inputs[i]) is not None}
    return found


def key_fingerprint(key: object) -> tuple[bytes, object]:
    """A digest of a typed key's raw data, and the data (rendered only if shown); reads it (waiting for it),
    consumes nothing."""
    return data_fingerprint(key_reads.host_array(key_data(key)))


def key_data(key: object) -> object:
    """A key's raw data where it lives, not read: a typed key's uint32 data; a raw uint32 key is its own."""
    return key_internals.typed_key_data(key) if jit_calls.is_typed_key(key) else key


_shape_texts: dict[tuple[int, ...], bytes] = {}  # a shape -> its text in a fingerprint (made per key read)


def data_fingerprint(data: np.ndarray) -> tuple[bytes, np.ndarray]:
    """``key_fingerprint`` of key data read on the host."""
    shape = data.shape
    text = _shape_texts.get(shape)
    if text is None:
        text = str(shape).encode()
        if len(_shape_texts) < 1024:
            _shape_texts[shape] = text
    raw = data.tobytes() + text
    # A key or two is a few bytes: its data is its own fingerprint; a batch of keys is digested.
    return (raw if len(raw) <= 64 else hashlib.blake2b(raw, digest_size=16).digest()), data


def render_key(data: Any) -> str:
    return np.array2string(data.reshape(-1)[:4], separator=" ") + ("..." if data.size > 4 else "")


def _program_of(params: Params) -> Any:
    """The jaxpr a ``pjit`` equation calls (its params' ``jaxpr``, closed or not); None where it has none."""
    closed = params.get("jaxpr")
    return getattr(closed, "jaxpr", closed)
