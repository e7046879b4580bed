#!/usr/bin/env bash
# The floor lane: jaxmagic on the oldest Python and JAX it supports (Python 3.11, JAX 0.10.2 - a stock TPU
# image's), where Python has no sys.monitoring. It runs the smoke of every magic in an in-process shell
# (tests/test_magics_contract.py), the tests of the fallback paths (tests/test_floor.py: the settrace
# stand-in, the reports' words, JAX imported from a folder on PYTHONPATH) and the checks of the private JAX
# structure _jax/ reads. About a minute and a half here; with .venv-floor made from nothing, three.
#
#   tools/floor_lane.sh [PYTHON]    PYTHON: .venv-floor/bin/python (make test-floor makes it), or any Python
#                                   with JAX, IPython, rich, executing and pytest importable - a JAX on
#                                   PYTHONPATH included (the TPU image: PYTHONPATH=/opt/... tools/floor_lane.sh python3.11)
#
# jaxmagic is imported from this checkout (put first on PYTHONPATH; what PYTHONPATH held stays after it).
# Extra pytest arguments: FLOOR_PYTEST_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${1:-.venv-floor/bin/python}"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
"$PY" -c 'import sys, jax, jaxmagic; print(f"floor lane: Python {sys.version.split()[0]}, JAX {jax.__version__} from {jax.__file__}")'
# shellcheck disable=SC2086 # FLOOR_PYTEST_ARGS: words on purpose
exec "$PY" -m pytest -p no:cacheprovider -q ${FLOOR_PYTEST_ARGS:-} \
    tests/test_magics_contract.py \
    tests/test_floor.py \
    tests/test_jax_structure.py \
    tests/test_checkify_structure.py
