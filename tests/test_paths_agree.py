"""One answer per bug, whichever path tells it: the cell's own magic, ``%%jax_doctor`` and ``%jax_watch``.

Each scenario is a program already used by the suite, in the shape of a public thread, run three times: under
its magic, under the doctor, and in a watched cell (prefixed by a comment line, so that its lines have the
numbers the magic cells' have). What each path says is reduced to the same facts - the area, the operation or
function, the user's line, the library function, the first fix and whether it was tried, the status - and
compared. The definitions are run again before each path (a path must not find the others' compilations in
the cache), so a line is compared by its number, function and code, not by the cell it was defined in.

Where a path says less by design, the test asserts that it says so:

* ``%%jax_keys`` stops at the first consumed key (JAX's KeyReuseError, raised after the report); the doctor
  and the watch record instead, so they count every call.
* the watch does not re-trace to try a recompilation fix (``%%jax_compiles`` and the doctor do): its fix says
  it was not tried.
* the watch does not check tracer leaks (that re-traces every function): its log says so.
* the doctor's and the watch's NaN fix is tried on the re-run call, named as the user's line wrote it, as
  ``%%jax_nans`` names the cell's statement - or ``f(...)`` when the line calls it by another name.

Threads: the log of a negative value (jax-ml/jax#25701), the norm's gradient at 0 (jax-ml/jax#3058,
jax-ml/jax#4177), optax's cross-entropy of -inf logits (google-deepmind/optax#1762), equinox's LayerNorm at
rsqrt (patrick-kidger/equinox#314), why a function compiles again (jax-ml/jax#4274), a key reused
(jax-ml/jax#2009), a jitted function drawing the same numbers at every call (jax-ml/jax#4312), haiku's apply
given the same key (google-deepmind/dm-haiku#585), a tracer appended to a list (jax-ml/jax#5492), a NumPy
batch per step (jax-ml/jax#16905).
"""

from __future__ import annotations

import re

import pytest

# name -> (magic, definitions, the cell, what every path must name)
SCENARIOS = {
    "log_of_negative": (
        "%%jax_nans",
        "@jax.jit\ndef agree_log_step(x):\n    y = jnp.log(x)\n    return y * 2\n",
        "agree_out = agree_log_step(jnp.array([1.0, -1.0]))\n",
        {"area": "NaN", "operation": "log", "code": "y = jnp.log(x)", "library": ""},
    ),
    "norm_gradient_at_zero": (
        "%%jax_nans",
        "def agree_dist(w, x):\n    return jnp.linalg.norm(x - w)\n"
        "@jax.jit\ndef agree_norm_grad(w, x):\n    return jax.grad(agree_dist)(w, x)\n",
        "agree_g = agree_norm_grad(jnp.ones(3), jnp.ones(3))\n",
        {"area": "NaN", "operation": "div", "code": "return jnp.linalg.norm(x - w)", "library": "jnp.linalg.norm"},
    ),
    "optax_masked_cross_entropy": (
        "%%jax_nans",
        "import optax\n"
        "@jax.jit\ndef agree_ce(w, x, labels, valid):\n    logits = x @ w\n"
        "    masked = jnp.where(valid, logits, -jnp.inf)\n"
        "    return optax.softmax_cross_entropy(masked, labels).mean()\n"
        "ce_args = (jnp.ones((4, 3)) * 0.1, jnp.arange(8.0).reshape(2, 4), jax.nn.one_hot(jnp.array([1, 0]), 3),\n"
        "           jnp.array([[True, True, False], [True, True, True]]))\n",
        "agree_l = agree_ce(*ce_args)\n",
        {
            "area": "NaN",
            "operation": "mul",
            "code": "return optax.softmax_cross_entropy(masked, labels).mean()",
            "library": "optax.softmax_cross_entropy",
        },
    ),
    "equinox_layer_norm_eps_0": (
        "%%jax_nans",
        "import equinox as eqx\n"
        "class AgreeBlock(eqx.Module):\n    norm: eqx.nn.LayerNorm\n"
        "    def __call__(self, x):\n        return self.norm(x)\n"
        "eqx_block, eqx_x = AgreeBlock(eqx.nn.LayerNorm(4, eps=0.0)), jnp.ones((3, 4)).at[2].set(0.0)\n"
        "@eqx.filter_jit\ndef agree_eqx_forward(block, x):\n    return jax.vmap(block)(x)\n",
        "eqx_out = agree_eqx_forward(eqx_block, eqx_x)\n",
        {
            "area": "NaN",
            "operation": "rsqrt",
            "code": "return self.norm(x)",
            "library": "equinox.nn.LayerNorm.__call__",
        },
    ),
    "haiku_layer_norm_eps_0": (
        "%%jax_nans",
        "import haiku as hk\n"
        "def agree_hk_net(x):\n    return hk.LayerNorm(axis=-1, create_scale=True, create_offset=True, eps=0.0)(x)\n"
        "hk_f = hk.without_apply_rng(hk.transform(agree_hk_net))\n"
        "hk_x = jnp.ones((3, 4)).at[2].set(0.0)\nhk_params = hk_f.init(jax.random.key(0), hk_x)\n"
        "hk_apply = jax.jit(hk_f.apply)\n",
        "hk_out = hk_apply(hk_params, hk_x)\n",
        {
            "area": "NaN",
            "operation": "rsqrt",
            "code": "return hk.LayerNorm(axis=-1, create_scale=True, create_offset=True, eps=0.0)(x)",
            "library": "haiku.LayerNorm.__call__",
        },
    ),
    "nnx_norm_gradient": (  # the doctor could not trace the nnx.jit function again from outside its call
        "%%jax_nans",
        "from flax import nnx\n"
        "class AgreeNx(nnx.Module):\n    def __init__(self):\n        self.w = nnx.Param(jnp.array([1.0, 2.0]))\n"
        "    def __call__(self, x):\n        return jnp.linalg.norm(x - self.w[...], axis=-1)\n"
        "nx_model, nx_x = AgreeNx(), jnp.array([[1.0, 2.0], [0.0, 1.0]])\n"
        "@nnx.jit\ndef agree_nx_grad(model, x):\n    grads = nnx.grad(lambda m: m(x).mean())(model)\n"
        "    return grads.w[...]\n",
        "nx_g = agree_nx_grad(nx_model, nx_x)\n",
        {
            "area": "NaN",
            "operation": "div",
            "code": "return jnp.linalg.norm(x - self.w[...], axis=-1)",
            "library": "jnp.linalg.norm",
        },
    ),
    "static_argument_per_step": (
        "%%jax_compiles",
        "import functools\n@functools.partial(jax.jit, static_argnums=1)\ndef agree_scaled(x, n):\n    return x * n\n",
        "for n in range(4):\n    agree_y = agree_scaled(jnp.ones(3), n)\n",
        {"area": "recompilation", "operation": "agree_scaled", "code": "agree_y = agree_scaled(jnp.ones(3), n)"},
    ),
    "same_key_every_step": (
        "%%jax_keys",
        "@jax.jit\ndef agree_noisy(x, key):\n    return x + jax.random.normal(key, x.shape)\n"
        "agree_key = jax.random.key(0)\n",
        "agree_xs = jnp.zeros(3)\nfor i in range(3):\n    agree_xs = agree_noisy(agree_xs, agree_key)\n",
        {"area": "random keys", "operation": "agree_noisy", "code": "agree_xs = agree_noisy(agree_xs, agree_key)"},
    ),
    "constant_key_in_a_jitted_step": (
        "%%jax_keys",
        "@jax.jit\ndef agree_const(x):\n    k = jax.random.key(0)\n    return x + jax.random.normal(k, x.shape)\n",
        "agree_cx = jnp.zeros(3)\nfor i in range(3):\n    agree_cx = agree_const(agree_cx)\n",
        {"area": "random keys", "operation": "agree_const", "code": "return x + jax.random.normal(k, x.shape)"},
    ),
    "numpyro_seed_with_one_key": (
        "%%jax_keys",
        "import numpyro, numpyro.distributions as ndist\nfrom numpyro import handlers as nhandlers\n"
        "def agree_np_model():\n    return numpyro.sample('x', ndist.Normal(0.0, 1.0))\n"
        "agree_np_key = jax.random.key(0)\n",
        "np_draws = [nhandlers.seed(agree_np_model, rng_seed=agree_np_key)() for i in range(3)]\n",
        {
            "area": "random keys",
            "operation": "jax.random.split",
            "code": "np_draws = [nhandlers.seed(agree_np_model, rng_seed=agree_np_key)() for i in range(3)]",
            "library": "numpyro.sample",
        },
    ),
    # haiku's apply, jitted by the user, given the same rng at every step (google-deepmind/dm-haiku#585): the
    # doctor and the watch counted only jitted functions defined in the user's files, and said nothing
    "haiku_apply_with_the_same_rng": (
        "%%jax_keys",
        "import haiku as hk\n"
        "def agree_hk_drop(x):\n    return hk.dropout(hk.next_rng_key(), 0.5, x)\n"
        "hk_t = hk.transform(agree_hk_drop)\n"
        "hk_xx, hk_rng = jnp.ones((2, 3)), jax.random.key(42)\nhk_pp = hk_t.init(jax.random.key(0), hk_xx)\n"
        "hk_japply = jax.jit(hk_t.apply)\n",
        "hk_o1 = hk_japply(hk_pp, hk_rng, hk_xx)\nhk_o2 = hk_japply(hk_pp, hk_rng, hk_xx)\n"
        "hk_o3 = hk_japply(hk_pp, hk_rng, hk_xx)\n",
        {"area": "random keys", "operation": "apply_fn", "code": "hk_o1 = hk_japply(hk_pp, hk_rng, hk_xx)"},
    ),
    "tracer_appended_to_a_list": (
        "%%jax_leaks",
        "agree_store = []\n@jax.jit\ndef agree_leaky(x):\n    agree_store.append(x)\n    return x + 1\n",
        "agree_r = agree_leaky(jnp.ones(2))\n",
        {"area": "tracer leak", "operation": "agree_leaky", "code": "agree_store.append(x)"},
    ),
    "numpy_batch_every_step": (
        "%%jax_transfers",
        "import numpy as np\nagree_batch = np.random.rand(10, 8).astype(np.float32)\n"
        "@jax.jit\ndef agree_host_step(w, b):\n    return w + b.sum()\n",
        "agree_w = jnp.zeros(())\nfor i in range(10):\n    agree_w = agree_host_step(agree_w, agree_batch[i])\n",
        {
            "area": "transfers",
            "operation": "agree_host_step",
            "code": "agree_w = agree_host_step(agree_w, agree_batch[i])",
        },
    ),
}

LIBRARIES = {"optax": "optax", "equinox": "eqx", "haiku": "hk", "flax": "nnx", "numpyro": "numpyro"}


def _needs(setup: str) -> None:
    for module, alias in LIBRARIES.items():
        if f"import {module}" in setup or f"import {alias}" in setup or f"from {module}" in setup:
            pytest.importorskip(module)


def through_three_paths(ip, magic: str, setup: str, cell: str) -> dict:
    """The cell under its magic, under the doctor and watched, each after the definitions ran again."""
    reports = {}
    for path, source in (
        ("magic", f"{magic} -o agree_report\n{cell}"),
        ("doctor", f"%%jax_doctor -o agree_report\n{cell}"),
        ("watch", f"# watched: the same line numbers as under a magic\n{cell}"),
    ):
        ip.run_cell(setup, store_history=True)
        if path == "watch":
            ip.run_cell("%jax_watch -o agree_report", store_history=True)
            try:
                ip.run_cell(source, store_history=True)
            finally:
                ip.run_cell("%jax_watch off", store_history=True)
        else:
            ip.run_cell(source, store_history=True)
        reports[path] = ip.user_ns["agree_report"]
    return reports


def line_of(line: dict | None) -> tuple | None:
    """A user's line as compared between paths: its number, function and code (the cell it was in differs)."""
    return None if not line else (line["lineno"], line["function"], line["code"].strip())


def same_cells(text: str) -> str:
    """Text with its cell labels made equal ("In [65]" and "In [67]" are the same definitions run again)."""
    return re.sub(r"In \[\d+\]", "In [N]", text)


def without_trial_call(fix: str) -> str:
    """A NaN fix without the call it was tried on: `f(jnp.array([1.0]))` (the cell's statement, %%jax_nans)
    and `f(...)` (the call the doctor and the watch re-ran) name the same call."""
    return re.sub(r"Tried on the values of `[^`]*`", "Tried on the values of `the call`", fix)


def only(findings: list[dict], area: str) -> dict:
    chosen = [f for f in findings if f["area"] == area]
    assert chosen, f"no {area} finding in {[f['area'] for f in findings]}"
    return chosen[0]


@pytest.fixture
def shell(ip):
    yield ip
    ip.run_cell("%jax_watch off", store_history=True)


def nan_facts(reports) -> dict:
    magic = reports["magic"].to_dict()
    doctor = reports["doctor"].to_dict()
    watch = reports["watch"].to_dict()
    d, w = only(doctor["findings"], "NaN"), only(watch["findings"], "NaN")
    offered = [f for f in magic["fixes"] if f["offered"]]
    doctor_offered = [f for f in (doctor["nans"] or {}).get("fixes", []) if f["offered"]]
    return {
        "magic": (
            "NaN",
            magic["producer"]["primitive"],
            line_of(magic["provenance"]["made_at"]),
            magic["library_function"],
            without_trial_call(magic["fix"]),
            [(f["key"], f["tried"]) for f in offered],
            magic["status"],
        ),
        "doctor": (
            d["area"],
            doctor["nans"]["producer"]["primitive"],
            line_of(d["line"]),
            d["provenance"]["library_function"],
            without_trial_call(d["fix"]),
            [(f["key"], f["tried"]) for f in doctor_offered],
            doctor["status"],
        ),
        "watch": (
            w["area"],
            w["producer"]["primitive"],
            line_of(w["line"]),
            w["provenance"]["library_function"],
            without_trial_call(w["fix"]),
            [(f["key"], f["tried"]) for f in doctor_offered],  # the watch keeps the fix text, tried or not, whole
            watch["status"],
        ),
    }


NAN_CASES = [name for name, (magic, *_) in SCENARIOS.items() if magic == "%%jax_nans"]


@pytest.mark.parametrize("name", NAN_CASES)
def test_a_nan_is_the_same_operation_line_library_and_tried_fix_on_every_path(shell, name):
    magic, setup, cell, expected = SCENARIOS[name]
    _needs(setup)
    reports = through_three_paths(shell, magic, setup, cell)
    facts = nan_facts(reports)
    assert facts["magic"] == facts["doctor"] == facts["watch"], facts
    # word for word: the re-run call is named as the user's line wrote it (it was `f(...)`) - unless the
    # line calls the jitted function by another name than its own (haiku's `apply_fn` as `hk_apply`)
    fixes = {
        "magic": reports["magic"].to_dict()["fix"],
        "doctor": only(reports["doctor"].to_dict()["findings"], "NaN")["fix"],
        "watch": only(reports["watch"].to_dict()["findings"], "NaN")["fix"],
    }
    if name == "haiku_layer_norm_eps_0":
        assert "Tried on the values of `apply_fn(...)`" in fixes["doctor"] and fixes["doctor"] == fixes["watch"]
    else:
        assert fixes["magic"] == fixes["doctor"] == fixes["watch"], fixes
    area, operation, line, library, fix, tried, status = facts["magic"]
    assert (area, line[2], library, status) == (expected["area"], expected["code"], expected["library"], "problem")
    assert operation == expected["operation"]
    assert fix and (("Tried on the values of" in fix) == any(t for _, t in tried))


def test_a_static_argument_is_one_cause_and_one_fix_and_the_watch_says_it_did_not_try_it(shell):
    magic, setup, cell, expected = SCENARIOS["static_argument_per_step"]
    reports = through_three_paths(shell, magic, setup, cell)
    (entry,) = [f for f in reports["magic"].to_dict()["functions"] if f["name"] == expected["operation"]]
    d = only(reports["doctor"].to_dict()["findings"], "recompilation")
    w = only(reports["watch"].to_dict()["findings"], "recompilation")
    told = {
        path: (c["kind"], c["function"], c["names"], c["values"], line_of(line))
        for path, c, line in (
            ("magic", entry["again"], entry["first_line"]),
            ("doctor", d["cause"], d["line"]),
            ("watch", w["cause"], w["line"]),
        )
    }
    assert told["magic"] == told["doctor"] == told["watch"], told
    assert told["magic"][4][2] == expected["code"] and entry["again"]["kind"] == "static"
    # the fix: tried by %%jax_compiles and the doctor; the watch gives the same fix and says it did not try it
    assert d["fix"] == entry["again"]["fix"] and "Checked: tried by tracing" in d["fix"]
    assert w["fix"].startswith(d["fix"].split(" Checked:")[0]) and "not tried" in w["fix"]
    assert {r.to_dict()["status"] for r in reports.values()} == {"problem"}


def key_facts(finding: dict) -> tuple:
    provenance = finding.get("provenance") or {}
    return (
        same_cells(finding.get("title") or finding.get("headline")),
        line_of(finding["line"]),
        line_of(provenance.get("made_at")),
        provenance.get("library_function", ""),
        finding["fix"],
    )


@pytest.mark.parametrize(
    "name",
    [
        "same_key_every_step",
        "constant_key_in_a_jitted_step",
        "numpyro_seed_with_one_key",
        "haiku_apply_with_the_same_rng",
    ],
)
def test_a_key_problem_is_the_same_finding_in_the_doctor_and_the_watch_and_in_the_magics_words(shell, name):
    magic, setup, cell, expected = SCENARIOS[name]
    _needs(setup)
    reports = through_three_paths(shell, magic, setup, cell)
    keys = reports["magic"].to_dict()
    doctor = [f for f in reports["doctor"].to_dict()["findings"] if f["area"] == "random keys"]
    watch = [f for f in reports["watch"].to_dict()["findings"] if f["area"] == "random keys"]
    assert [key_facts(f) for f in doctor] == [key_facts(f) for f in watch]
    first = key_facts(doctor[0])
    assert expected["operation"] in first[0] and first[1][2] == expected["code"]
    assert first[3] == expected.get("library", first[3])
    assert keys["status"] == "problem"
    # the magic's words: its headline, and right below it the findings the headline had no room for
    keys["summary"] = " ".join([keys["summary"], *reports["magic"].also_found])
    if keys["reuse"] and not keys["recorded"]:
        # %%jax_keys stops the cell at the first consumed key (JAX's KeyReuseError, raised after the report),
        # where the doctor and the watch record it and go on: the magic says the reuse first, then the same
        # sentence as theirs, counted over the calls made before it stopped
        assert keys["summary"].startswith("Key reused:")
        assert counted_out(first[0]) in counted_out(same_cells(keys["summary"]))
    else:  # ran to the end: the doctor's and the watch's first finding is the magic's own sentence
        assert first[0] in same_cells(keys["summary"])


def counted_out(text: str) -> str:
    return re.sub(r"\d+ of its \d+ calls", "N of its N calls", text)


def test_a_tracer_leak_is_one_finding_and_the_watch_says_it_does_not_check_leaks(shell):
    from jaxmagic.probes._watch import NOT_WATCHED

    magic, setup, cell, expected = SCENARIOS["tracer_appended_to_a_list"]
    reports = through_three_paths(shell, magic, setup, cell)
    leaks, doctor = reports["magic"].to_dict(), reports["doctor"].to_dict()
    finding = only(doctor["findings"], "tracer leak")
    assert same_cells(finding["title"]) == same_cells(leaks["summary"].rstrip("."))
    assert expected["operation"] in finding["title"] and leaks["status"] == doctor["status"] == "problem"
    # the user's line and the fix are the magic's (the doctor pointed at no line and gave the general fix only)
    (leaked,) = leaks["leaked"]
    assert line_of(finding["line"]) == line_of(leaked["created_at"] or leaked["stored_at"])
    assert line_of(finding["line"])[2] == expected["code"]
    assert finding["fix"] == reports["magic"].fix and "Here: `" in finding["fix"]
    watch = reports["watch"]
    assert watch.findings == [] and "Tracer leaks are not watched" in NOT_WATCHED
    assert " ".join(NOT_WATCHED.split()) in " ".join(str(watch).split())  # said where the user reads the log


def test_a_numpy_batch_every_step_is_the_same_headline_line_and_fix_on_every_path(shell):
    magic, setup, cell, expected = SCENARIOS["numpy_batch_every_step"]
    reports = through_three_paths(shell, magic, setup, cell)
    transfers = reports["magic"].to_dict()
    (use,) = transfers["host_arguments"]
    d = only(reports["doctor"].to_dict()["findings"], "implicit transfers")
    w = only(reports["watch"].to_dict()["findings"], "transfers")
    assert transfers["summary"].startswith(d["title"] + ";") and d["title"] == w["headline"]
    assert line_of(use["line"]) == line_of(d["line"]) == line_of(w["line"])
    assert line_of(d["line"])[2] == expected["code"] and expected["operation"] in d["title"]
    assert d["fix"] == w["fix"] and "jax.device_put" in d["fix"]
    assert {r.to_dict()["status"] for r in reports.values()} == {"problem"}


def test_two_functions_of_one_name_given_numpy_arrays_are_two_findings_on_every_path(shell):
    """Two jitted lambdas (one name, `<lambda>`) each given a NumPy array from their own line: their calls
    were added up into one finding at the first one's line (the `f_tg` and `step_on` of docs/magics/jax_transfers.md)."""
    setup = "import numpy as np\nagree_f_tg = jax.jit(lambda x: x * 2)\nagree_step_on = jax.jit(lambda x: x + 1)\n"
    cell = (
        "for i in range(10):\n    agree_f_tg(np.ones(3, np.float32))\n"
        "for i in range(3):\n    agree_step_on(np.zeros(3, np.float32))\n"
    )
    reports = through_three_paths(shell, "%%jax_transfers", setup, cell)
    transfers = reports["magic"].to_dict()
    doctor = [f for f in reports["doctor"].to_dict()["findings"] if f["area"] == "implicit transfers"]
    watch = [f for f in reports["watch"].to_dict()["findings"] if f["area"] == "transfers"]
    told = {(h["calls"], line_of(h["line"])[2]) for h in transfers["host_arguments"]}
    assert told == {(10, "agree_f_tg(np.ones(3, np.float32))"), (3, "agree_step_on(np.zeros(3, np.float32))")}
    assert {(f["title"], line_of(f["line"])) for f in doctor} == {(f["headline"], line_of(f["line"])) for f in watch}
    assert transfers["summary"].startswith(doctor[0]["title"]) and "in 10 calls" in doctor[0]["title"]
