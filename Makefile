# `make test` and `make demo` set up .venv themselves (idempotent: re-installs only
# when pyproject.toml changed) and need nothing but Python >= 3.11 and make.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-fast demo setup clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,aot]'
	touch $(STAMP)

test: $(STAMP)
	JAX_PLATFORMS=cpu $(BIN)/python -m pytest -q -n auto --dist loadfile --durations=25

# the edit loop: every test not marked slow (make test stays the whole suite)
test-fast: $(STAMP)
	JAX_PLATFORMS=cpu $(BIN)/python -m pytest -q -n auto --dist loadfile -m "not slow"

demo: $(STAMP)
	$(BIN)/nplace demo

clean:
	rm -rf $(VENV) runs .pytest_cache
