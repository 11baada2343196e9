# Every target that needs the environment depends on .venv/.installed, so `make demo` and
# `make test` set themselves up on a fresh machine.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export WANDB_MODE ?= offline
export PYTHONHASHSEED ?= 0

.PHONY: install browser demo test test-fast lint format bench docs docs-serve clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt constraints-cuda13.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; set PYTHON=python3.x" >&2; exit 1; }
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -c constraints.txt -c constraints-cuda13.txt -e ".[dev]"
	@touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python -m ncl_lightning.demo

# The atlas page's browser tests drive Debian's Chromium: installed here when we are root with
# apt-get; otherwise one line says why those tests will skip. Never fails the make.
browser:
	@if [ -x /usr/bin/chromium ]; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  export DEBIAN_FRONTEND=noninteractive; \
	  echo "browser: installing Debian's chromium for the atlas page's browser tests"; \
	  apt-get install -y -qq chromium >/dev/null 2>&1 \
	  || { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; } \
	  || echo "browser: apt-get install chromium failed; the browser tests will skip"; \
	else echo "browser: no /usr/bin/chromium and not root with apt-get; the browser tests will skip"; fi

test: $(STAMP) browser
	$(BIN)/ruff check .
	$(BIN)/python -m pytest -q -ra --durations=15 -n 2 --dist loadgroup

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow and not ddp"

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The throughput benchmark reads the real CIFAR-10 subset kept beside the checkout. The GPU
# measurements of issue 43 are one prepared script, bench-gpu/run.sh (~8 min on an H100/H200).
bench: $(STAMP)
	@echo "bench: on a GPU machine run bench-gpu/run.sh (~8 min; logs to \$$OUT, default bench-gpu/out;"
	@echo "bench: without jsonargparse there, run bench-gpu/fetch-wheels.sh here first and carry bench-gpu/wheels)"
	NCL_BENCH_DATA=$${NCL_BENCH_DATA:-../shared/data/cifar10-real-subset} $(BIN)/python -m benchmarks

# The documentation site (mkdocs.yml) into site/; --strict turns every warning (a broken link,
# a stale API reference) into a failure. tests/test_docs.py runs the same build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

docs-serve: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

clean:
	rm -rf $(VENV) runs lightning_logs wandb site .pytest_cache
