"""The IPython magics: argument parsing and wiring only, no JAX logic.

Each magic parses its line with ``magic_arguments`` (so ``%jax_nans?`` prints
real help), runs the cell or the call inside a probe, stores the report under
``-o NAME`` and displays it.
"""

from __future__ import annotations

from IPython.core.error import UsageError
from IPython.core.magic import Magics, cell_magic, line_magic, magics_class
from IPython.core.magic_arguments import argument, magic_arguments, parse_argstring

from jaxmagic import probes
from jaxmagic._call_expr import CallExpressionError, evaluate_call, split_call_and_options
from jaxmagic._cell import CellOutcome, run_cell_body, shown_if_unparsable
from jaxmagic.probes.check import error_set, parse_vmap_axes
from jaxmagic._expression import callee_is_jitted, evaluate_expression, parse_expression
from jaxmagic.render import display_report

OUTPUT_HELP = "Store the report object in the user namespace under NAME, for the next cell to assert on."


@magics_class
class JaxMagics(Magics):
    # -- helpers --------------------------------------------------------------

    def _parse(self, magic, line: str):
        args = parse_argstring(magic, line)
        name = getattr(args, "output", None)
        if name is not None and not name.isidentifier():
            raise UsageError(f"-o needs a Python variable name, got {name!r}.")
        return args

    def _publish(self, report, args) -> None:
        if getattr(args, "output", None):
            self.shell.user_ns[args.output] = report
        display_report(report, use_widgets=getattr(self.shell, "kernel", None) is not None)

    def _run_cell_in_probe(self, probe, args, cell: str):
        """Run the cell inside ``probe``; show the report; then raise the cell's own exception."""
        __tracebackhide__ = True  # noqa: F841 - keeps these frames out of the user's traceback
        if shown_if_unparsable(self.shell, cell):
            return None
        outcome = CellOutcome()
        try:
            with probe as report:
                outcome = run_cell_body(self.shell, cell)
                outcome.reraise()
        except BaseException as error:
            if error is not outcome.exception:
                raise
        self._publish(report, args)
        outcome.reraise()

    def _evaluate(self, call_text: str):
        try:
            return evaluate_call(call_text, self.shell.user_ns)
        except CallExpressionError as error:
            raise UsageError(str(error)) from None

    # -- magics ---------------------------------------------------------------

    @magic_arguments()
    @argument("--infs", action="store_true", help="Also stop at the first inf (jax_debug_infs).")
    @argument("-o", "--output", metavar="NAME", help=OUTPUT_HELP)
    @cell_magic
    def jax_nans(self, line, cell):
        """Run the cell with NaN checking on; say which primitive made the NaN, and where.

        Checking is scoped to this cell (jax.debug_nans as a context manager),
        so it also catches NaNs that the global jax_debug_nans switch misses
        after a vmap has been traced. On a NaN the cell still fails with JAX's
        FloatingPointError; above it, the report names the primitive, forward
        or backward pass, your line, and the non-finite leaves (key paths such
        as [0]['b']) of the failing call's arguments or result.
        """
        __tracebackhide__ = True  # noqa: F841
        args = self._parse(self.jax_nans, line)
        probe = probes.nans(infs=args.infs, namespace=self.shell.user_ns)
        return self._run_cell_in_probe(probe, args, cell)

    @magic_arguments()
    @argument("--budget", type=int, metavar="N", help="After the report, fail the cell if a function of yours "
              "compiled more than N times (only the one named by --fn, if given).")
    @argument("--fn", metavar="NAME", help="The function --budget applies to, e.g. train_step.")
    @argument("--all", action="store_true", dest="show_all",
              help="Also list the small compilations of eager operations (jnp calls outside jit).")
    @argument("-o", "--output", metavar="NAME", help=OUTPUT_HELP)
    @cell_magic
    def jax_compiles(self, line, cell):
        """Count every compilation in the cell per function, and say why each function compiled again.

        For each compilation: the argument types, trace / lower / XLA compile
        times, your line that caused it, and the cause in plain words - first
        call, argument shape/dtype changed, Python scalar vs typed scalar (weak
        type), pytree structure changed, static argument value changed (JAX
        itself only says "explanation unavailable" there), a new function object
        given to jit. Eager operations' small compilations are counted apart
        (listed with --all). --budget N makes the cell fail after the report if
        a function compiled more than N times.
        """
        __tracebackhide__ = True  # noqa: F841
        args = self._parse(self.jax_compiles, line)
        if args.budget is not None and args.budget < 0:
            raise UsageError(f"--budget takes a number of compilations, 0 or more; got {args.budget}.")
        if args.fn is not None and args.budget is None:
            raise UsageError("--fn names the function that --budget applies to; give --budget N as well.")
        probe = probes.compiles(budget=args.budget, fn=args.fn, show_all=args.show_all, raise_over_budget=False)
        self._run_cell_in_probe(probe, args, cell)
        probe.report.raise_if_over_budget()

    @magic_arguments()
    @argument("call", nargs="*", help="The call to check, e.g. risky(x, i).")
    @argument("--errors", default="all", metavar="SETS",
              help="Comma-separated checks: user, nan, div, index, float (nan+div), all. Default: all.")
    @argument("--vmap", metavar="AXES", help="Check each sample: vmap the checked function with these "
              "in_axes (0, or 0,None, ...); errors then name the failing samples' indices.")
    @argument("-o", "--output", metavar="NAME", help=OUTPUT_HELP)
    @line_magic
    def jax_check(self, line):
        """Run one call under jit(checkify.checkify(f, errors=...)) and list every error found.

        Finds your checkify.check failures, NaNs (with the primitive),
        divisions by zero and out-of-bounds indices (which JAX otherwise clamps
        silently). For a vmapped function, the failing samples' indices.
        """
        call_text, option_text = split_call_and_options(line)
        args = self._parse(self.jax_check, option_text)
        if not call_text:
            raise UsageError("%jax_check needs a call to check, e.g. %jax_check risky(x, i)")
        try:
            error_set(args.errors)
            vmap_axes = None if args.vmap is None else parse_vmap_axes(args.vmap)
        except ValueError as error:
            raise UsageError(f"{error}.") from None
        call = self._evaluate(call_text)
        report = probes.check(call.function, *call.args, errors=args.errors, call_text=call.text,
                              vmap_axes=vmap_axes, **call.kwargs)
        del call  # keep no user array alive
        self._publish(report, args)

    @magic_arguments()
    @argument("expression", nargs="*", help="An array or pytree of arrays, e.g. x or params['w']; or a call "
              "f(x) of a jitted function, which is run and shown with its compiled shardings.")
    @argument("--dims", metavar="I,J", help="For arrays of rank > 2: the two dimensions to draw; "
              "the others' blocks become facets. Default: the split dimensions.")
    @argument("--intermediates", action="store_true", help="For a call: also the sharding the compiler chose for "
              "every value inside it (jax.debug.inspect_array_sharding in an instrumented copy, compiled not run).")
    @argument("--no-check", action="store_true", help="Do not compare the copies of replicated blocks "
              "(then no array data is read at all).")
    @argument("-o", "--output", metavar="NAME", help=OUTPUT_HELP)
    @line_magic
    def jax_sharding(self, line):
        """Show which device holds which block of an array: typeof, mesh, PartitionSpec, a drawing.

        Works for 0-D to N-D arrays (pick the drawn dimensions with --dims),
        any number of devices, and arrays spread over several processes
        (blocks of other processes are drawn hatched). Copies of replicated
        blocks are compared bit for bit. For a call of a jitted function, the
        call is run and its compiled input and output shardings are listed;
        --intermediates adds the shardings chosen for values inside it.
        """
        __tracebackhide__ = True  # noqa: F841
        text, option_text = split_call_and_options(line)
        args = self._parse(self.jax_sharding, option_text)
        if not text:
            raise UsageError("%jax_sharding needs an array expression or a call, e.g. %jax_sharding x")
        dims = None
        if args.dims is not None:
            try:
                dims = [int(d) for d in args.dims.split(",")]
            except ValueError:
                raise UsageError(f"--dims takes two dimensions such as 0,2, got {args.dims!r}.") from None
        try:
            parse_expression(text)
            as_call = args.intermediates or callee_is_jitted(text, self.shell.user_ns)
        except CallExpressionError as error:
            raise UsageError(str(error)) from None
        try:
            if as_call:
                call = self._evaluate(text)
                report, error = probes.run_sharding_call(
                    call.function, tuple(call.args), call.kwargs, call_text=call.text,
                    intermediates=args.intermediates, dims=dims, check_replicas=not args.no_check)
                del call  # keep no user array alive
            else:
                value = self._evaluate_value(text)
                report, error = probes.sharding(value, expression=text.strip(), dims=dims,
                                                check_replicas=not args.no_check), None
                del value
        except ValueError as problem:  # --dims that do not fit
            if "--dims" not in str(problem):
                raise
            raise UsageError(f"{problem}.") from None
        self._publish(report, args)
        if error is not None:
            raise error

    def _evaluate_value(self, text: str):
        try:
            return evaluate_expression(text, self.shell.user_ns)
        except CallExpressionError as error:
            raise UsageError(str(error)) from None

    @magic_arguments()
    @argument("count", nargs="?", help="How many fake CPU devices (a number or an expression). "
              "Without it: list the devices.")
    @argument("-o", "--output", metavar="NAME", help=OUTPUT_HELP)
    @line_magic
    def jax_devices(self, line):
        """Give this kernel N fake CPU devices (before the JAX backend starts), or list the devices.

        Put it right after %load_ext jaxmagic: JAX fixes the device count when
        its backend starts (the first operation that needs a device). After
        that the report says plainly that the kernel must be restarted.
        Without N, lists the devices (starting the backend).
        """
        args = self._parse(self.jax_devices, line)
        count = None
        if args.count is not None:
            count = self._evaluate_value(args.count)
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise UsageError(f"%jax_devices takes a positive number of devices, got {args.count!r} = {count!r}.")
        self._publish(probes.devices(count), args)
