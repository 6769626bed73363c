# rota: `make demo` and `make test` work on a fresh machine (python3, make, git).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo web-demo test lint typecheck unit dist bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/worked_example.py
	@echo
	$(BIN)/python examples/realtime_demo.py
	@echo
	$(BIN)/python examples/durable_demo.py
	@echo
	$(BIN)/python examples/cli_demo.py
	@echo
	$(BIN)/python examples/handoff_demo.py
	@echo
	$(BIN)/python examples/web_demo.py

# A demo node with its dashboard, left running until Ctrl-C: open the URL it prints.
web-demo: $(STAMP)
	$(BIN)/python examples/web_demo.py --keep

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: $(STAMP)
	$(BIN)/mypy --strict src tests examples bench

# PostgreSQL tests need a server: tests/postgres_server.py installs PostgreSQL
# when missing (as root, from Debian), starts a throwaway one on loopback for the
# run, and stops it after.
# Bytecode is cached (PYTHONDONTWRITEBYTECODE emptied, as some environments set it):
# the suite starts over a thousand Python processes, each of which would otherwise
# compile rota and the tests' helpers again.
unit: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python tests/postgres_server.py -- $(BIN)/python -m pytest -q

test: lint typecheck unit

# The sdist and the wheel, in dist/, checked as the package index would
# (tests/test_dist.py builds them the same way and installs the wheel).
dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist
	$(BIN)/twine check --strict dist/*

$(VENV)/.bench: $(STAMP) bench/peer_drains/requirements-aps4.txt
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	test -x .venv-aps4/bin/python || $(PYTHON) -m venv .venv-aps4
	.venv-aps4/bin/python -m pip install --quiet -r bench/peer_drains/requirements-aps4.txt
	touch $(VENV)/.bench

# Rewrites bench/results/ (tables, JSON, plot): about 20 minutes.
bench: $(VENV)/.bench
	$(BIN)/python bench/core.py
	$(BIN)/python bench/realtime.py
	$(BIN)/python bench/overlap.py
	$(BIN)/python bench/calendars.py
	$(BIN)/python bench/peers.py
	$(BIN)/python tests/postgres_server.py --durable -- $(BIN)/python bench/durable.py
	$(BIN)/python tests/postgres_server.py --durable -- $(BIN)/python bench/scale.py
	$(BIN)/python tests/postgres_server.py --durable -- $(BIN)/python bench/dependencies.py
	$(BIN)/python tests/postgres_server.py --durable -- $(BIN)/python bench/operations.py

clean:
	rm -rf $(VENV) .venv-aps4 dist .mypy_cache .ruff_cache .pytest_cache .hypothesis
