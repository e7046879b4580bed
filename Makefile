# Two commands: `make demo` runs every demo notebook headless, `make test` runs
# the tests (unit tests and headless notebook runs). Both create .venv first.
# `make notebooks` syncs each demo notebook with its paired source demo_notebooks/NN_*.py.
PY := .venv/bin/python

.PHONY: demo test test-fast bench venv notebooks clean

venv:
	@tools/venv.sh

demo: venv
	$(PY) tools/run_notebooks.py

test: venv
	$(PY) -m pytest $(PYTEST_ARGS)

# The lane to run while working (about two minutes): no browser, kernel, cluster or slow test.
test-fast: venv
	$(PY) -m pytest -m "not browser and not kernel and not cluster and not slow" $(PYTEST_ARGS)

notebooks: venv
	$(PY) tools/sync_notebooks.py

bench: venv
	$(PY) benchmarks/run_all.py

clean:
	rm -rf build .venv
