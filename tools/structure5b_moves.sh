#!/usr/bin/env bash
# Issue 62, step 5, item 5: the user-code inspection leaves the report model for a layer of its own, usercode/
# (frames, tracebacks, which file is whose). Run again after a merge: it moves nothing twice and rewrites what the
# merged work still names by the old places. Then: ruff check --fix --select I . && ruff format .
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
"$PY" tools/move_modules.py jaxmagic.report.source=jaxmagic.usercode.source jaxmagic.report.code_owner=jaxmagic.usercode.code_owner
# the docs' and docstrings' short forms (``report.source.is_user_file``, `report/code_owner.py`)
git ls-files '*.py' '*.md' | grep -v -e '^tools/structure5b_moves.sh$' -e '^tests/test_design_pages.py$' | xargs sed -i \
    -e 's/\breport\.source\b/usercode.source/g' -e 's/\breport\.code_owner\b/usercode.code_owner/g' \
    -e 's#\breport/source\.py#usercode/source.py#g' -e 's#\breport/code_owner\b#usercode/code_owner#g'
