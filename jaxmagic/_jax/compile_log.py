"""Reading JAX's compile log and cache-miss explanations: all the text parsing in one place.

With ``jax_log_compiles`` on, every backend compilation logs four WARNING lines
(JAX 0.12)::

    Finished tracing f for jit in 0.0025 sec
    Compiling jit(f) with global shapes and types (ShapedArray(float32[3]), ...). Argument mapping: ...
    Finished jaxpr to MLIR module conversion jit(f) in 0.0015 sec
    Finished XLA compilation of jit(f) in 0.030 sec

and with ``jax_explain_cache_misses`` on, a tracing cache miss logs::

    TRACING CACHE MISS at <file>:22:4 (<module>):
      for f defined at <file>:16
      all previously seen cache keys differ. For the closest previous key:
      different input types:
      * at w, now i32[3] and before f32[3]

This module turns such text into small data (no JAX import, no computation),
so the probe never parses text itself and the formats are tested here.
"""

from __future__ import annotations

import dataclasses
import re

from jaxmagic.report.wording import short_dtype

# -- the persistent compilation cache's lines (WARNING while jax_explain_cache_misses / jax_log_compiles
# are on and jax_compilation_cache_dir is set; JAX 0.12's compiler.py and compilation_cache.py)

PERSISTENT_CACHE_PREFIXES = (
    "PERSISTENT COMPILATION CACHE MISS for ",
    "Persistent compilation cache hit for ",
    "Not writing persistent cache entry",
    "Writing ",  # "Writing jit_f to persistent compilation cache with key ..." (checked in full below)
)
_CACHE_MISS = re.compile(r"^PERSISTENT COMPILATION CACHE MISS for '(?P<module>[^']*)' with key '(?P<key>[^']*)'")
_CACHE_HIT = re.compile(r"^Persistent compilation cache hit for '(?P<module>[^']*)' with key '(?P<key>[^']*)'")
_CACHE_TOO_FAST = re.compile(
    r"^Not writing persistent cache entry for '(?P<module>[^']*)' because it took < (?P<limit>[\d.]+) "
    r"seconds to compile \((?P<secs>[\d.]+)s\)"
)
_CACHE_TOO_SMALL = re.compile(
    r"^Not writing persistent cache entry with key '(?P<key>[^']*)' since its size \((?P<size>\d+) bytes\) "
    r"is less than threshold \((?P<limit>\d+) bytes\)"
)
_CACHE_DISABLED = re.compile(r"^Not writing persistent cache entry with key '(?P<key>[^']*)' since cache is disabled")
_CACHE_OTHER_PROCESS = re.compile(r"^Not writing persistent cache entry since process_id != 0")
_CACHE_WRITE = re.compile(r"^Writing (?P<module>\S+) to persistent compilation cache with key '(?P<key>[^']*)'")


@dataclasses.dataclass
class PersistentCacheLine:
    """One persistent-cache log line, read. ``event``: "miss", "hit", "too_fast", "too_small", "disabled",
    "other_process" (only process 0 writes) or "written"."""

    event: str
    module: str = ""  # "jit_step" (from the key when the line names only the key)
    key: str = ""
    seconds: float | None = None  # too_fast: how long the compilation took
    limit: float | None = None  # too_fast: seconds; too_small: bytes
    size: int | None = None  # too_small: the entry's bytes


def parse_persistent_cache_line(message: str) -> PersistentCacheLine | None:
    """Read a persistent compilation cache log line; None for any other message."""
    if match := _CACHE_MISS.match(message):
        return PersistentCacheLine("miss", match["module"], match["key"])
    if match := _CACHE_HIT.match(message):
        return PersistentCacheLine("hit", match["module"], match["key"])
    if match := _CACHE_TOO_FAST.match(message):
        return PersistentCacheLine(
            "too_fast", match["module"], seconds=float(match["secs"]), limit=float(match["limit"])
        )
    if match := _CACHE_TOO_SMALL.match(message):
        key = match["key"]
        return PersistentCacheLine(
            "too_small", _module_of_key(key), key, limit=float(match["limit"]), size=int(match["size"])
        )
    if match := _CACHE_DISABLED.match(message):
        return PersistentCacheLine("disabled", _module_of_key(match["key"]), match["key"])
    if _CACHE_OTHER_PROCESS.match(message):
        return PersistentCacheLine("other_process")
    if match := _CACHE_WRITE.match(message):
        return PersistentCacheLine("written", match["module"], match["key"])
    return None


def _module_of_key(key: str) -> str:
    """A cache key is "<module name>-<hash>"."""
    return key.rpartition("-")[0] or key


# -- the four compile log lines -------------------------------------------------

_TRACING = re.compile(r"^Finished tracing (?P<name>.+?) for (?P<wrapper>\w+) in (?P<secs>[\d.eE+-]+) sec")
_COMPILING = re.compile(
    r"^Compiling (?P<function>\w+\(.*?\)) with global shapes and types (?P<types>.*?)\. Argument mapping"
)
_LOWERING = re.compile(
    r"^Finished jaxpr to MLIR module conversion (?P<function>\w+\(.*?\)) in (?P<secs>[\d.eE+-]+) sec"
)
_XLA = re.compile(r"^Finished XLA compilation of (?P<function>\w+\(.*?\)) in (?P<secs>[\d.eE+-]+) sec")
_MISS = re.compile(r"^TRACING CACHE MISS at ")

COMPILE_LOG_PREFIXES = (
    "Finished tracing ",
    "Compiling ",
    "Finished jaxpr to MLIR module conversion ",
    "Finished XLA compilation of ",
    "TRACING CACHE MISS at ",
) + PERSISTENT_CACHE_PREFIXES


def is_compile_log_message(message: str) -> bool:
    """True for the lines ``jax_log_compiles`` / ``jax_explain_cache_misses`` produce."""
    if not message.startswith(COMPILE_LOG_PREFIXES):
        return False
    return not message.startswith("Writing ") or _CACHE_WRITE.match(message) is not None


def bare_name(function: str) -> str:
    """``"jit(train_step)"`` -> ``"train_step"``; a name without a wrapper is returned as is."""
    match = re.fullmatch(r"\w+\((.*)\)", function)
    return match.group(1) if match else function


@dataclasses.dataclass
class CompileLogLine:
    """One of the four compile log lines, read. ``name`` is the bare function name."""

    stage: str  # "trace", "compiling", "lower", "xla"
    name: str
    seconds: float | None = None
    types: list[str] = dataclasses.field(default_factory=list)  # "compiling": short types of the kept arguments


def parse_compile_log_line(message: str) -> CompileLogLine | None:
    """Read one of the four compile log lines; None for any other message."""
    if match := _TRACING.match(message):
        return CompileLogLine("trace", match["name"], float(match["secs"]))
    if match := _COMPILING.match(message):
        return CompileLogLine("compiling", bare_name(match["function"]), types=short_types(match["types"]))
    if match := _LOWERING.match(message):
        return CompileLogLine("lower", bare_name(match["function"]), float(match["secs"]))
    if match := _XLA.match(message):
        return CompileLogLine("xla", bare_name(match["function"]), float(match["secs"]))
    return None


# -- types ------------------------------------------------------------------------

_SHAPED = re.compile(r"ShapedArray\((?P<dtype>[\w<>]+)\[(?P<shape>[^\]]*)\](?P<extra>[^()]*(?:\([^()]*\))?[^()]*)\)")


def short_types(text: str) -> list[str]:
    """``(ShapedArray(float32[3]), ShapedArray(int32[], weak_type=True))`` -> ``["f32[3]", "i32[] weak"]``."""
    types = []
    for match in _SHAPED.finditer(text):
        short = f"{short_dtype(match['dtype'])}[{match['shape'].replace(' ', '')}]"
        if "weak_type=True" in match["extra"]:
            short += " weak"
        types.append(short)
    return types


def signature_text(types: list[str], limit: int = 160) -> str:
    """The argument types as one line, cut at ``limit`` characters with the count of what was cut."""
    text = ", ".join(types)
    if len(text) <= limit:
        return text
    cut = text[:limit].rsplit(", ", 1)[0]
    shown = cut.count(", ") + 1
    return f"{cut}, ... ({len(types) - shown} more of {len(types)})"


# -- cache-miss explanations -------------------------------------------------------


@dataclasses.dataclass
class TypeChange:
    """One argument whose type differs from the closest earlier call."""

    argument: str  # JAX's name for the leaf: "w", "params[0]['b']"
    before: str  # "f32[3]", "f32[] weak"
    now: str
    what: str  # "shape", "dtype", "dtype and shape", "weak type", "sharding", "type"

    @property
    def text(self) -> str:
        return f"{self.argument}: {self.before} -> {self.now}"


@dataclasses.dataclass
class CacheMissExplanation:
    """What ``jax_explain_cache_misses`` said about one tracing cache miss."""

    name: str  # bare function name
    defined_at: str  # "file:line" ("" if JAX did not say)
    kind: str  # "never_seen", "types", "pytree", "context", "debug_info", "unavailable", "other"
    details: list[str] = dataclasses.field(default_factory=list)  # the "* ..." lines, without the "* "
    type_changes: list[TypeChange] = dataclasses.field(default_factory=list)
    redefined_hint: bool = False  # JAX saw another function defined on the same line
    text: str = ""  # the explanation without the "TRACING CACHE MISS at ..." line


_WEAK_HINT_URL = re.compile(r"https?://\S+$")
_NEVER_SEEN = re.compile(r"^\s*(?P<name>.+?) id=\d+(?: defined at (?P<at>.+))?$")
_FOR = re.compile(r"^\s*for (?P<name>.+?)(?: defined at (?P<at>.+))?$")
_TYPE_CHANGE = re.compile(r"^at (?P<arg>.+?), now (?P<now>.+) and before (?P<before>.+)$")


def parse_cache_miss(message: str) -> CacheMissExplanation | None:
    """Read a ``TRACING CACHE MISS`` message; None for any other message."""
    if not _MISS.match(message):
        return None
    lines = message.splitlines()[1:]
    body = "\n".join(line.rstrip() for line in lines)
    stripped = [line.strip() for line in lines]
    if stripped and stripped[0] == "never seen function:":
        match = _NEVER_SEEN.match(stripped[1]) if len(stripped) > 1 else None
        return CacheMissExplanation(
            name=match["name"] if match else "",
            defined_at=(match["at"] or "") if match else "",
            kind="never_seen",
            redefined_hint=any("defined on the same line" in s for s in stripped),
            text=body,
        )
    match = _FOR.match(stripped[0]) if stripped else None
    name, at = (match["name"], match["at"] or "") if match else ("", "")
    rest = [s for s in stripped[1:] if not s.startswith("all previously seen cache keys differ")]
    details = [_WEAK_HINT_URL.sub("", s[2:]).strip() for s in rest if s.startswith("* ")]
    first = rest[0] if rest else ""
    if first.startswith("different input types"):
        kind = "types"
    elif first.startswith("different input pytree"):
        kind = "pytree"
    elif first.startswith("Tracing context doesn't match"):
        kind = "context"
    elif first.startswith("Debug info doesn't match"):
        kind = "debug_info"
    elif first.startswith("cache miss explanation unavailable"):
        kind = "unavailable"
    else:
        kind = "other"
    explanation = CacheMissExplanation(name=name, defined_at=at, kind=kind, details=details, text=body)
    if kind == "types":
        explanation.type_changes = [change for d in details if (change := _type_change(d))]
    return explanation


def _type_change(detail: str) -> TypeChange | None:
    match = _TYPE_CHANGE.match(detail)
    if not match:
        return None
    before, now = _explained_type(match["before"]), _explained_type(match["now"])
    return TypeChange(match["arg"], before[0], now[0], _what_changed(before, now))


def _explained_type(text: str) -> tuple[str, str, str, bool, str]:
    """``"f32[]{weak_type=True}"`` -> (display, dtype, shape, weak, sharding)."""
    weak = "{weak_type=True}" in text
    text = re.sub(r"\{weak_type=\w+\}", "", text).strip()
    match = re.match(r"^(?P<dtype>[\w<>]+)\[(?P<shape>[^\]]*)\](?P<rest>.*)$", text)
    if not match:
        return text, text, "", weak, ""
    sharding = match["rest"].strip()
    if sharding in ("({})", "()"):
        sharding = ""
    display = f"{match['dtype']}[{match['shape']}]" + (" weak" if weak else "") + (f" {sharding}" if sharding else "")
    return display, match["dtype"], match["shape"], weak, sharding


def _what_changed(before: tuple[str, str, str, bool, str], now: tuple[str, str, str, bool, str]) -> str:
    _, dtype0, shape0, weak0, sharding0 = before
    _, dtype1, shape1, weak1, sharding1 = now
    if dtype0 != dtype1 and shape0 != shape1:
        return "dtype and shape"
    if dtype0 != dtype1:
        return "dtype"
    if shape0 != shape1:
        return "shape"
    if weak0 != weak1:
        return "weak type"
    if sharding0 != sharding1:
        return "sharding"
    return "type"


_PYTREE_PATH = re.compile(r"^at input path (?P<path>\S+), now (?P<now>.+?) and before (?P<before>.+?), so (?P<why>.+)$")
_KEY_SET = re.compile(r"symmetric difference of key sets: \{(?P<keys>[^}]*)\}")


def argument_passing_changes(details: list[str], parameter_names: list[str]) -> list[tuple[str, str]]:
    """``(argument, how it was given in the other call)`` when only the way arguments were passed differs:
    "positionally" (by keyword in one call), "left to its default" - JAX sees the positional tuple
    (input path [0]) change length and/or the keyword dict (input path [1]) gain or lose keys. [] else."""
    paths = {m["path"]: m for d in details if (m := _PYTREE_PATH.match(d))}
    if not paths or set(paths) - {"[0]", "[1]"}:
        return []
    lengths = []
    if "[0]" in paths:
        lengths = [int(n) for n in re.findall(r"tuple of length (\d+)", paths["[0]"]["now"] + paths["[0]"]["before"])]
        if len(lengths) != 2:
            return []
    if "[1]" in paths:
        found = _KEY_SET.search(paths["[1]"]["why"])
        if not found:
            return []
        keys = re.findall(r"'([^']+)'", found["keys"])
        return [(key, "positionally" if lengths else "left to its default") for key in keys]
    # Only the positional tuple: the arguments past the shorter one were left to their defaults.
    return [
        (parameter_names[index] if index < len(parameter_names) else f"#{index}", "left to its default")
        for index in range(min(lengths), max(lengths))
    ]


def pytree_changes(details: list[str], parameter_names: list[str]) -> list[str]:
    """JAX's pytree differences with input paths named after the arguments.

    ``at input path [0][1], now <class 'list'> and before <class 'dict'>, so their Python types differ``
    becomes ``argument `x` (input path [0][1]): now list, before dict - their Python types differ``.
    """
    out = []
    for detail in details:
        match = _PYTREE_PATH.match(detail)
        if not match:
            out.append(detail)
            continue
        where = _argument_of_path(match["path"], parameter_names)
        now, before = _class_names(match["now"]), _class_names(match["before"])
        out.append(f"{where}: now {now}, before {before} - {match['why']}")
    return out


def _argument_of_path(path: str, parameter_names: list[str]) -> str:
    positional = re.match(r"^\[0\]\[(\d+)\](.*)$", path)
    if positional:
        index, rest = int(positional.group(1)), positional.group(2)
        name = parameter_names[index] if index < len(parameter_names) else f"#{index}"
        return f"argument `{name}{rest}`"
    keyword = re.match(r"^\[1\]\['([^']+)'\](.*)$", path)
    if keyword:
        return f"argument `{keyword.group(1)}{keyword.group(2)}`"
    if path == "[0]":
        return "the positional arguments"
    if path == "[1]":
        return "the keyword arguments"
    return f"input path {path}"


def _class_names(text: str) -> str:
    return re.sub(r"<class '(?:[\w.]+\.)?(\w+)'>", r"\1", text)


_CONTEXT_DIFFERENCE = re.compile(
    r"^(?P<name>\S+|number of tracing context values) differs: now (?P<now>.*) and before (?P<before>.*)$"
)


@dataclasses.dataclass
class ContextDifference:
    """One trace-context value that differs from the closest earlier call: ``jax_debug_key_reuse``, ``user_context``."""

    name: str
    now: str
    before: str
    detail: str  # JAX's own line

    @property
    def text(self) -> str:
        return f"{self.name}: now {self.now} and before {self.before}"


def context_differences(details: list[str]) -> list[ContextDifference]:
    """The ``* <name> differs: now <a> and before <b>`` lines of a context explanation, read."""
    out = []
    for detail in details:
        match = _CONTEXT_DIFFERENCE.match(detail)
        if match:
            out.append(ContextDifference(match["name"], match["now"], match["before"], detail))
    return out
