# Two commands: `make demo` runs every demo notebook headless, `make test` runs
# the tests (unit tests and headless notebook runs). Both create .venv first.
# `make notebooks` syncs each demo notebook with its paired source demo_notebooks/NN_*.py.
# `make test-floor` runs the floor lane: every magic's smoke and the fallback paths on Python 3.11 + JAX 0.10.2
# (.venv-floor, made by tools/venv_floor.sh from constraints-floor.txt; the lane itself is tools/floor_lane.sh).
# `make docs` builds the documentation site into build/docs/html/ (offline, warnings as errors; the demo
# notebooks' pages show the executed copies `make demo` left in build/notebooks/). `make dist` builds the
# wheel and the sdist into dist/.
PY := .venv/bin/python
# tests/test_docs.py runs the same command with -E, reading every page again (DOCS_COMMAND there).
SPHINX := $(PY) -m sphinx -b html -W --keep-going -q -d build/docs/doctrees docs build/docs/html

.PHONY: demo test test-fast test-floor bench venv venv-floor notebooks docs dist clean

venv:
	@tools/venv.sh

demo: venv
	$(PY) tools/run_notebooks.py

# Both lanes run on every core, up to four workers (pytest-xdist; tests/conftest.py says what each worker takes).
XDIST := -n auto --maxprocesses=4

test: venv
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

# The lane to run while working (about two minutes on this 2-core machine, 1,229 tests on both cores): no browser, kernel, cluster or slow test.
test-fast: venv
	$(PY) -m pytest $(XDIST) -m "not browser and not kernel and not cluster and not slow" $(PYTEST_ARGS)

# Python 3.11 + JAX 0.10.2, the oldest supported (a stock TPU image's): about a minute and a half from nothing.
venv-floor:
	@tools/venv_floor.sh

test-floor: venv-floor
	tools/floor_lane.sh .venv-floor/bin/python

notebooks: venv
	$(PY) tools/sync_notebooks.py

docs: venv
	$(SPHINX)
	@echo "The documentation: build/docs/html/index.html"

dist: venv
	$(PY) -m build --no-isolation --outdir dist .

bench: venv
	$(PY) benchmarks/run_all.py

clean:
	rm -rf build dist .venv .venv-floor docs/notebooks/*.ipynb docs/magics/_generated
