"""The cell magics: each runs the cell inside one probe (``MagicRunner._run_cell_magic``) and shows its report."""

from __future__ import annotations

import argparse
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from IPython.core.error import UsageError
from IPython.core.magic import cell_magic, line_cell_magic, magics_class
from IPython.core.magic_arguments import argument
from IPython.utils.capture import capture_output

from jaxmagic.ipython import debugger
from jaxmagic.ipython.cell_runner import run_cell_body, shown_if_unrunnable
from jaxmagic.ipython.lazy_arguments import magic_arguments
from jaxmagic.ipython.magic_runner import MagicRunner, probes
from jaxmagic.ipython.option_types import (
    bounded_int,
    comma_list,
    output_option,
    profile_path,
    variable_name,
)
from jaxmagic.ipython.user_traceback import raise_users_error
from jaxmagic.report import Report

if TYPE_CHECKING:
    from jaxmagic.ipython.call_expression import EvaluatedCall
    from jaxmagic.probes._compiles.probe import compiles as CompilesProbe


@magics_class
class CellMagics(MagicRunner):
    """``%%jax_nans``, ``%%jax_compiles``, ... - one probe around one cell."""

    @magic_arguments()
    @argument("--infs", action="store_true", help="Also stop at the first inf (jax_debug_infs).")
    @argument(
        "--inside",
        action="store_true",
        help="Also evaluate the first call of each jitted function op by op and report the first NaN/inf "
        "made inside it, even one a later operation masked (rsqrt(inf)=0, jnp.where, jnp.nan_to_num). "
        "Every call then takes JAX's slower Python dispatch path.",
    )
    @output_option
    @cell_magic
    def jax_nans(self, line: str, cell: str) -> None:
        """Run the cell with NaN checking on; say which primitive made the NaN, and where.

        Checking is scoped to this cell (jax.debug_nans as a context manager),
        so it also catches NaNs that the global jax_debug_nans switch misses
        after a vmap has been traced. On a NaN the cell still fails with JAX's
        FloatingPointError; above it, the report names the operation that
        produced the value - inside scan/while/cond bodies, nested jit and
        library functions, with the loop iteration and the input values there -
        the forward or backward pass, your line, and the non-finite leaves (key
        paths such as [0]['b']) of the failing call's arguments or result.

        Under jit only the outputs of the compiled program are checked; a clean
        report says so. With --inside, an inf or NaN that a later operation
        masked (a float16 variance through rsqrt, jnp.where(jnp.isfinite(x), x, 0),
        jnp.nan_to_num) is found too, with your lines of both operations.
        """
        __tracebackhide__ = True
        self._run_cell_magic(
            self.jax_nans,
            line,
            cell,
            lambda args: probes.nans(infs=args.infs, namespace=self.user_ns, inside=args.inside),
        )

    @magic_arguments()
    @argument(
        "--budget",
        type=bounded_int(0),
        metavar="N",
        help="After the report, fail the cell if a function of yours "
        "compiled more than N times (only the one named by --fn, if given).",
    )
    @argument("--fn", metavar="NAME", help="The function --budget applies to, e.g. train_step.")
    @argument(
        "--all",
        action="store_true",
        dest="show_all",
        help="Also list the small compilations of eager operations (jnp calls outside jit).",
    )
    @output_option
    @cell_magic
    def jax_compiles(self, line: str, cell: str) -> None:
        """Count every compilation in the cell per function, and say why each function compiled again.

        For each compilation: the argument types, trace / lower / XLA compile
        times, your line that caused it, and the cause in plain words - first
        call, argument shape/dtype changed, weakly typed vs typed argument (weak
        type), pytree structure changed, static argument value changed (JAX
        itself only says "explanation unavailable" there), a new function object
        given to jit. Eager operations' small compilations are counted apart
        (listed with --all). --budget N makes the cell fail after the report if
        a function compiled more than N times. Also: where the slowest
        compilation's size comes from (equations per line, a Python loop
        unrolled, constants baked in), donated buffers JAX could not reuse
        (which argument, why) and persistent compilation cache misses (why).
        """
        __tracebackhide__ = True

        def build_probe(args: argparse.Namespace) -> CompilesProbe:
            if args.fn is not None and args.budget is None:
                raise UsageError("--fn names the function that --budget applies to; give --budget N as well.")
            return probes.compiles(budget=args.budget, fn=args.fn, show_all=args.show_all, raise_over_budget=False)

        probe = self._run_cell_magic(self.jax_compiles, line, cell, build_probe)
        try:
            probe.report.raise_if_over_budget()
        except probes.CompileBudgetExceeded as over:  # raised on purpose, for the cell to fail: from no frame of ours
            raise_users_error(over)

    @magic_arguments()
    @argument(
        "--mode",
        default="log",
        choices=["log", "disallow"],
        help="log (default): run the whole cell and list every implicit transfer; disallow: make each "
        "one an error (the cell stops at the first one your code does not catch).",
    )
    @output_option
    @cell_magic
    def jax_transfers(self, line: str, cell: str) -> None:
        """Run the cell under jax.transfer_guard; list each implicit host-to-device transfer with your line.

        NumPy arrays, Python scalars and lists given to JAX are copied to the
        device implicitly, on every call (explicit jax.device_put is allowed).
        With --mode log the cell runs through and each transfer is listed with
        the line that made it and the value's type; with --mode disallow each
        becomes JAX's error. On the CPU backend device-to-host reads
        (float(x)) are not intercepted.
        """
        __tracebackhide__ = True
        self._run_cell_magic(self.jax_transfers, line, cell, lambda args: probes.transfers(mode=args.mode))

    @magic_arguments()
    @output_option
    @cell_magic
    def jax_leaks(self, line: str, cell: str) -> None:
        """Run the cell with tracer-leak checking; name the variable that holds each leaked tracer.

        Every function in the cell traces afresh (a function whose trace is
        cached would otherwise not be checked), without clearing your caches.
        On a leak the cell fails with JAX's "Leaked trace" error; above it the
        report names the traced function, each leaked tracer's shape and dtype,
        and where it is stored in your terms - leaked[0], cache.store['h'],
        m.last_hidden, box[0] (closed over by f) - with the fix. An
        UnexpectedTracerError in the cell is explained too: where the old
        tracer was used, where it was made, which variable still holds it.
        """
        __tracebackhide__ = True
        self._run_cell_magic(self.jax_leaks, line, cell, lambda args: probes.leaks(namespace=self.user_ns))

    @magic_arguments()
    @output_option
    @cell_magic
    def jax_per_device(self, line: str, cell: str) -> None:
        """Run the cell; show what each device printed inside shard_map, grouped by device.

        jax.debug.print inside a shard_map prints once per device, in no set
        order and without saying which device printed. For this cell every
        such print is tagged with the device's mesh position (lax.axis_index
        of each mesh axis) and the report shows the lines per device, on a
        drawing of the mesh. The printed text itself is unchanged.
        """
        __tracebackhide__ = True
        self._run_cell_magic(self.jax_per_device, line, cell, lambda args: probes.per_device())

    @magic_arguments()
    @argument(
        "--warmup",
        type=bounded_int(0),
        default=0,
        metavar="N",
        help="Run the cell N times first, unprofiled (its output hidden), so compilation and first "
        "calls are left out; then profile one more run.",
    )
    @argument(
        "--save",
        metavar="DIR",
        help="Keep the trace in DIR (Perfetto JSON and xprof's .xplane.pb); the report says how to open it.",
    )
    @output_option
    @cell_magic
    def jax_profile(self, line: str, cell: str) -> None:
        """Run the cell under jax.profiler.trace; say where the time went, by your source line and named_scope.

        Device time of every kernel, summed per line of your code and per
        jax.named_scope (read from each program's optimized HLO), the top
        kernels with their HLO instruction, and the cell's wall time split
        into compilation, host dispatch, device execution and waiting - so
        it shows at once whether the cell is compile-, host- or compute-bound,
        and what to look at next. With each program's memory_analysis().
        """
        __tracebackhide__ = True
        from jaxmagic.probes._profile import PROFILER_BUSY, trace_running  # deferred: imports JAX (see above)

        args = self._parse(self.jax_profile, line)
        with self._options_checked(self.jax_profile):
            probe = probes.profile(save=args.save, warmup_runs=args.warmup)
        if trace_running():
            raise UsageError(f"%%jax_profile {PROFILER_BUSY}.")
        if shown_if_unrunnable(self._shell, cell):
            return None
        for run in range(1, args.warmup + 1):
            with capture_output():
                outcome = run_cell_body(self._shell, cell)
            if outcome.exception is not None:
                self._publish(probes.ProfileReport.warmup_failed(run, args.warmup, outcome.exception), args)
                outcome.reraise()
        self._run_cell_in_probe(self.jax_profile, probe, args, cell)
        return None

    @magic_arguments()
    @argument(
        "--top",
        type=bounded_int(1),
        default=10,
        metavar="N",
        help="Show the N largest groups (default 10; the report keeps all).",
    )
    @argument(
        "--profile",
        type=profile_path,
        metavar="PATH",
        help="Also save jax.profiler.save_device_memory_profile(PATH) "
        "(pprof format; open with pprof -http=:8080 PATH).",
    )
    @argument(
        "--explore",
        action="store_true",
        help="Also show an explorer (ipywidgets) after the report: the groups sorted by bytes, count, shape "
        "or dtype and filtered by shape, dtype or holder; a group chosen lists its holders and the line "
        "that made them. A saved notebook shows a line saying to run the cell instead.",
    )
    @output_option
    @line_cell_magic
    def jax_live(self, line: str, cell: str | None = None) -> None:
        """Live JAX arrays grouped by shape, dtype and placement, and the names that hold them.

        %jax_live lists every live array (jax.live_arrays()) in groups with
        count and bytes, and names their holders: your variables and what
        they contain a few levels deep (hist['acts'][3], trainer.history[0]),
        IPython's output cache (Out[12], _), the last error's traceback, and
        the jit cache, which keeps arrays a jitted function read from globals
        (jax.clear_caches() frees them). Device memory_stats() where the
        backend has them. %%jax_live runs the cell and reports the arrays it
        created that are still alive afterwards (its own result aside), with
        their holders. Keeps no array alive itself. --explore adds an
        explorer of the groups after the report.
        """

        __tracebackhide__ = True
        args = self._parse(self.jax_live, line)
        options = dict(namespace=self.user_ns, top=args.top, profile=args.profile)
        explorer = self._live_explorer if args.explore else None
        if cell is None:
            self._publish(probes.live(**options), args, explorer=explorer)
            return None
        self._run_cell_in_probe(self.jax_live, probes.live_diff(**options), args, cell, explorer=explorer)
        return None

    def _live_explorer(self, report: Report) -> None:
        # deferred: ipywidgets is imported only when an explorer is asked for
        from jaxmagic.ipython.explorers.live import show_live_explorer

        show_live_explorer(report.to_dict(), in_kernel=self._in_kernel)

    @magic_arguments()
    @argument(
        "--echo",
        action="store_true",
        help="Also print each line as it arrives (by default the lines are shown in the report only).",
    )
    @output_option
    @cell_magic
    def jax_print(self, line: str, cell: str) -> None:
        """Run the cell; show what jax.debug.print / log / callback produced, grouped by call site.

        Every line is kept with the print that made it (format string, your
        line, the transformations around it: vmap prints one line per sample,
        a cond under vmap prints both branches, grad prints forward values)
        and with the call of a jitted function it arrived in. The magic waits
        for each call's prints (jax.effects_barrier), so no line spills into
        a later cell, and warns when unordered prints of one call came out of
        program order (the fix: jax.debug.print(ordered=True)). Your own
        print() output appears as usual.
        """
        __tracebackhide__ = True
        self._run_cell_magic(self.jax_print, line, cell, lambda args: probes.prints(echo=args.echo))

    @magic_arguments()
    @output_option
    @cell_magic
    def jax_keys(self, line: str, cell: str) -> None:
        """Run the cell with jax.debug_key_reuse(True); explain a reused key; count the keys each jitted function got.

        A typed key (jax.random.key) consumed twice stops the cell with JAX's
        KeyReuseError; above it the report names what got the key (e.g.
        random_split), the argument, your line of the second use and of the
        first, and the fix: key, sub = jax.random.split(key) every step.
        Also counts the distinct keys that reached each of your jitted
        functions (the same key every step shows even when nothing raises)
        and lists jax.random calls given a legacy uint32 PRNGKey, which the
        checker cannot follow.
        """
        __tracebackhide__ = True
        self._run_cell_magic(self.jax_keys, line, cell, lambda args: probes.keys())

    @magic_arguments()
    @argument(
        "--skip",
        type=comma_list,
        default=[],
        metavar="PROBES",
        help="Comma-separated probes not to run: nans, compiles, leaks, keys, transfers, live.",
    )
    @output_option
    @cell_magic
    def jax_doctor(self, line: str, cell: str) -> None:
        """Run the cell once under every probe; one dashboard with the findings in the order to fix them.

        NaN (watched, not raised: the first call that made a NaN is re-run
        alone after the cell under jax.debug_nans to name the primitive and
        line), compilations (recompiled functions and why), tracer leaks,
        random keys (reused keys recorded; the same key reaching a jitted
        function every call), implicit transfers (logged) and arrays the cell
        left piling up. Ranked: NaN first, then errors, then speed and memory,
        then silent logic bugs; each finding names the magic that looks closer.
        The cell runs once; a tracer leak still stops it.
        """
        __tracebackhide__ = True
        self._run_cell_magic(
            self.jax_doctor, line, cell, lambda args: probes.doctor(skip=args.skip, namespace=self.user_ns)
        )

    @magic_arguments()
    @argument("error", nargs="?", help="%%jax_debug only: the exception to debug (default: the last one).")
    @argument(
        "--no-stop",
        action="store_true",
        help="Do not open the debugger (or read commands at a breakpoint): only the report. "
        "Where no input can be read (nbclient) this is what happens anyway.",
    )
    @argument(
        "--eager",
        action="store_true",
        help="%%jax_debug only: run loops and vmaps op by op in full, not compiled up to the failing step.",
    )
    @argument(
        "--ns",
        type=variable_name,
        metavar="NAME",
        help="%%jax_debug only: bind the stopped frame's values (NumPy copies) as a namespace under NAME.",
    )
    @output_option
    @line_cell_magic
    def jax_debug(self, line: str, cell: str | None = None) -> None:
        """Stop at your failing line of jitted code, with its values: %jax_debug after an error, %%jax_debug for breakpoints.

        %jax_debug after a cell failed in JAX code (a NaN under jax.debug_nans or
        %%jax_nans, a checkify error, an error raised in a jax.debug.callback, an
        index or shape error) re-runs only the failing call, op by op, so it stops
        at your line with concrete values. A lax.scan / fori_loop runs compiled up
        to the first iteration whose carry or outputs are not finite and only that
        iteration runs op by op; under jax.vmap only the failing batch element
        runs, unbatched. Then IPython's debugger opens in your frame (u and d move
        through your frames only; p, pp, l, c, q and Python statements work),
        after the report naming the line, the iteration and the batch element.
        Without input (nbclient, --no-stop) the report shows every value of that
        frame (shape, dtype, min/max/mean, NaN/inf counts, a few values) and your
        frames above it. The re-run runs your Python again, and says so.

        %%jax_debug runs the cell with a jax.debug.breakpoint() that works in a
        notebook: at each hit it reads commands (p, pp, l, u, d, w, c, q and
        Python statements) from the notebook; q ends the cell cleanly. Without
        input each hit is recorded (frame and values) instead.

        -o NAME binds the report; --ns NAME binds the stopped frame's values.
        """
        __tracebackhide__ = True
        args = self._parse(self.jax_debug, line)
        interactive = not args.no_stop and debugger.stdin_available(self.shell)
        if cell is not None:
            if args.error or args.ns or args.eager:
                raise UsageError(
                    "%%jax_debug takes only --no-stop and -o; the error, --ns and --eager are %jax_debug's."
                )
            probe = probes.breakpoints(
                ask=debugger.reader() if interactive else None, namespace=self.user_ns, say=debugger.writer()
            )
            try:
                self._run_cell_in_probe(self.jax_debug, probe, args, cell)
            except Exception as error:
                if not probes.ended_by_quit(error):
                    raise
            return None
        failure = self._given_or_last_error(
            args.error or "",
            "jax_debug",
            "an exception",
            "There is no failed cell to debug; run the failing cell first, or pass an exception.",
        )
        session = probes.debug_after(failure, eager=args.eager)
        del failure
        try:
            if args.ns:
                self.user_ns[args.ns] = session.namespace()
            stops = interactive and session.traceback is not None
            session.report.interactive = stops
            self._publish(session.report, args)
            if stops:
                assert session.traceback is not None
                position = session.report.position
                debugger.post_mortem(
                    session.traceback, "jaxmagic: in your frame" + (f", {position}" if position else "")
                )
        finally:
            session.release()
        return None

    @magic_arguments()
    @argument(
        "call",
        nargs="*",
        help="CALL (the line form): the jitted call to measure, e.g. step(params, batch); arguments may be "
        "jax.ShapeDtypeStruct. The cell form (%%%%jax_memory) takes none: it measures the cell's calls.",
    )
    @argument(
        "--no-trials",
        dest="trials",
        action="store_false",
        help="Measure only: do not compile the ways down (donation, jax.checkpoint, the batch gradient, a "
        "smaller input; each is one more compilation, some trace your function again).",
    )
    @output_option
    @line_cell_magic
    def jax_memory(self, line: str, cell: str | None = None) -> None:
        """What fills a jitted program's peak memory, by your line, and ways down tried by compiling.

        %%jax_memory runs the cell as it is and measures every jitted program
        it ran; %jax_memory CALL measures one call without running it (its
        arguments may be jax.ShapeDtypeStruct: nothing is allocated). Each
        program is compiled once more with XLA's dumps on: the peak (the
        buffers live at one time, from XLA's live ranges), the largest buffers
        with their shape, the operation and your line that made them, and
        whether each is an argument, an output, a temporary or an activation
        saved for the backward pass; what the device can give
        (device.memory_stats(), or the host's available memory on CPU); the
        arrays already holding memory, with their holders. Ways down are
        compiled, never run, and shown with their new peak: donate_argnums,
        jax.checkpoint around the function whose activations fill the peak,
        the gradient of the mean instead of per-example gradients, and the
        largest input that fits. A cell that runs out of memory is explained
        (the explainer does this for any cell), and its error raised after.
        """
        __tracebackhide__ = True
        if cell is not None:

            def build(args: argparse.Namespace) -> AbstractContextManager[Report]:
                if args.call:
                    raise UsageError("%%jax_memory measures the cell's calls: give it no call (%jax_memory CALL does).")
                return probes.memory(namespace=self.user_ns, try_ways=args.trials)

            self._run_cell_magic(self.jax_memory, line, cell, build)
            return None

        def run(call: EvaluatedCall, args: argparse.Namespace) -> tuple[Report, BaseException | None]:
            # the call's own exception (raised while traced) comes after the report, as %jax_hlo's does
            return probes.run_memory_call(call.function, call.args, call.kwargs, call=call.text, try_ways=args.trials)

        self._run_call_magic(
            self.jax_memory,
            line,
            needs="a call, e.g. %jax_memory step(params, batch), or a cell: %%jax_memory",
            run=run,
        )
        return None
