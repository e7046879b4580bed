"""The line magics: a call, an array or a switch on the magic's line (``MagicRunner._run_call_magic`` for calls)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import Any

from IPython.core.error import UsageError
from IPython.core.magic import line_magic, magics_class
from IPython.core.magic_arguments import argument

from jaxmagic.ipython import explainer_hook, watch_hook
from jaxmagic.ipython.call_expression import EvaluatedCall, split_scope_and_call
from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, expression_checked, probes
from jaxmagic.ipython.option_types import (
    bounded_int,
    comma_list,
    dimension_pair,
    output_option,
    positive_float,
    sweep,
    variable_name,
    vmap_axes,
)
from jaxmagic.report import Report
from jaxmagic.report.watch_areas import UnknownArea, areas_named


@magics_class
class LineMagics(MagicRunner):
    """``%jax_check f(x)``, ``%jax_sharding x``, ``%jax_watch``, ... - one line, one report."""

    @magic_arguments()
    @argument("call", nargs="*", help="The call to time, e.g. deep(ws, x).")
    @argument(
        "-n",
        "--runs",
        type=bounded_int(1),
        default=20,
        metavar="RUNS",
        help="Steady-state runs to time after the first one (default 20).",
    )
    @output_option
    @line_magic
    def jax_stages(self, line: str) -> None:
        """Time one jitted call stage by stage: trace, lower, compile, first run, steady run.

        The call (f(x, y); f is jitted here if it is not) is taken apart with
        jit(f).trace(...).lower().compile(), on a fresh copy of f so the
        figures are a cold first call even if f ran before. Runs are timed
        with block_until_ready. Also shows the compiled program's
        memory_analysis() and cost_analysis(). Arguments may be
        jax.ShapeDtypeStruct; then nothing is run.
        """
        __tracebackhide__ = True
        self._run_call_magic(
            self.jax_stages,
            line,
            needs="a call to time, e.g. %jax_stages step(params, x)",
            run=lambda call, args: probes.run_stages_call(
                call.function, call.args, call.kwargs, runs=args.runs, call_text=call.text
            ),
        )

    @magic_arguments()
    @argument("call", nargs="*", help="The call to check, e.g. risky(x, i).")
    @argument(
        "--errors",
        default="all",
        metavar="SETS",
        help="Comma-separated checks: user, nan, div, index, float (nan+div), all. Default: all.",
    )
    @argument(
        "--vmap",
        type=vmap_axes,
        metavar="AXES",
        help="Check each sample: vmap the checked function with these "
        "in_axes (0, or 0,None, ...); errors then name the failing samples' indices.",
    )
    @output_option
    @line_magic
    def jax_check(self, line: str) -> None:
        """Run one call under jit(checkify.checkify(f, errors=...)) and list every error found.

        Finds your checkify.check failures, NaNs (with the primitive),
        divisions by zero and out-of-bounds indices (which JAX otherwise clamps
        silently). For a vmapped function, the failing samples' indices.
        """
        __tracebackhide__ = True
        from jaxmagic.probes._check import error_set  # deferred: a probe imports JAX, which %load_ext must not

        def checked_call(text: str, args: argparse.Namespace) -> EvaluatedCall:
            with self._options_checked(self.jax_check):
                error_set(args.errors)  # a wrong --errors is said before the call is evaluated
            return self._evaluate(text)

        self._run_call_magic(
            self.jax_check,
            line,
            needs="a call to check, e.g. %jax_check risky(x, i)",
            evaluate=checked_call,
            run=lambda call, args: probes.run_check_call(
                call.function, call.args, call.kwargs, errors=args.errors, call_text=call.text, vmap_axes=args.vmap
            ),
            flag_of={"vmap_axes": "--vmap"},
        )

    @magic_arguments()
    @argument(
        "expression",
        nargs="*",
        help="An array or pytree of arrays, e.g. x or params['w']; or a call "
        "f(x) of a jitted function, which is run and shown with its compiled shardings.",
    )
    @argument(
        "--dims",
        type=dimension_pair,
        metavar="I,J",
        help="For arrays of rank > 2: the two dimensions to draw; "
        "the others' blocks become facets. Default: the split dimensions.",
    )
    @argument(
        "--intermediates",
        action="store_true",
        help="For a call: also the sharding the compiler chose for "
        "every value inside it (jax.debug.inspect_array_sharding in an instrumented copy, compiled not run).",
    )
    @argument(
        "--collectives",
        action="store_true",
        help="For a call: list every collective XLA inserted (all-gather, all-reduce, reduce-scatter, "
        "all-to-all, collective-permute) with the line and named_scope it came from, the mesh axes, the bytes "
        "per device and the sharding that made it necessary; input layouts that remove one are tried by "
        "compiling again (never run).",
    )
    @argument(
        "--no-check",
        action="store_true",
        help="Do not compare the copies of replicated blocks (then no array data is read at all).",
    )
    @argument(
        "--explore",
        action="store_true",
        help="Also show an explorer (ipywidgets) after the report: choose the two dimensions drawn, "
        "slice the others, click a device to highlight its blocks and replicas, switch between a "
        "call's inputs, outputs and (--intermediates) values inside it. A saved notebook shows a line "
        "saying to run the cell instead.",
    )
    @output_option
    @line_magic
    def jax_sharding(self, line: str) -> None:
        """Show which device holds which block of an array: typeof, mesh, PartitionSpec, a drawing.

        Works for 0-D to N-D arrays (pick the drawn dimensions with --dims),
        any number of devices, and arrays spread over several processes
        (blocks of other processes are drawn hatched). Copies of replicated
        blocks are compared bit for bit. For a call of a jitted function, the
        call is run and its compiled input and output shardings are listed;
        --intermediates adds the shardings chosen for values inside it;
        --collectives lists the collectives XLA inserted, by source line.
        --explore adds an explorer after the report (see the option).
        """
        __tracebackhide__ = True

        # the call (when the arrays are its results), else the array's value; and the expression's text
        ShardingInputs = tuple[EvaluatedCall | None, Any, str]

        def call_or_value(text: str, args: argparse.Namespace) -> ShardingInputs:
            from jaxmagic.ipython.expression import callee_is_jitted, parse_expression  # deferred: reads JAX's jit type

            with expression_checked():
                parse_expression(text)
                as_call = args.intermediates or args.collectives or callee_is_jitted(text, self.user_ns)
            return (self._evaluate(text), None, text) if as_call else (None, self._evaluate_value(text), text)

        def run(inputs: ShardingInputs, args: argparse.Namespace) -> tuple[Report, BaseException | None]:
            call, value, text = inputs
            if call is None:
                report = probes.sharding(
                    value, expression=text.strip(), dims=args.dims, check_replicas=not args.no_check
                )
                return report, None
            return probes.run_sharding_call(
                call.function,
                tuple(call.args),
                call.kwargs,
                call_text=call.text,
                intermediates=args.intermediates,
                collectives=args.collectives,
                dims=args.dims,
                check_replicas=not args.no_check,
            )

        def explorer(report: Report, inputs: ShardingInputs, args: argparse.Namespace) -> Callable[[], None] | None:
            if not args.explore:
                return None
            # deferred: ipywidgets is imported only when an explorer is asked for
            from jaxmagic.ipython.explorers.sharding import (
                input_layouts,
                intermediate_layouts,
                show_sharding_explorer,
            )

            call = inputs[0]
            data = report.to_dict()
            given, inside = [], []
            if call is not None:
                try:
                    given = input_layouts(tuple(call.args), call.kwargs)
                    inside = intermediate_layouts(data, tuple(call.args), call.kwargs)
                except Exception:  # the inputs' layouts are extra: the outputs are still explored
                    pass
            return lambda: show_sharding_explorer(data, given, inside, in_kernel=self._in_kernel)

        self._run_call_magic(
            self.jax_sharding,
            line,
            needs="an array expression or a call, e.g. %jax_sharding x",
            evaluate=call_or_value,
            run=run,
            explorer=explorer,
        )

    @magic_arguments()
    @argument(
        "count", nargs="?", help="How many fake CPU devices (a number or an expression). Without it: list the devices."
    )
    @output_option
    @line_magic
    def jax_devices(self, line: str) -> None:
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
        with self._options_checked(self.jax_devices):
            report = probes.devices(count)
        self._publish(report, args)

    @magic_arguments()
    @argument("what", nargs="*", help="on | off | an exception (e.g. err); default: the last exception.")
    @output_option
    @line_magic
    def jax_explain(self, line: str) -> None:
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
        text, option_text = self._split(self.jax_explain, line)
        args = self._parse(self.jax_explain, option_text)
        word = text.strip()
        if word in ("on", "off"):
            if args.output:
                raise UsageError("-o stores the explanation of an exception; `%jax_explain on|off` makes none.")
            changed = (explainer_hook.install if word == "on" else explainer_hook.uninstall)(self._shell)
            state = "on" if explainer_hook.is_on(self._shell) else "off"
            print(f"jaxmagic tracer-error explainer: {state}" + ("" if changed else " (unchanged)"))
            return
        error = self._given_or_last_error(
            word,
            "jax_explain",
            "on, off or an exception",
            "There is no last exception to explain; pass one: %jax_explain err",
        )
        # An error it cannot explain still gets a report (saying why), so `-o` works on every error.
        report = probes.explain_or_say_why(error, namespace=self.user_ns)
        del error
        self._publish(report, args)

    @magic_arguments()
    @argument("pattern", nargs="?", default="", help="List the flags whose name contains PATTERN.")
    @argument("--all", action="store_true", dest="all_flags", help="List every flag with its value.")
    @output_option
    @line_magic
    def jax_config(self, line: str) -> None:
        """List the JAX flags that differ from a fresh process's defaults, with both values.

        A debugging switch left on (jax_debug_nans, jax_check_tracer_leaks,
        jax_log_compiles, ...) makes code slow for no visible reason; this
        shows it, and whether an environment variable set it. Defaults are read
        once from a fresh subprocess and cached. --all lists every flag;
        PATTERN lists the flags whose name contains it.
        """
        args = self._parse(self.jax_config, line)
        try:
            report = probes.config_diff(all_flags=args.all_flags, pattern=args.pattern)
        except RuntimeError as error:
            raise UsageError(str(error)) from None
        self._publish(report, args)

    @magic_arguments()
    @argument("--show-host", action="store_true", help="Keep the host name (hidden by default).")
    @output_option
    @line_magic
    def jax_env(self, line: str) -> None:
        """jax.print_environment_info(), ready to paste into an issue: host name hidden unless --show-host.

        Also lists the JAX_* / XLA_* environment variables of this process.
        Asks for the devices, so it starts the JAX backend if none is running.
        """
        args = self._parse(self.jax_env, line)
        self._publish(probes.environment(show_host=args.show_host), args)

    @magic_arguments()
    @argument(
        "mode",
        nargs="?",
        help="auto | tracebackhide | remove_frames | quiet_remove_frames | off: "
        "switch jax_traceback_filtering for the next cells.",
    )
    @output_option
    @line_magic
    def jax_traceback(self, line: str) -> None:
        """Show (or switch) JAX's traceback filtering mode, and your frames of the last exception.

        The five modes of jax_traceback_filtering decide how much of JAX's own
        code a traceback shows; the report explains each and what `auto` means
        here. With MODE, the mode is switched for the following cells (it is
        read when an exception is raised). The last exception's traceback is
        summarised: your frames only, with their lines, and how many frames
        were JAX's.
        """
        args = self._parse(self.jax_traceback, line)
        previous = ""
        if args.mode is not None:
            with self._options_checked(self.jax_traceback):
                previous = probes.set_traceback_filtering(args.mode)
        error = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
        report = probes.traceback_view(error, previous_mode=previous)
        del error
        self._publish(report, args)

    @magic_arguments()
    @argument(
        "words",
        nargs="*",
        help="[SCOPE] EXPR: an optional jax.named_scope name or path (encoder, "
        "encoder/attn), then the call, e.g. model(params, x); arguments may be jax.ShapeDtypeStruct.",
    )
    @argument(
        "--stage",
        default="all",
        metavar="STAGE",
        help="jaxpr, stablehlo, hlo or all (comma-separated; default all). Memory and cost need hlo.",
    )
    @argument(
        "--sweep",
        type=sweep,
        metavar="NAME=V1,V2,...",
        help="Compile once per value of NAME, a name the call "
        "uses (B in jax.ShapeDtypeStruct((B, 4096), jnp.float32)), and tabulate memory_analysis().",
    )
    @argument(
        "--explore",
        action="store_true",
        help="Also show an explorer (ipywidgets) after the report: the named_scope tree; a scope chosen "
        "shows its jaxpr, StableHLO and optimized-HLO lines side by side with your line of each. A saved "
        "notebook shows a line saying to run the cell instead.",
    )
    @output_option
    @line_magic
    def jax_hlo(self, line: str) -> None:
        """Find your named_scope in the jaxpr, StableHLO and optimized HLO of a call; memory before running.

        %jax_hlo [SCOPE] EXPR traces, lowers and compiles EXPR (e.g.
        model(params, x)) ahead of time - it never runs it. With SCOPE, the
        operations of that jax.named_scope in each stage side by side, with
        your lines, the kernels XLA runs them in, and operations that fusion
        files under another scope's name. Without SCOPE, the tree of named
        scopes with counts per stage. Always: globals or closure values baked
        into the program as literals, captured constant arrays, and the
        compiled program's memory_analysis() and cost_analysis(). --sweep
        B=64,256,1024 compiles once per value of B and tabulates the memory.
        --explore adds an explorer of every scope after the report.
        """
        __tracebackhide__ = True
        from jaxmagic.probes._hlo import Sweep, parse_stages  # deferred: imports JAX (see above)

        needs = "a call, e.g. %jax_hlo model(params, x) or %jax_hlo encoder model(params, x)"
        namespace = self.user_ns

        # the call, the sweep of one of its names (--sweep), the scope asked about and the stages
        HloInputs = tuple[EvaluatedCall, Sweep | None, str | None, list[str]]

        def scoped_call(text: str, args: argparse.Namespace) -> HloInputs:
            try:
                scope, call_text = split_scope_and_call(text)
            except ValueError as error:
                raise UsageError(f"{error}.") from None
            with self._options_checked(self.jax_hlo):
                stages = parse_stages(args.stage)
            if not call_text:
                raise UsageError(f"%jax_hlo needs {needs}")
            sweep_name, sweep_values = args.sweep or ("", [])

            def evaluated(value: object = None) -> EvaluatedCall:
                return self._evaluate(call_text, namespace if not sweep_name else {**namespace, sweep_name: value})

            def build(value: object) -> tuple[Any, list[Any], dict[str, Any]]:
                built = evaluated(value)
                return built.function, built.args, built.kwargs

            call = evaluated(sweep_values[0] if sweep_values else None)
            return call, Sweep(sweep_name, sweep_values, build) if sweep_name else None, scope, stages

        def run(inputs: HloInputs, args: argparse.Namespace) -> tuple[Report, BaseException | None]:
            call, sweep, scope, stages = inputs
            return probes.run_hlo_call(
                call.function,
                call.args,
                call.kwargs,
                scope=scope,
                stage=stages,
                call_text=call.text,
                namespace=namespace,
                sweep=sweep,
                every_scope=args.explore,
            )

        def explorer(report: Report, inputs: HloInputs, args: argparse.Namespace) -> Callable[[], None] | None:
            if not args.explore:
                return None
            # deferred: ipywidgets is imported only when an explorer is asked for
            from jaxmagic.ipython.explorers.hlo import show_hlo_explorer

            data = report.to_dict()
            return lambda: show_hlo_explorer(data, in_kernel=self._in_kernel)

        self._run_call_magic(self.jax_hlo, line, needs=needs, evaluate=scoped_call, run=run, explorer=explorer)

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
    @line_magic
    def jax_bisect(self, line: str) -> None:
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
                reference = self._evaluate_value(ref_text)
            return reference, self._evaluate(text)

        def run(inputs: tuple[Any, EvaluatedCall], args: argparse.Namespace) -> tuple[Report, BaseException | None]:
            reference, call = inputs
            return probes.run_bisect_call(
                call.function,
                call.args,
                call.kwargs,
                ref=reference,
                rtol=args.rtol,
                call_text=call.text,
                namespace=self.user_ns,
            )

        self._run_call_magic(
            self.jax_bisect,
            line,
            needs="a call, e.g. %jax_bisect model(params, x) --ref expected",
            evaluate=reference_and_call,
            run=run,
        )

    @magic_arguments()
    @argument("what", nargs="?", default="on", choices=("on", "off", "status"), help="on (default) | off | status")
    @argument("--only", type=comma_list, default=None, metavar="AREAS", help="Watch only these areas, e.g. NaN,memory.")
    @argument("--budget", type=bounded_int(0), default=2, help="Compilations per function before it is told (2).")
    @argument(
        "--panel",
        action="store_true",
        help="Also show one panel for the session (an ipywidgets explorer), updated as cells run: every "
        "finding so far with its cell, area, line, count and the magic to run next. A saved notebook "
        "shows a line saying to run the cell instead.",
    )
    @argument(
        "-o",
        "--output",
        type=variable_name,
        metavar="NAME",
        help="Bind the watch's log (it keeps growing while the watch is on).",
    )
    @line_magic
    def jax_watch(self, line: str) -> None:
        """Watch every later cell for NaN, recompilation, transfers, growing memory and reused keys.

        `%jax_watch` (= on) watches each later cell on JAX's fast path until
        `%jax_watch off`; a watched cell runs exactly as unwatched, and a new
        problem is shown once, under the cell that caused it. `status` shows
        what is watched and found so far; -o NAME binds the log. --panel (with
        on or status) shows a panel of every finding so far, updated after
        each watched cell.
        """
        args = self._parse(self.jax_watch, line)
        if args.panel and args.what == "off":
            raise UsageError("--panel shows the running watch's findings; `%jax_watch off` stops the watch.")
        if args.what == "on":
            self._switch_watch_on(args)
            # -o and --panel hold the watch's log: they start the watch now (its probes import JAX)
            watch = watch_hook.current(self._shell) if args.output or args.panel else None
        else:  # status and off show the log: a watch turned on before JAX is imported starts now
            watch = watch_hook.current(self._shell)
            if args.what == "off":
                watch = watch_hook.uninstall(self._shell) or watch
                if watch is None:
                    print("jaxmagic watch: off (unchanged)")
        if args.what != "on" and watch is not None:
            self._publish(watch.log, args)
        elif args.output:
            self.user_ns[args.output] = watch.log if watch is not None else None
        if args.what == "status" and watch is None:
            print("jaxmagic watch: off")
        if args.panel and watch is not None:
            # deferred: ipywidgets is imported only when an explorer is asked for
            from jaxmagic.ipython.explorers.watch_panel import show_watch_panel

            watch_hook.set_panel(self._shell, show_watch_panel(watch.log, in_kernel=self._in_kernel))

    def _switch_watch_on(self, args: argparse.Namespace) -> None:
        """``%jax_watch on``: install the watch's hook, checking the options without importing the probes
        (they import JAX, and the watch starts at the first cell that begins with JAX imported)."""
        try:
            areas = areas_named(args.only)
        except UnknownArea as error:
            raise UsageError(f"--only {error}.") from None
        hook = watch_hook.running(self._shell)
        if hook is None:
            watch_hook.install(
                self._shell, lambda: probes.Watch(only=areas, budget=args.budget), areas=areas, budget=args.budget
            )
            print(f"jaxmagic watch: on ({', '.join(areas)}; budget {args.budget})")
            return
        # already on: its session and findings are kept, never replaced silently
        running = f"{', '.join(hook.areas)}; budget {hook.budget}"
        cells, findings = hook.so_far()
        if (hook.areas, hook.budget) != (areas, args.budget):
            raise UsageError(
                f"%jax_watch is already on ({running}; {cells} cell(s) watched, {findings} finding(s)): "
                "`%jax_watch off` ends it and shows its findings, then `%jax_watch on` with the new options "
                "starts a new session."
            )
        print(
            f"jaxmagic watch: already on ({running}), unchanged: {cells} cell(s) watched, "
            f"{findings} finding(s) kept (`%jax_watch status` shows them)"
        )

    @magic_arguments()
    @argument(
        "name",
        nargs="?",
        default="",
        help="The name each engine bound its report to (-o NAME of the magic run under %%px); optional with --values.",
    )
    @argument(
        "--values",
        metavar="EXPR",
        default="",
        help="A pytree that should be the same on every engine (replicated parameters, a step counter), "
        "evaluated once on each: the leaves that differ, where, and by how much.",
    )
    @argument(
        "--view",
        metavar="VIEW",
        help="The ipyparallel view (a name in this namespace); default: the one DirectView here.",
    )
    @argument(
        "--timeout",
        type=positive_float,
        default=30.0,
        metavar="S",
        help="Seconds to wait for all engines (default 30); engines that did not answer are named, with "
        "where each one is (its Python stack, asked for with a signal: at most 1 s more).",
    )
    @output_option
    @line_magic
    def jax_gather(self, line: str) -> None:
        """Merge one magic's report from every engine of an ipyparallel view: a row per process, the differences.

        Run a magic on every engine with `%%px`, binding its report (`%%jax_doctor -o rep`),
        then `%jax_gather rep`. The merged report names what differs between processes: a
        NaN on some only (with each one's line and call), a function compiled differently
        on some (the processes run different programs: collectives can hang), memory
        growing on some, the same random key on every process, and engines that failed or
        did not answer within --timeout (where a hang is): a busy engine's Python stack says
        which process runs Python code (a loop, at its line) and which wait in a JAX call.
        In a multi-process job each process digests the programs it compiles: a process that
        compiled another program is named with the first operation that differs and its line.

        `%jax_gather --values params` (with or without NAME) compares a pytree that should
        be the same everywhere: each engine digests every leaf, then only the leaves that
        differ are fetched; each is named (`params['w']`) with its processes and largest
        difference.
        """
        args = self._parse(self.jax_gather, line)
        if not args.name and not args.values:
            raise UsageError("%jax_gather: name a report (-o NAME of the magic run on every engine) or --values EXPR.")
        if args.name and not args.name.isidentifier():
            raise UsageError(
                f"%jax_gather: {args.name!r} is not a name: give the NAME the magic bound with -o NAME on every engine."
            )
        if args.values:
            try:
                compile(args.values, "<--values>", "eval")
            except SyntaxError as error:
                raise UsageError(f"%jax_gather --values: {args.values!r} is not an expression ({error.msg}).") from None
        view = self._ipyparallel_view(args.view)
        report = probes.gather_from_engines(view, args.name, args.timeout, values=args.values)
        self._publish(report, args)

    def _ipyparallel_view(self, name: str | None) -> Any:  # an ipyparallel view (an optional, untyped library)
        """The view named ``name``, or the one DirectView of the namespace; a UsageError otherwise."""
        ipp = sys.modules.get("ipyparallel")
        if name is not None:
            view = self.user_ns.get(name)
            if view is None or not hasattr(view, "apply_async") or not hasattr(view, "client"):
                raise UsageError(f"--view {name!r} is not an ipyparallel view in this namespace.")
            return view
        direct = getattr(ipp, "DirectView", None) if ipp is not None else None
        views = [v for k, v in self.user_ns.items() if not k.startswith("_") and direct and isinstance(v, direct)]
        views = list({id(v): v for v in views}.values())
        if len(views) != 1:
            found = "no ipyparallel DirectView" if not views else f"{len(views)} DirectViews"
            raise UsageError(
                f"%jax_gather: there is {found} in this namespace; start engines "
                "(`rc = ipp.Cluster(n=2).start_and_connect_sync(); dv = rc[:]`) or name one with --view."
            )
        return views[0]
