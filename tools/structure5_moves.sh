#!/usr/bin/env bash
# Issue 62, step 5, item 1: each module to the home of its domain. One move a line (a commit each on the branch
# structure5); every line can be run again after a merge: it moves what has not moved and rewrites what the
# merged work still names by its old place. Then: ruff check --fix --select I . && ruff format .
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
P=jaxmagic.probes
move() { "$PY" tools/move_modules.py "$@"; }

# 1. the NaN fix rules' module becomes a package of the fixes: _nans/fixes.py -> _nans/fixes/rules.py
move $P._nans.fixes=$P._nans.fixes.rules
# 2. the NaN search and its fixes go home to _nans/: search/, fixes/, and the watch, what it reads, the primitives
S=$P._support.nan
move $(for m in producer given equation_origin forward_reach host_values masked_rows integer_overflow; do echo $S.$m=$P._nans.search.$m; done) \
     $(for m in value_fixes widened primal_fixes producer_fixes lost_constant added_epsilon fix_keys; do echo $S.$m=$P._nans.fixes.$m; done) \
     $(for m in fix_rule fix_rules_domain fix_rules_limits fix_rules_program tried_fixes library_parameters; do echo $P._nans.$m=$P._nans.fixes.$m; done) \
     $S.watch=$P._nans.watch $S.nonfinite=$P._nans.nonfinite $S.primitives=$P._nans.primitives \
     $S.failing_call=$P._support.rerun.failing_call
# 3. the holder search to %jax_live, whose question it answers (who keeps arrays alive); %%jax_leaks asks it too
move $P._support.holders=$P._live.holders
# 4. a tracer's origin and its words to %%jax_leaks (%jax_explain, which imports it already, asks it too)
move $P._support.tracers=$P._leaks.tracers
# 5. reading HLO text to %jax_hlo; a sharding's layout grid to %jax_sharding
move $P._support.hlo_text=$P._hlo.hlo_text
move $P._support.sharding_layout=$P._sharding.sharding_layout
