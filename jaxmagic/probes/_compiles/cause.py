"""The kinds of recompilation cause, each declared once - key, title and general fix - in the order they are
named when equally frequent; and ``Cause``, one cause found for one compilation.

To add a kind: declare it here (its place in ``CAUSE_KINDS`` is its priority), let a step of
``causes.STEPS`` find it, and ``tests/test_compile_cause_kinds.py`` checks it is whole.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class CauseKind:
    """One kind of cause: what it is called in a report and what to do about it in general."""

    key: str  # what a report's data holds: ``Cause.cause``, ``FunctionCompiles.causes``
    title: str  # a few words: "static argument value changed"
    # What the probe does with a compilation of this kind: read from these, never from the key.
    again: bool = True  # the user's code compiled it again (False: a first compilation, jaxmagic's own setting)
    types: bool = False  # the arguments' types changed: the changed arguments are counted
    named_alone: bool = False  # JAX's explanation of it is the whole cause: no changed static argument beside it
    static_values: bool = False  # about a static argument's values: named with them, its fix fits their kind
    values_are_evidence: bool = False  # the values seen (static or baked) show it, not the examples of changes
    jax_unexplained: bool = False  # JAX does not explain it (JAX 0.12): jaxmagic compares the static values
    fix_tried_after: bool = False  # a trial after the block words the fix of its compilations
    fix_per_compilation: bool = True  # a compilation of it carries a fix (False: a first, eager or library one)
    evidence: str = ""  # what changed, where no value or example shows it
    fix: str = ""  # the general fix ("" where there is nothing to fix: a first compilation)
    # A recompilation of this kind is avoidable: the fix keeps the program and only changes how it is called
    # or built (a weak type, a new wrapper per call, an argument passed in two ways), so no second compilation
    # was meant. ``%jax_watch`` tells it at its first repeat; other kinds - a new shape (the last, partial
    # batch), a static argument's new value (a mode: train/eval), a setting - only past its budget.
    avoidable: bool = False


# Which cause to name first when two are equally frequent: the ones people find hardest first.
CAUSE_KINDS: tuple[CauseKind, ...] = (
    CauseKind(
        key="static",
        static_values=True,
        values_are_evidence=True,
        jax_unexplained=True,
        fix_tried_after=True,
        title="static argument value changed",
        fix=(
            "A static argument is part of the compiled program: every new value compiles it again. Keep "
            "arguments static only when they change the program's structure (a mode, a layer count), and "
            "then let them take few values; pass anything else as a traced argument."
        ),
    ),
    CauseKind(
        key="static_identity",
        avoidable=True,
        static_values=True,
        values_are_evidence=True,
        jax_unexplained=True,
        title="static argument is a new object each call, hashed by identity",
        fix=(
            "The static argument is hashed by identity: a new object each call is a new cache key, however "
            "alike the objects look. Build it once and pass the same object every time, or make it hashable "
            "by value (define __eq__ and __hash__ over its fields, e.g. a frozen dataclass)."
        ),
    ),
    CauseKind(
        key="baked_constant",
        avoidable=True,
        named_alone=True,
        values_are_evidence=True,
        fix_tried_after=True,
        title="a Python value baked in: a new function per value",
        fix=(
            "A Python value the jitted function closes over (or a functools.partial binds) is a constant of the "
            "compiled program: each value builds a new function, and each new function compiles again. Pass the "
            "value as an argument of the jitted function instead (traced), and jit the function once, so one "
            "compilation serves every value."
        ),
    ),
    CauseKind(
        key="new_function",
        avoidable=True,
        named_alone=True,
        evidence="jit was given a newly built function (a new wrapper) at each call",
        title="a new jit wrapper built at each call",
        fix=(
            "jax.jit was applied to a newly built function each time (jax.jit(jax.grad(f)) inside a helper, "
            "a lambda or functools.partial made in a loop). Each new wrapper starts with an empty cache. Build "
            "the jitted function once, outside the helper or loop (e.g. grad_fn = jax.jit(jax.grad(loss)) at "
            "module level), and pass what changes as arguments."
        ),
    ),
    CauseKind(
        key="cache_cleared",
        title="JAX's caches were emptied",
        fix=(
            "jax.clear_caches() empties every cache of the process: every jitted function and every eager "
            "operation compiles again at its next call. Call it outside the loop, or not at all (to free "
            "memory, delete the arrays you no longer need instead)."
        ),
    ),
    CauseKind(
        key="weak_type",
        avoidable=True,
        types=True,
        title="weakly typed vs typed argument (weak type)",
        fix=(
            "A weakly typed value - a Python scalar, or an array whose dtype came from one, such as "
            "jnp.full(4, 1.0) - and a typed value of the same shape and dtype are different argument types "
            "to jit, so the function compiles once for each. Pass the same kind every time: give it a dtype, "
            "e.g. always jnp.float32(x), jnp.int32(step) or jnp.full(4, 1.0, dtype=jnp.float32)."
        ),
    ),
    CauseKind(
        key="passing",
        avoidable=True,
        title="argument passed in two ways (keyword, position, default)",
        fix=(
            "The same argument was passed in two ways - by keyword in one call and positionally in another, or "
            "left to its default in one; jit treats these as different calls (its cache key holds the positional "
            "arguments and the keyword ones apart). Pass it the same way every time."
        ),
    ),
    CauseKind(
        key="pytree_static",
        fix_tried_after=True,
        title="a static field of an argument changed value",
        fix=(
            "A static field (pytree metadata) is part of the compiled program: every new value compiles "
            "again. Keep it static only when it changes the program's structure; a value that only feeds "
            "arithmetic belongs in a data field (a traced array)."
        ),
    ),
    CauseKind(
        key="pytree_identity",
        avoidable=True,
        title="a static field holds a new object each call, compared by identity",
        fix=(
            "A static field (pytree metadata) is compared with == as part of the cache key; a jit wrapper, "
            "a lambda or an object without __eq__/__hash__ compares by identity, so one built anew is a new "
            "key however alike it looks. Build it once, outside the loop, and keep passing that same object; "
            "or keep something there that compares by value (define __eq__ and __hash__ on its class)."
        ),
    ),
    CauseKind(
        key="pytree",
        avoidable=True,
        title="argument structure changed",
        fix=(
            "The argument's structure (dict keys, list length, None vs array) is part of the cache key. Keep "
            "the same structure on every call, e.g. always the same keys, with zeros instead of a missing entry."
        ),
    ),
    CauseKind(
        key="types",
        types=True,
        title="argument types changed",
        fix=(
            "Each new shape or dtype compiles the function again. Keep dtypes consistent (.astype), and for "
            "varying sizes pad to a few bucket sizes (e.g. powers of two) and mask, instead of one shape per call."
        ),
    ),
    CauseKind(
        key="context",
        title="JAX setting changed",
        fix=(
            "A JAX setting that is part of the trace (a config value or a context manager such as "
            "jax.default_matmul_precision) differed between the calls. Keep it fixed around the calls."
        ),
    ),
    CauseKind(
        key="no_retrace",
        evidence="compiled again without tracing again",
        title="compiled again without re-tracing",
        fix=(
            "The traced program was reused but compiled again: a different jit option (donate_argnums, "
            "shardings), another device, or an explicit .lower().compile()."
        ),
    ),
    CauseKind(
        key="unexplained",
        jax_unexplained=True,
        title="JAX could not say",
        fix=(
            "JAX said only 'cache miss explanation unavailable'. In JAX 0.12 that is what a changed "
            "static argument value gives, and the static arguments jaxmagic could see did not change. "
            "Look at what else jit hashes into its cache key and is not a traced argument: static values "
            "hidden in a functools.partial or a callable object given to jax.jit, values a wrapper passes "
            "as static arguments, or a closure of a function that is created anew and jitted again."
        ),
    ),
    CauseKind(
        key="library",
        fix_per_compilation=False,
        title="a library's own jitted function",
        fix=(
            "A library jitted this function itself, for the arguments your call gave it: compiled once per new "
            "shape, as an eager operation is; compiled again for the same types, it is said apart."
        ),
    ),
    CauseKind(
        key="eager",
        fix_per_compilation=False,
        title="eager operation",
        fix=(
            "Operations outside jit run as small compiled programs, one per new shape and dtype. They are "
            "cheap and cached; a flood of them means eager code in a loop that could go inside a jitted function."
        ),
    ),
    CauseKind(
        key="jaxmagic",
        again=False,
        title="jaxmagic's own setting (once)",
        fix=(
            "Nothing in your code: the compilation came from a cache-key entry jaxmagic sets (see the cause), "
            "and happens once per function and argument types."
        ),
    ),
    CauseKind(key="first", again=False, named_alone=True, fix_per_compilation=False, title="first compilation"),
)

KINDS = {kind.key: kind for kind in CAUSE_KINDS}
CAUSE_TITLES = {kind.key: kind.title for kind in CAUSE_KINDS}
FIXES = {kind.key: kind.fix for kind in CAUSE_KINDS if kind.fix}
# The kinds a rule names alone (compared as objects: ``kind is STATIC``)
FIRST, STATIC, STATIC_IDENTITY, BAKED_CONSTANT, PYTREE_STATIC, TYPES, JAXMAGIC = (
    KINDS[key] for key in ("first", "static", "static_identity", "baked_constant", "pytree_static", "types", "jaxmagic")
)


def cause_priority(key: str) -> int:
    """Rank of a cause among equally frequent ones (0 is named first); an unknown key is an error."""
    return CAUSE_KINDS.index(KINDS[key])


@dataclasses.dataclass
class Cause:
    """One cause of one compilation: its kind, its sentence and the changes that show it."""

    cause: str  # a key of KINDS
    why: str
    changes: list[str] = dataclasses.field(default_factory=list)

    def __post_init__(self) -> None:
        if self.cause not in KINDS:
            raise ValueError(f"{self.cause!r} is no kind of cause declared in compiles/cause.py")

    @property
    def kind(self) -> CauseKind:
        return KINDS[self.cause]


WEAK = " weak"  # how a type text marks a weakly typed value ("f32[] weak"), in the compile log and the user's leaves


def only_weak_type_differs(pairs: list[tuple[str, str]]) -> bool:
    """True when type texts (before, now) that changed differ only in being weakly typed ("f32[] weak" vs
    "f32[]"): the ``weak_type`` kind, whichever way the types were read - the compile log's, JAX's explanation,
    or the user's own leaves behind a library's jit wrapper."""
    changed = [(a, b) for a, b in pairs if a != b]
    return bool(changed) and all(a.removesuffix(WEAK) == b.removesuffix(WEAK) for a, b in changed)
