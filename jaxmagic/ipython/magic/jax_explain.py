"""``%jax_explain``: explain tracer errors: `%jax_explain on|off`, or explain one exception now."""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic_arguments import argument

from jaxmagic.ipython import explainer_hook
from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import output_option


@magic_arguments()
@argument("what", nargs="*", help="on | off | an exception (e.g. err); default: the last exception.")
@output_option
def jax_explain(runner: MagicRunner, line: str) -> None:
    """Explain tracer errors: `%jax_explain on|off`, or explain one exception now.

    With `on` (the default when jaxmagic is loaded), a tracer-family error
    raised by a cell - TracerBoolConversionError, TracerIntegerConversionError,
    TracerArrayConversionError, ConcretizationTypeError,
    NonConcreteBooleanIndexError, the "Shapes must be 1D sequences of
    concrete values" TypeError, the "Array slice indices must have static
    start/stop/step" IndexError, UnexpectedTracerError, KeyReuseError, and
    JAX's "Leaked trace" error - gets an explanation above its normal
    traceback: the traced function, the argument(s) the value depends on,
    your line, and the standard fixes. Other exceptions are shown exactly
    as before. `off` puts back the handler that was there before.

    A tracer kept past its trace that JAX reports as another error (e.g.
    "... is not a valid JAX type" from jax.device_put) is explained as the
    leak it is: who holds it, the function that made it, the line that stored it.
    A function, string or object among a jitted function's arguments ("Error
    interpreting argument ... as an abstract array") is named leaf by leaf, with
    `eqx.filter_jit` or a static argument tried by tracing the function again.

    `%jax_explain` alone explains the last exception; `%jax_explain err`
    the exception `err`; -o NAME stores that report - for an error it
    cannot explain, a report saying why.
    """
    text, option_text = runner.split(jax_explain, line)
    args = runner.parse(jax_explain, option_text)
    word = text.strip()
    if word in ("on", "off"):
        if args.output:
            raise UsageError("-o stores the explanation of an exception; `%jax_explain on|off` makes none.")
        changed = (explainer_hook.install if word == "on" else explainer_hook.uninstall)(runner.ipython)
        state = "on" if explainer_hook.is_on(runner.ipython) else "off"
        print(f"jaxmagic tracer-error explainer: {state}" + ("" if changed else " (unchanged)"))
        return
    error = runner.given_or_last_error(
        word,
        "jax_explain",
        "on, off or an exception",
        "There is no last exception to explain; pass one: %jax_explain err",
    )
    # An error it cannot explain still gets a report (saying why), so `-o` works on every error.
    report = probes.explain_or_say_why(error, namespace=runner.user_ns)
    del error
    runner.publish(report, args)
