"""``%jax_debug`` and ``%%jax_debug`` in a real kernel, answering its input requests as JupyterLab does.

jdb (``jax.debug.breakpoint``) reads ``sys.stdin`` and is dead in a notebook (jax#11880,
jax#16187 in Colab); it cannot run statements (jax#18059) and is hard to use under vmap
(jax#22693). Here the kernel asks the front end through the stdin channel
(``input_request``), and this test answers ``p y``, ``u``, ``c`` as a person would.
"""

from __future__ import annotations

import queue
import re
import time

import pytest
from jupyter_client.manager import start_new_kernel

ANSI = re.compile(r"\x1b\[[0-9;]*m")

SETUP = """
%load_ext jaxmagic
import jax, jax.numpy as jnp
from jax import lax
"""

# The shape of a training loop whose step 900 of 1,000 makes a NaN (a scan body, as in jax#1393-style reports).
SCAN_NAN = """
def body(c, x):
    y = jnp.log(c - x)
    return c + 0.001, y

@jax.jit
def run(c0, xs):
    return lax.scan(body, c0, xs)

xs = jnp.concatenate([jnp.zeros(900), jnp.full(100, 5.0)])
c0 = jnp.array(1.0)
with jax.debug_nans(True):
    run(c0, xs)
"""

BREAKPOINT_CELL = """%%jax_debug -o bp_rep
def scale(x):
    y = jnp.sin(x) * 2.0
    jax.debug.breakpoint()
    return y

def outer(x):
    return scale(x) + 1.0

jax.jit(outer)(jnp.arange(3.0))
"""


MANAGERS: dict = {}  # client -> its kernel manager (an interrupt is sent through the manager)


@pytest.fixture(scope="module")
def kernel():
    manager, client = start_new_kernel(kernel_name="python3", extra_arguments=[], startup_timeout=60)
    MANAGERS[client] = manager
    try:
        converse(client, SETUP, [])
        yield client
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def converse(client, code: str, answers: list[str], timeout: float = 180) -> tuple[str, list[str], str]:
    """Execute ``code`` with stdin allowed, answering each input request with the next of ``answers`` (then
    ``c``); the text the cell printed, the prompts it showed, and the reply's status."""
    msg_id = client.execute(code, allow_stdin=True)
    answers = list(answers)
    text, prompts = [], []
    idle = False
    status = ""
    while not (idle and status):
        try:
            request = client.get_stdin_msg(timeout=0.05)
        except queue.Empty:
            pass
        else:
            prompts.append(request["content"]["prompt"])
            client.input(answers.pop(0) if answers else "c")
        try:
            msg = client.get_iopub_msg(timeout=0.05)
        except queue.Empty:
            msg = None
        if msg is not None and msg["parent_header"].get("msg_id") == msg_id:
            content = msg["content"]
            if msg["msg_type"] == "stream":
                text.append(content["text"])
            elif msg["msg_type"] in ("display_data", "execute_result"):
                text.append(content["data"].get("text/plain", ""))
            elif msg["msg_type"] == "error":
                text.append("\n".join(content["traceback"]))
            elif msg["msg_type"] == "status" and content["execution_state"] == "idle":
                idle = True
        if idle and not status:
            try:
                reply = client.get_shell_msg(timeout=timeout)
            except queue.Empty:
                break
            if reply["parent_header"].get("msg_id") == msg_id:
                status = reply["content"]["status"]
    return ANSI.sub("", "".join(text)), prompts, status


def test_post_mortem_opens_the_debugger_in_the_scan_body_at_iteration_900_and_evaluates_there(kernel):
    _, _, status = converse(kernel, SCAN_NAN, [])
    assert status == "error"
    text, prompts, status = converse(kernel, "%jax_debug -o rep", ["p c - x", "p x", "u", "p xs.shape", "c"])
    assert status == "ok"
    assert len(prompts) == 5 and all("ipdb" in prompt for prompt in prompts)
    assert "iteration 900 of 1000 (counted from 0; scan)" in text  # said first: the report, then the header
    assert "Array(-3.09" in text  # `p c - x` in the body's frame at iteration 900: concrete values
    assert "Array(5., dtype=float32)" in text
    assert "return lax.scan(body, c0, xs)" in text  # `u` went to the user's caller, not into JAX
    assert "(1000,)" in text
    # frames named as the notebook names them (issue 53), not by the kernel's file for the cell
    assert re.search(r"> In \[\d+\], line 2, in body", text) and "ipykernel_" not in text, text[-2000:]
    report, _, _ = converse(kernel, "print(rep.to_dict()['stopped']['line']['code'], rep.interactive)", [])
    assert "y = jnp.log(c - x) True" in report


def test_breakpoint_reads_commands_from_the_notebook_and_runs_statements(kernel):
    text, prompts, status = converse(kernel, BREAKPOINT_CELL, ["p y", "z = y + 1", "p z.sum()", "u", "p x", "c"])
    assert status == "ok"
    assert len(prompts) == 6
    assert "Array([0.       , 1.6829419, 1.8185948], dtype=float32)" in text  # p y: concrete under jit
    assert "Array(6.50" in text  # a statement ran (jax#18059), then its name was evaluated
    assert "Array([0., 1., 2.], dtype=float32)" in text  # p x in the caller
    assert "return scale(x) + 1.0" in text  # u: the caller's line
    summary, _, _ = converse(kernel, "print(bp_rep.hit_count, bp_rep.hits[0].commands, bp_rep.interactive)", [])
    assert "1 ['p y', 'z = y + 1', 'p z.sum()', 'u', 'p x', 'c'] True" in summary


def test_quit_at_a_breakpoint_ends_the_cell_cleanly_and_removes_the_backend(kernel):
    text, prompts, status = converse(kernel, BREAKPOINT_CELL, ["q"])
    assert status == "ok" and len(prompts) == 1
    assert "Traceback" not in text  # JAX logs a failed callback with its traceback: not a quit on purpose
    check, _, _ = converse(
        kernel,
        "from jax._src.debugger import core\nprint(sorted(core._debugger_registry), bp_rep.quit, bp_rep.error)",
        [],
    )
    assert "jaxmagic" not in check and "True" in check


def test_end_of_input_at_a_breakpoint_prompt_ends_the_cell_as_q_does(kernel):
    # Ctrl-D in a console front end answers the input request with "\x04", which ipykernel's input() raises
    # as EOFError; it reached JAX's callback and came out as "JaxRuntimeError: INTERNAL: CpuCallback error",
    # with JAX's "jax.debug.callback failed" log before it
    text, prompts, status = converse(kernel, BREAKPOINT_CELL, ["p y", "\x04"])
    assert status == "ok" and len(prompts) == 2
    assert "CpuCallback" not in text and "callback failed" not in text and "Traceback" not in text
    assert "quit there (the input ended), which ended the cell" in text
    check, _, _ = converse(kernel, "print(bp_rep.quit, bp_rep.interrupted, bp_rep.hits[0].commands)", [])
    assert "True False ['p y', '<end of input>']" in check


def test_an_interrupt_at_a_breakpoint_prompt_is_a_keyboard_interrupt(kernel):
    # the kernel's interrupt button while the prompt waits: ipykernel raises KeyboardInterrupt from input()
    msg_id = kernel.execute(BREAKPOINT_CELL, allow_stdin=True)
    kernel.get_stdin_msg(timeout=180)
    MANAGERS[kernel].interrupt_kernel()
    errors, shown, tracebacks = [], [], []
    while True:
        msg = kernel.get_iopub_msg(timeout=120)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        content = msg["content"]
        if msg["msg_type"] == "error":
            errors.append(f"{content['ename']}: {content['evalue']}")
            tracebacks.append(ANSI.sub("", "\n".join(content["traceback"])))
        elif msg["msg_type"] == "stream":
            shown.append(content["text"])
        elif msg["msg_type"] in ("display_data", "execute_result", "update_display_data"):  # the report replaces
            # the live view
            shown.append(content["data"].get("text/plain", ""))
        elif msg["msg_type"] == "status" and content["execution_state"] == "idle":
            break
    text = ANSI.sub("", "".join(shown))
    assert errors == ["KeyboardInterrupt: Interrupted by user at a jax.debug.breakpoint() prompt"]
    # Issue 61: the traceback showed jaxmagic's own frame (user_traceback.py, raise_users_error); it ends in the
    # cell's line that was running
    assert "user_traceback" not in tracebacks[0] and "raise_users_error" not in tracebacks[0], tracebacks[0]
    assert "jaxmagic" not in tracebacks[0].replace("%%jax_debug", "") and "jax.jit(outer)" in tracebacks[0]
    assert "CpuCallback" not in text and "callback failed" not in text
    assert "interrupted at its prompt, which ended the cell (KeyboardInterrupt)" in text  # the report, first
    check, _, _ = converse(
        kernel, "from jax._src.debugger import core\nprint(sorted(core._debugger_registry), bp_rep.interrupted)", []
    )
    assert "jaxmagic" not in check and "True" in check


def _reply_to(kernel, msg_id: str) -> dict:
    while True:
        reply = kernel.get_shell_msg(timeout=120)
        if reply["parent_header"].get("msg_id") == msg_id:
            return reply


def test_an_interrupt_before_the_breakpoint_is_reached_says_so(kernel):
    """Issue 61: interrupted before any breakpoint ran, the report said "The cell raised KeyboardInterrupt: ."."""
    slow = BREAKPOINT_CELL.replace(
        "jax.jit(outer)", "import time\nfor _ in range(600):\n    time.sleep(0.1)\njax.jit(outer)"
    )
    msg_id = kernel.execute(slow, allow_stdin=True)
    time.sleep(3)
    MANAGERS[kernel].interrupt_kernel()
    shown = []
    while True:
        msg = kernel.get_iopub_msg(timeout=120)
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] in ("display_data", "execute_result", "update_display_data"):  # the live view, then
            shown.append(msg["content"]["data"].get("text/plain", ""))  # the report in its place
        elif msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
    _reply_to(kernel, msg_id)  # taken off the shell channel: the next test reads its own reply there
    text = " ".join(ANSI.sub("", shown[-1]).split())
    assert "the cell was interrupted (KeyboardInterrupt) before one ran" in text, text[-1500:]
    assert "KeyboardInterrupt: ." not in text and "raised KeyboardInterrupt" not in text


def test_without_stdin_every_breakpoint_hit_is_recorded_instead_of_hanging(kernel):
    msg_id = kernel.execute(
        BREAKPOINT_CELL.replace("jnp.arange(3.0))", "jnp.arange(3.0))\njax.vmap(scale)(jnp.ones(2))"), allow_stdin=False
    )
    reply = kernel.get_shell_msg(timeout=180)
    assert reply["parent_header"]["msg_id"] == msg_id and reply["content"]["status"] == "ok"
    text, _, _ = converse(
        kernel, "print(bp_rep.hit_count, bp_rep.interactive, bp_rep.hits[1].frame.values[0].shape)", []
    )
    assert "3 False []" in text  # one hit under jit, one per element under vmap (jax#22693's shape)


def test_under_nbclient_the_post_mortem_is_a_report_and_the_values_are_bound():
    # nbclient runs without stdin (input() raises StdinNotImplementedError): %jax_debug must not try to read.
    import nbformat
    from nbclient import NotebookClient

    cells = [
        SETUP,
        "try:\n"
        + "\n".join("    " + line for line in SCAN_NAN.strip().splitlines())
        + "\nexcept FloatingPointError as e:\n"
        "    scan_error = e",
        "%jax_debug scan_error -o rep --ns vals",
        "print(rep.interactive, rep.steps[0].index, float(vals.x), rep.stopped.line.code)",
    ]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source) for source in cells])
    NotebookClient(notebook, timeout=300, kernel_name="python3").execute()
    printed = "".join(output.get("text", "") for output in notebook.cells[-1].outputs)
    assert printed.strip() == "False 900 5.0 y = jnp.log(c - x)"
    report_text = "".join(output.get("data", {}).get("text/plain", "") for output in notebook.cells[2].outputs)
    assert "iteration 900 of 1000 (counted from 0; scan)" in ANSI.sub("", report_text)
