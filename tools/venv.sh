#!/usr/bin/env bash
# Creates the project's virtual environment (.venv) on first use and reuses it
# afterwards; reinstalls only when pyproject.toml or constraints.txt changed.
# JAX 0.12 needs Python >= 3.12: we look for one on PATH and among pyenv's
# installed versions (the system python3 here is 3.11).
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=.venv
STAMP="$VENV/.jaxmagic-installed"

python_ok() { "$1" -c 'import sys, venv, ensurepip; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; }

find_python() {
    local pyenv_root="${PYENV_ROOT:-$HOME/.pyenv}" cand
    for cand in ${JAXMAGIC_PYTHON:-} python3.14 python3.13 python3.12 python3 \
                $(ls -d "$pyenv_root"/versions/3.*/bin/python3 2>/dev/null | sort -rV); do
        if python_ok "$cand"; then command -v "$cand" 2>/dev/null || echo "$cand"; return 0; fi
    done
    return 1
}

wanted="$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)"
if [ -x "$VENV/bin/python" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$wanted" ]; then
    exit 0
fi
if [ ! -x "$VENV/bin/python" ]; then
    if ! PY="$(find_python)"; then
        echo "jaxmagic needs Python >= 3.12 with venv (JAX 0.12 requires it); none was found on PATH or under pyenv - install one, or point JAXMAGIC_PYTHON at it." >&2
        exit 1
    fi
    echo "Creating $VENV with $PY ($("$PY" --version 2>&1))"
    "$PY" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip 2>&1 | grep -v "is ignored: it is neither" || true
"$VENV/bin/python" -m pip install --quiet -c constraints.txt -e '.[test]' 2>&1 | grep -v "is ignored: it is neither" || true
"$VENV/bin/python" -c 'import jax, jaxmagic, nbclient, ipykernel' || { echo "Installing jaxmagic's environment failed (see pip's messages above)." >&2; exit 1; }
# A kernel spec inside the venv, so notebook runs use exactly this environment.
"$VENV/bin/python" -m ipykernel install --sys-prefix --name jaxmagic --display-name "Python (jaxmagic)" >/dev/null
echo "$wanted" > "$STAMP"
