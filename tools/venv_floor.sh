#!/usr/bin/env bash
# Creates the floor lane's environment (.venv-floor): Python 3.11 with the oldest JAX jaxmagic supports
# (constraints-floor.txt), made on first use and reused until that file changes. jaxmagic itself is not
# installed: the lane imports it from the checkout (tools/floor_lane.sh puts it on PYTHONPATH), as the
# TPU image's Python does, and pip then needs no build backend.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv-floor
STAMP="$VENV/.jaxmagic-installed"

python_311() { "$1" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info[:2] != (3, 11))' >/dev/null 2>&1; }

find_python() {
    local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}" cand
    for cand in ${JAXMAGIC_FLOOR_PYTHON:-} python3.11 python3 \
                $(ls -d "$pyenv_root"/versions/3.11*/bin/python3 2>/dev/null | sort -rV); do
        if python_311 "$cand"; then command -v "$cand" 2>/dev/null || echo "$cand"; return 0; fi
    done
    return 1
}

wanted="$(sha256sum < constraints-floor.txt | cut -d' ' -f1)"
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ]; then
    exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
    if ! PY="$(find_python)"; then
        echo "the floor lane needs Python 3.11 with venv; none was found on PATH or under pyenv - install one, or point JAXMAGIC_FLOOR_PYTHON at it." >&2
        exit 1
    fi
    echo "Creating $VENV with $PY ($("$PY" --version 2>&1))"
    "$PY" -m venv "$VENV"
fi
# Every package pinned in constraints-floor.txt, nothing else asked for (their own dependencies follow).
grep -v '^#' constraints-floor.txt | sed 's/==.*//' | xargs "$VENV/bin/python" -m pip install --quiet \
    --disable-pip-version-check -c constraints-floor.txt 2>&1 | grep -v "is ignored: it is neither" || true
"$VENV/bin/python" -c 'import jax, IPython, rich, executing, pytest' ||
    { echo "Installing the floor environment failed (see pip's messages above)." >&2; exit 1; }
echo "$wanted" > "$STAMP"
