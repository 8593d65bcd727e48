# Two entry points, both self-contained on a fresh clone: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin

.PHONY: demo test lint bench clean compile

# `make test` runs the suite on this many worker processes (pytest-xdist), whole test files to a
# worker so that each module's fixtures are built once (the cold compile the first-run tests
# share is built once a run: tests/conftest.py). 0: in this process, one test after another.
TEST_WORKERS ?= 2

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@ $(VENV)/.installed

# The policy kernels compiled once (side by side on 3+ cores) into numba's per-user cache
# (common/numba_cache.py: ~/.cache/sitsprof/numba), before the demo or the tests load them:
# `make demo` then `make test` compile nothing twice. Again only when the engine's source changes.
$(VENV)/.compiled: $(VENV)/.installed $(wildcard policies/*.py policies/*/*.py)
	$(BIN)/sitsprof compile
	touch $@

compile: $(VENV)/.compiled

demo: $(VENV)/.installed $(VENV)/.compiled
	$(BIN)/sitsprof demo

# The layering (pyproject.toml [tool.importlinter]), no import cycle between modules, ruff:
# each names the offending import or line and stops the build.
lint: $(VENV)/.installed-dev
	$(BIN)/lint-imports
	$(BIN)/python tools/check_import_cycles.py
	$(BIN)/ruff check .

test: lint $(VENV)/.compiled
	@# The browser test needs Debian's chromium: install it where apt-get exists; never fail here
	@# (without it tests/test_browser.py skips with the reason).
	-@command -v chromium >/dev/null 2>&1 || ! command -v apt-get >/dev/null 2>&1 || \
	  (export DEBIAN_FRONTEND=noninteractive; apt-get install -y -q chromium >/dev/null 2>&1 || \
	   (apt-get update -q >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1)) || \
	  echo "make: could not install chromium (not root?): the browser test will skip"
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile

bench: $(VENV)/.installed-dev
	$(BIN)/python bench/bench_policies.py
	$(BIN)/python bench/bench_report.py

clean:
	rm -rf $(VENV) build *.egg-info
