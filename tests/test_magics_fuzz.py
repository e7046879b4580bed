"""Fuzzed magic lines for every registered magic: success, a UsageError, or the user's own error - nothing else.

Hypothesis builds a magic line from the magic's real options (with odd values:
huge and negative numbers, quotes left open, unicode, expressions), random
words, and - for the line magics that take a call - a call expression from a
small grammar; cell magics get a cell body. Each outcome must be one of:

* success;
* a ``UsageError`` (one line, under 300 characters);
* the error the magic raises by design (``%%jax_nans``' FloatingPointError, an
  exceeded ``--budget``, ...), or the user's own exception: the type the same call or body raises when run
  without the magic (for a call, plainly or under ``jax.jit``, which the
  magics apply), shown with no frame of jaxmagic.

and the JAX state (config, ``jax`` loggers, monitoring listeners) must be as
before. Bounded in examples, never by time (no deadline), and derandomized so
the suite is reproducible; the counts of each outcome are printed.
"""

from __future__ import annotations

import collections
import traceback

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from IPython.core.error import UsageError

from jaxmagic._jax.restore import take_snapshot
from jaxmagic.ipython.magics import JaxMagics

EXAMPLES = 400  # ~30 s on a shared 2-core machine

SETUP = """
import jax, jax.numpy as jnp, numpy as np
class UserBoom(Exception):
    pass
class BrokenStrBoom(Exception):
    def __str__(self):
        raise RuntimeError('broken __str__')
fz_x = jnp.arange(4.0)
fz_m = jnp.ones((2, 3))
fz_kw = {'v': jnp.ones(2)}
fz_n = 3
def fz_ok(v):
    return jnp.sin(v) * 2
def fz_two(a, b=1.0):
    return a + b
def fz_boom(v):
    raise UserBoom('boom')
def fz_broken(v):
    raise BrokenStrBoom()
fz_jit = jax.jit(fz_ok)
from jaxmagic._jax.jittable import jit as fz_safe_jit  # jax.jit(np.sum) twice would crash the process
"""

# The errors a magic raises on purpose, by design (its documented way to stop the cell).
DESIGNED_ERRORS = {
    "jax_nans": ("FloatingPointError",),
    "jax_compiles": ("CompileBudgetExceeded",),
    "jax_transfers": ("JaxRuntimeError", "XlaRuntimeError"),
    "jax_keys": ("KeyReuseError",),
}
LINE_CALL_MAGICS = {"jax_check", "jax_stages", "jax_hlo", "jax_bisect", "jax_sharding"}
CELL_ONLY = sorted(set(JaxMagics.magics["cell"]) - set(JaxMagics.magics["line"]))
LINE = sorted(JaxMagics.magics["line"])

values = st.sampled_from(
    [
        "0",
        "1",
        "2",
        "-1",
        "10**30",
        "99999999999999999999",
        "1e3",
        "nan",
        "inf",
        "abc",
        "'",
        '"',
        "'quoted words'",
        "\\",
        "é∂",
        "0,None",
        "0,2",
        "B=1,2",
        "B=x",
        "nan,div",
        "bogus",
        "leaks,live",
        "fz_x",
        "fz_n",
        "(",
        "--",
        "-",
        "x" * 400,
    ]
)
atoms = st.sampled_from(
    [
        "fz_x",
        "fz_m",
        "1",
        "2.5",
        "'s'",
        "fz_n",
        "None",
        "*fz_n",
        "**fz_kw",
        "**fz_n",
        "*fz_x",
        "fz_x[0]",
        "undefined_name",
    ]
)
callees = st.sampled_from(["fz_ok", "fz_two", "fz_boom", "fz_broken", "fz_jit", "np.sum", "jnp.sin", "fz_n", "nope"])
bodies = st.sampled_from(
    [
        "fz_y = fz_ok(fz_x)",
        "raise UserBoom('in the cell')",
        "fz_boom(fz_x)",
        "fz_broken(fz_x)",
        "1/0",
        "return 1",
        "x = (1,",
        "jax.jit(fz_ok)(fz_m).block_until_ready()",
        "jnp.log(-fz_x)",
    ]
)


@st.composite
def call_expressions(draw) -> tuple[str, ...]:
    """The call text, and the code whose exceptions count as the user's own: the call, and under jit."""
    callee = draw(callees)
    arguments = ", ".join(draw(st.lists(atoms, max_size=3)))
    mangle = draw(st.sampled_from(["", "", "", "drop_paren", "plus", "nest"]))
    if mangle == "nest":
        arguments = "(" * 200 + "fz_x" + ")" * 200
    text = f"{callee}({arguments})"
    if mangle == "drop_paren":
        return (text[:-1],)
    if mangle == "plus":
        return (f"{text} + 1",)
    return text, f"fz_safe_jit({callee})({arguments})"


def _option_words(draw, magic: str) -> list[str]:
    parser = getattr(JaxMagics, magic).parser
    flags = [flag for action in parser._actions for flag in action.option_strings if flag not in ("-h", "--help")]
    words = []
    for _ in range(draw(st.sampled_from([0, 0, 0, 1, 1, 2, 3]))):  # mostly a plain line: junk options end early
        kind = draw(st.sampled_from(["flag", "flag", "value", "junk"]))
        if kind == "flag" and flags:
            flag = draw(st.sampled_from(flags))
            words.append(flag)
            if flag in ("-o", "--output"):
                words.append(draw(st.sampled_from(["fz_rep", "1bad", "'a b'"])))
            elif draw(st.booleans()):
                words.append(draw(values))
        elif kind == "value":
            words.append(draw(values))
        else:
            words.append(draw(st.sampled_from(["--bogus", "-z", "'unclosed", 'a"b', "-o"])))
    return words


@st.composite
def magic_cells(draw) -> tuple[str, str, tuple[str, ...]]:
    """(magic, the cell to run, the code the user's own error would come from without the magic)."""
    if draw(st.booleans()):
        magic = draw(st.sampled_from(LINE))
        words = _option_words(draw, magic)
        plain = ()
        if magic in LINE_CALL_MAGICS:
            plain = draw(call_expressions())
            position = draw(st.integers(0, len(words)))
            words.insert(position if not words or words[position - 1 : position] != ["-o"] else 0, plain[0])
        elif magic in ("jax_devices", "jax_explain") and draw(st.booleans()):
            words.insert(0, draw(st.sampled_from(["fz_n", "2", "undefined_name", "fz_x", "(", "fz_boom(1)"])))
        return magic, f"%{magic} {' '.join(words)}", plain
    magic = draw(st.sampled_from(CELL_ONLY + ["jax_live"]))
    body = draw(bodies)
    return magic, f"%%{magic} {' '.join(_option_words(draw, magic))}\n{body}", (body,)


def _visible_jaxmagic_frames(error: BaseException) -> list[str]:
    found, pending, seen = [], [error], set()
    while pending:
        current = pending.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        for frame, _ in traceback.walk_tb(current.__traceback__):
            if "jaxmagic" in frame.f_code.co_filename and not frame.f_locals.get("__tracebackhide__"):
                found.append(f"{frame.f_code.co_filename}:{frame.f_code.co_name}")
        pending += [current.__cause__, None if current.__suppress_context__ else current.__context__]
    return found


def _plain_errors(shell, codes: tuple[str, ...]) -> tuple[type, ...]:
    """The types of exception each of ``codes`` raises run as a plain cell."""
    found = []
    for code in codes:
        result = shell.run_cell(code, silent=True)
        error = result.error_before_exec or result.error_in_exec
        if error is not None:
            found.append(type(error))
    return tuple(found)


@pytest.fixture(scope="module")
def shell(ip):
    ip.run_cell(SETUP)
    return ip


def test_fuzzed_magic_lines_succeed_or_fail_cleanly(shell, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # --profile and friends may write files: here, not in the repository
    counts: collections.Counter = collections.Counter()
    per_magic: collections.Counter = collections.Counter()

    @settings(
        max_examples=EXAMPLES,
        deadline=None,
        derandomize=True,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
    )
    @given(magic_cells())
    def check(case):
        magic, cell, plain = case
        per_magic[magic] += 1
        before = take_snapshot()
        result = shell.run_cell(cell, silent=True)
        after = take_snapshot()
        differences = before.differences(after)
        if magic == "jax_traceback":  # %jax_traceback MODE switches the filtering mode on purpose
            differences = [d for d in differences if "jax_traceback_filtering" not in d]
            shell.run_cell("jax.config.update('jax_traceback_filtering', 'auto')", silent=True)
        assert differences == [], (cell, differences)
        error = result.error_before_exec or result.error_in_exec
        if error is None:
            counts["success"] += 1
            return
        if isinstance(error, UsageError):
            message = str(error)
            assert "\n" not in message.strip() and len(message) < 300, (cell, message)
            counts["UsageError"] += 1
            return
        if type(error).__name__ in DESIGNED_ERRORS.get(magic, ()):
            assert _visible_jaxmagic_frames(error) == [], (cell, _visible_jaxmagic_frames(error))
            counts[f"designed {type(error).__name__}"] += 1
            return
        own = _plain_errors(shell, plain)
        assert isinstance(error, own), (cell, f"{type(error).__name__}: {error!r}", own)
        assert _visible_jaxmagic_frames(error) == [], (cell, _visible_jaxmagic_frames(error))
        counts[f"user's {type(error).__name__}"] += 1

    check()
    capsys.readouterr()  # the reports and tracebacks of the examples
    with capsys.disabled():
        print(f"\nfuzz: {sum(counts.values())} magic lines over {len(per_magic)} magics: {dict(counts)}")
    assert set(per_magic) == set(JaxMagics.magics["line"]) | set(JaxMagics.magics["cell"])
