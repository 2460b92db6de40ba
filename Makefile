# Developer entry points: `make test`, `make lint`, `make bench`, `make demo`.
# Each creates .venv (python3.11, else python3) if it is missing and installs the
# extras it needs; a stamp file per extra, newer than pyproject.toml, skips the
# install on later runs.

PYTHON ?= $(shell command -v python3.11 2>/dev/null || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
SOURCES := src tests benchmarks
PYTEST_ARGS ?=
BENCH_ARGS ?=

# The lowest JAX taylax supports, tested in a venv of its own (`make test-jax-min`).
JAX_MIN := 0.9.2
VENV_MIN := .venv-jax-min

.PHONY: test test-slow test-gpu-policy test-jax-min lint bench demo docs clean

$(BIN)/python:
	@test -n "$(PYTHON)" || { echo "Neither python3.11 nor python3 was found on PATH." >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)

$(VENV)/.stamp-test: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

$(VENV)/.stamp-bench: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $@

$(VENV)/.stamp-demo: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[demo]'
	touch $@

lint: $(VENV)/.stamp-test
	$(BIN)/ruff check $(SOURCES)
	$(BIN)/ruff format --check $(SOURCES)

# The demo extra is installed too, so that the `taylax demo` test runs instead of skipping.
test: lint $(VENV)/.stamp-demo
	$(BIN)/python -m pytest -n 2 $(PYTEST_ARGS)

# The extended cases `make test` skips (pytest marker `slow`).
test-slow: $(VENV)/.stamp-test
	$(BIN)/python -m pytest -n 2 -m slow $(PYTEST_ARGS)

# The modules of tests/gpu_policy_modules.txt (the rules, the API, the operators, the
# precision and the ODE solvers) again under the GPU's emission policy, on this machine:
# the forms only that policy emits (rows and unrolled recurrences to other orders) are
# checked without a GPU (2 to 4 minutes on 2 cores; tests/conftest.py, TAYLAX_TEST_POLICY).
GPU_POLICY_TESTS := $(shell grep -v '^\#' tests/gpu_policy_modules.txt)

test-gpu-policy: $(VENV)/.stamp-test
	TAYLAX_TEST_POLICY=gpu $(BIN)/python -m pytest -n 2 $(PYTEST_ARGS) $(GPU_POLICY_TESTS)

# The quick suite again on the lowest supported JAX (pyproject's pin), as CI runs it.
$(VENV_MIN)/bin/python:
	@test -n "$(PYTHON)" || { echo "Neither python3.11 nor python3 was found on PATH." >&2; exit 1; }
	$(PYTHON) -m venv $(VENV_MIN)

$(VENV_MIN)/.stamp-test: pyproject.toml | $(VENV_MIN)/bin/python
	$(VENV_MIN)/bin/python -m pip install --quiet -e '.[test,demo]' 'jax==$(JAX_MIN)' 'jaxlib==$(JAX_MIN)'
	touch $@

# It keeps XLA:CPU's default fusion emitters, which the other test targets turn off to
# compile faster (tests/conftest.py): CI checks every quick case with the codegen users get.
test-jax-min: $(VENV_MIN)/.stamp-test
	XLA_FLAGS="$$XLA_FLAGS --xla_cpu_use_fusion_emitters=true" $(VENV_MIN)/bin/python -m pytest -n 2 $(PYTEST_ARGS)

bench: $(VENV)/.stamp-bench
	@mkdir -p benchmarks/results
	@for script in benchmarks/bench_*.py; do \
		echo "== $$script"; \
		$(BIN)/python $$script $(BENCH_ARGS) || exit 1; \
	done
	$(BIN)/python benchmarks/bench_ode.py --one-function-loops --no-diffrax
	$(BIN)/python benchmarks/update_readme.py

demo: $(VENV)/.stamp-demo
	$(BIN)/taylax demo

# The docs site (mkdocs.yml, docs/) into site/: strict, so any warning fails the build; the
# examples marked `exec="on"` run while it builds.
$(VENV)/.stamp-docs: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[docs]'
	touch $@

docs: $(VENV)/.stamp-docs
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

clean:
	rm -rf $(VENV) $(VENV_MIN) site .pytest_cache .ruff_cache .hypothesis taylax_demo.png taylax_demo_recursion.png
