"""Every kind of recompilation cause is whole: declared once (``compiles/cause.py``) with its title, its
general fix and its place in the priority order, and every cause the probe makes is one of them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from jaxmagic.probes._compiles import cause, causes, model

COMPILES = Path(__file__).resolve().parents[1] / "jaxmagic" / "probes" / "_compiles"
NOTHING_TO_FIX = {"first"}  # a first compilation is no problem: the one kind without a fix


def _strings_in_source() -> tuple[set[str], set[str]]:
    """(the kinds the probe's code makes - ``Cause("static", ...)`` -, every string constant of compiles/
    outside cause.py, where the kinds are declared)."""
    made, strings = set(), set()
    for path in COMPILES.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "Cause" and node.args:
                first = node.args[0]
                if isinstance(first, ast.Constant) and isinstance(first.value, str):
                    made.add(first.value)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and path.name != "cause.py":
                strings.add(node.value)
    return made, strings


def test_every_kind_has_its_words_and_a_place_in_the_order():
    keys = [kind.key for kind in cause.CAUSE_KINDS]
    assert len(keys) == len(set(keys)), "a kind is declared twice"
    for kind in cause.CAUSE_KINDS:
        assert kind.title and kind.title == kind.title.strip() and not kind.title.endswith(".")
        assert bool(kind.fix) == (kind.key not in NOTHING_TO_FIX), kind.key
        assert not kind.fix or kind.fix.endswith("."), kind.key
    assert [cause.cause_priority(key) for key in keys] == list(range(len(keys)))
    assert set(cause.CAUSE_TITLES) == set(keys) and set(cause.FIXES) == set(keys) - NOTHING_TO_FIX


def test_an_undeclared_kind_cannot_be_made_nor_ranked():
    with pytest.raises(ValueError, match="no kind of cause"):
        cause.Cause("statik", "a typo")
    with pytest.raises(KeyError):
        cause.cause_priority("statik")


def test_every_kind_the_probe_makes_is_declared_and_every_declared_kind_is_used():
    made, strings = _strings_in_source()
    assert made <= set(cause.KINDS), made - set(cause.KINDS)
    # a declared kind no code names (leaf_causes picks its kind from constants) is a half-removed one
    assert set(cause.KINDS) <= strings, set(cause.KINDS) - strings


def test_the_steps_are_named_functions_tried_in_order():
    assert [step.__name__ for step in causes.STEPS] == [
        "jaxmagic_setting",
        "users_leaves",
        "jax_explanation",
        "function_object_rebuilt",
        "first_trace",
        "cached_trace",
    ]
    for step in causes.STEPS:
        assert step.__doc__, f"{step.__name__} says what it finds"


def test_equally_frequent_causes_are_named_in_priority_order():
    f = model.FunctionCompiles("f", "user", causes={"first": 1, "types": 2, "pytree_identity": 2, "static": 2})
    assert f.causes_again == ["static", "pytree_identity", "types"]
    assert f.main_cause == "static"
