PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test lint types pytest docs bench clean

$(BIN)/python:
	$(shell command -v $(PYTHON) || command -v python3) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: | $(BIN)/python
	$(BIN)/pip install --quiet -e .
	$(BIN)/failover demo

lint: $(STAMP)
	$(BIN)/ruff check failover tests bench
	$(BIN)/ruff format --check failover tests bench

types: $(STAMP)
	$(BIN)/mypy failover tests/typing

pytest: $(STAMP)
	$(BIN)/pytest

docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir $(VENV)/site

test: lint types pytest docs

bench: $(STAMP)
	$(BIN)/pip install --quiet -e '.[test,bench]'
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .mypy_cache .pytest_cache .ruff_cache site
