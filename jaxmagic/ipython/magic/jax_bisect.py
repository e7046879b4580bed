"""``%jax_bisect``: run a call jitted, op by op (disable_jit) and as a float64 reference; say which layer is wrong."""

from __future__ import annotations

import argparse
from typing import Any

from IPython.core.magic_arguments import argument

from jaxmagic.ipython.call_expression import EvaluatedCall
from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import output_option, positive_float
from jaxmagic.report import Report


@magic_arguments()
@argument("call", nargs="*", help="The call whose numbers look wrong, e.g. model(params, x).")
@argument(
    "--ref",
    metavar="EXPR",
    help="The expected result (a name, or an expression in quotes), e.g. a "
    "NumPy float64 computation. Default: the same function op by op in float64, when that is sound.",
)
@argument(
    "--rtol",
    type=positive_float,
    metavar="R",
    help="Relative tolerance (of each leaf's largest reference "
    "value). Default by dtype: 1e-4 for float32, 1e-10 for float64.",
)
@output_option
def jax_bisect(runner: MagicRunner, line: str) -> None:
    """Run a call jitted, op by op (disable_jit) and as a float64 reference; say which layer is wrong.

    jit wrong, eager right: the compilation layer (look at %jax_hlo);
    both wrong: the algorithm or the data; both close to the reference
    but not equal: float32 precision. Without --ref, the reference is the
    same function run op by op with float64 inputs under jax.enable_x64 -
    only when every value of that computation is float64 and it draws no
    random numbers; else jit and eager are compared with each other. Also
    lists arrays the function captures by closure (the chapter's section
    1.4 miscompile). The call runs three times.

    When jit and eager disagree, it first checks what each run receives
    before blaming compilation: Python code that runs once at trace time
    (np.random, a counter), a program traced with an older global or static
    value, a dict argument that jit iterates in sorted key order (or a
    custom pytree node), Python numbers that become int32/float32. It names
    that stage, the line and a fix, with what was checked (a few more runs).
    """
    __tracebackhide__ = True

    def reference_and_call(text: str, args: argparse.Namespace) -> tuple[Any, EvaluatedCall]:
        reference = None
        if args.ref is not None:
            ref_text = args.ref.strip()
            if len(ref_text) > 1 and ref_text[0] == ref_text[-1] and ref_text[0] in "'\"":  # --ref "a b"
                ref_text = ref_text[1:-1]
            reference = runner.evaluate_value(ref_text)
        return reference, runner.evaluate(text)

    def run(inputs: tuple[Any, EvaluatedCall], args: argparse.Namespace) -> tuple[Report, BaseException | None]:
        reference, call = inputs
        return probes.run_bisect_call(
            call.function,
            call.args,
            call.kwargs,
            ref=reference,
            rtol=args.rtol,
            call_text=call.text,
            namespace=runner.user_ns,
        )

    runner.run_call_magic(
        jax_bisect,
        line,
        needs="a call, e.g. %jax_bisect model(params, x) --ref expected",
        evaluate=reference_and_call,
        run=run,
    )
