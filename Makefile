# Two entry points, both self-contained on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Installed marker: reinstall when the package metadata changes.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e ".[games,dev]"
	touch $@

demo: $(VENV)/.installed
	$(BIN)/r3l demo

test: $(VENV)/.installed
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -n 2 -m "not gpu"

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/envs.py

clean:
	rm -rf $(VENV)
