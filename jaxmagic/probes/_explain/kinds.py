"""The kinds of tracer error the explainer knows (the chapter's table: what went wrong, why, the
fixes), and ``classify``: which kind an exception is."""

from __future__ import annotations

import dataclasses
import sys

from jaxmagic.probes._explain.frames import tracers_on_failing_line
from jaxmagic.probes._leaks.tracers import text
from jaxmagic.probes._support.fixes.fix import Fix
from jaxmagic.report.wording import message_of


@dataclasses.dataclass(frozen=True)
class ErrorKind:
    key: str
    title: str  # what went wrong, in a few words
    triggers: str  # typical code that raises it
    why: str  # one paragraph
    fixes: tuple[Fix, ...]


# The chapter's table of the seven tracer error kinds (section 4), plus the two
# errors of the same family it treats elsewhere: a leaked tracer (4.6) and a
# reused PRNG key (9). Order: most specific class first.
KINDS: dict[str, ErrorKind] = {
    k.key: k
    for k in [
        ErrorKind(
            "bool",
            "Python `if`/`while`/`and`/`or` on a traced value",
            "if x > 0:, while x > 1:, a and b, bool(x)",
            "Python control flow needs a True/False while the function is traced, but a traced value has only "
            "a shape and a dtype. Under plain jax.grad (no jit) the same code works, because grad's tracers carry "
            "values: do not let an eager test fool you.",
            (
                Fix("jnp.where(cond, a, b)", "choose between two values elementwise (both are computed)"),
                Fix("lax.cond(pred, true_fn, false_fn, x)", "run only one branch; pred must be a scalar"),
                Fix("lax.while_loop(cond_fn, body_fn, init)", "a while loop whose condition depends on traced values"),
                Fix(
                    "static_argnames=('{arg}',)",
                    "the condition depends on a setting (a Python number or flag), "
                    "not on data: one compilation per value",
                ),
            ),
        ),
        ErrorKind(
            "int",
            "a traced value used as a Python int",
            "range(n), [a, b, c][i], operator.index(x)",
            "range() and list indexing call __index__, which needs a concrete integer; while tracing, the "
            "integer is a tracer.",
            (
                Fix(
                    "static_argnames=('{arg}',)",
                    "the number decides the program's structure (loop count, list position): one compilation per value",
                ),
                Fix("lax.fori_loop(0, {arg}, body, init)", "a loop whose trip count is data"),
                Fix("jnp.asarray(a_list)[{arg}]", "index a Python list with a traced index: make it an array first"),
            ),
        ),
        ErrorKind(
            "array",
            "a traced value converted to a NumPy array",
            "np.sin(x), np.asarray(x), a NumPy or SciPy function called on a tracer",
            "NumPy functions call __array__, which needs the values; a tracer has none until the compiled "
            "program runs.",
            (
                Fix("jnp.<name>(...) for np.<name>(...)", "most of NumPy exists in jax.numpy and traces"),
                Fix(
                    "jax.pure_callback(f, jax.ShapeDtypeStruct(shape, dtype), x)",
                    "you really need NumPy or another library: call it from the compiled program, declaring "
                    "the result's shape and dtype",
                ),
            ),
        ),
        ErrorKind(
            "concrete",
            "a concrete value needed from a traced value",
            "float(x), int(x), x.item(), jnp.arange(n), jnp.nonzero(x)",
            "The operation needs a Python number, or an output size, that depends on a value known only when "
            "the program runs; jit needs every shape while tracing.",
            (
                Fix(
                    "stay in JAX: {value} * 2 instead of float({value}) * 2, {value}.astype(float)",
                    "the Python number was only a means to compute",
                ),
                Fix("static_argnames=('{arg}',)", "a size or count that is a setting, such as n in jnp.arange(n)"),
                Fix("a fixed size and a mask", "the size depends on data: compute on the largest size and mask"),
                Fix(
                    "jnp.nonzero(x, size=k, fill_value=-1)",
                    "jnp.nonzero / jnp.where(cond) with one argument / jnp.unique: give the output size",
                ),
            ),
        ),
        ErrorKind(
            "bool_index",
            "boolean-mask indexing with a traced mask",
            "x[x > 0], x[mask]",
            "The result's length is the number of True entries, a value known only at run time; jit needs the "
            "shape while tracing. NonConcreteBooleanIndexError is an IndexError, not a ConcretizationTypeError.",
            (
                Fix(
                    "jnp.where(mask, x, 0)",
                    "keep the shape, zero the rest; then sum/mean with the mask "
                    "(jnp.sum(jnp.where(mask, x, 0)) / jnp.sum(mask))",
                ),
                Fix("jnp.nonzero(mask, size=k, fill_value=0)", "you need the indices: give their number"),
            ),
        ),
        ErrorKind(
            "shape",
            "an array shape that depends on a traced value",
            "jnp.zeros(n), x.reshape(n, -1), jnp.ones((n, 3))",
            "Shapes must be known while tracing; here a shape was computed from a traced value. JAX raises a "
            'plain TypeError ("Shapes must be 1D sequences of concrete values").',
            (
                Fix("static_argnames=('{arg}',)", "the shape argument is a setting: make it static"),
                Fix(
                    "<array>.shape[0], <array>.ndim, len(<array>)",
                    "derive sizes from the shapes of your arrays, which are static, not from values",
                ),
                Fix("a fixed size and a mask", "the size depends on data: compute on the largest size and mask"),
            ),
        ),
        ErrorKind(
            "slice",
            "slice bounds that depend on a traced value",
            "x[i:i + 2], x[:n]",
            "A slice with traced start or stop could have any length; jit needs the length while tracing. "
            'JAX raises a plain IndexError ("Array slice indices must have static start/stop/step").',
            (
                # patterns until the line is read (fixes/indexing.fit_slice writes them from it): the traced
                # value may be the slice's start or its stop, and the length is the user's to say
                Fix("lax.dynamic_slice_in_dim(x, start, length)", "the start is data, the length a Python int"),
                Fix("x[jax.ds(start, length)]", "the same with indexing syntax"),
                Fix(
                    "lax.dynamic_update_slice_in_dim(x, update, start, axis=0)",
                    "writing a window rather than reading it",
                ),
                Fix("static_argnames=('{arg}',)", "the bound is a setting, not data"),
            ),
        ),
        ErrorKind(
            "leak",
            "a tracer used after its trace ended (a leak)",
            "storing an intermediate in a global list, an attribute (self.h = h) or a closure during jit/grad",
            "A traced function stored an intermediate value outside itself; after tracing, that value is a "
            "tracer of a finished trace. JAX raises where it is used, which may be far from where it leaked.",
            (
                Fix("return out, h", "return the value you need instead of storing it (has_aux=True with grad)"),
                Fix(
                    "%%jax_leaks (jax.checking_leaks())",
                    "find the leak where it happens: the function and the variable that holds the tracer",
                ),
            ),
        ),
        ErrorKind(
            "library_trace",
            "a library's object changed inside a JAX transformation that did not make it",
            "nnx.merge(...) then a Dropout, or a Module's attribute set, inside a function given to jax.grad",
            "{library} keeps its objects' state (a Module's variables, a random stream's count) in Python objects and "
            "refuses to change one from inside a JAX transformation that started after it was made: JAX's "
            "transformation would not carry the change out, so the object would hold a tracer afterwards. The "
            "library's own transformations carry that state in and out.",
            (
                Fix("the library's own transformation (nnx.grad for jax.grad)", "it carries the objects' state"),
                Fix("pass the object as an argument", "a transformation carries only its arguments' state"),
            ),
        ),
        ErrorKind(
            "key_reuse",
            "a PRNG key used twice",
            "jax.random.normal(key) twice with the same key, with jax_debug_key_reuse on",
            "Drawing twice from one key gives correlated (identical) random numbers. jax_debug_key_reuse "
            "stops at the second use.",
            (
                Fix("key, sub = jax.random.split(key)", "split before every use; use sub, keep key for later"),
                Fix("jax.random.fold_in(key, step)", "one key per step or per index, derived from a base key"),
            ),
        ),
    ]
}


def classify(error: BaseException) -> str | None:
    """The key of ``KINDS`` for a tracer-family error, or None for any other error.

    Works without importing JAX: an error of a JAX class is only possible once
    JAX is imported, and the plain TypeError/IndexError kinds are told by
    JAX's message.
    """

    errors = getattr(sys.modules.get("jax"), "errors", None)
    message = message_of(error)
    if errors is not None:
        checks = [
            ("bool", "TracerBoolConversionError"),
            ("int", "TracerIntegerConversionError"),
            ("array", "TracerArrayConversionError"),
            ("bool_index", "NonConcreteBooleanIndexError"),
            ("leak", "UnexpectedTracerError"),
            ("key_reuse", "KeyReuseError"),
            ("concrete", "ConcretizationTypeError"),
        ]
        for key, name in checks:
            cls = getattr(errors, name, None)
            if cls is not None and isinstance(error, cls):
                return key
    if isinstance(error, TypeError) and message.startswith("Shapes must be 1D sequences of concrete values"):
        return "shape"
    if isinstance(error, IndexError) and message.startswith("Array slice indices must have static"):
        return "slice"
    if (
        isinstance(error, ValueError)
        and message.startswith("The truth value of an array with more than one element is ambiguous")
        and tracers_on_failing_line(error.__traceback__)
    ):
        return "bool"  # `if x > 0:` on a traced vector: NumPy's error, raised before JAX's own
    if isinstance(error, TypeError) and "parameters to jaxpr equations must have __hash__" in message:
        # jnp.tile(x, k) with a traced k: a parameter of the operation (reps) got a tracer
        if text.mentions_tracer(message):
            return "concrete"
    return None
