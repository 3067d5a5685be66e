# rmqfs: `make demo` and `make test` set up everything they need on a fresh Debian machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
SYSPY ?= python3
APT_PKGS := fuse3 libfuse3-dev pkg-config gcc zlib1g-dev rsync restic
STAMP := $(VENV)/.installed

.PHONY: all deps venv kernel sanitize sanitize-run lint test test-long demo bench clean

all: test

# System packages: only installs what is missing, so it is cheap to run every time.
deps:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	command -v javac >/dev/null 2>&1 || missing="$$missing openjdk-17-jdk-headless"; \
	$(SYSPY) -c 'import sysconfig,os,sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"],"Python.h")))' \
	  || missing="$$missing python3-dev"; \
	if [ -n "$$missing" ]; then \
	  echo "apt-get install:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

$(STAMP): pyproject.toml | deps
	test -x $(PY) || $(SYSPY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[dev]'
	touch $(STAMP)

venv: deps $(STAMP) kernel

# The columnar decoder's compiled core (engine/read/_kernel.c, zlib), the extension module
# engine/read/_kernel_cffi*.so: `pip install -e` builds it (setup.py's cffi_modules); this
# rebuilds it when _kernel.c or _kernel.h changed since (engine.read.kernel refuses a module
# built from another source).
kernel: $(STAMP)
	@$(PY) -m rmqfs.engine.read._kernel_build --if-stale >/dev/null

# The kernel built with AddressSanitizer and UndefinedBehaviorSanitizer (every report fatal)
# into build/sanitize, and its tests and fuzzers run with it loaded: libasan preloaded into
# Python (not built with it), leak checks off (Python's own allocations), Python's and Arrow's
# allocators replaced by malloc so a read or write past a buffer lands in a red zone. The zstd
# bomb tests are left out: they measure peak RSS, which ASan's shadow memory inflates.
# tests/engine/test_kernel_sanitize.py runs `sanitize-run` (marker `sanitize`) in `make test`.
SAN_FLAGS := -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1
SAN_DIR := build/sanitize
SAN_TESTS := tests/engine/test_kernel.py tests/engine/test_hostile_records.py \
	tests/engine/test_store_damage_fuzz.py tests/engine/test_put_kernel.py \
	tests/engine/test_recovery_dledger.py tests/engine/test_index_keys.py \
	tests/engine/test_putobj.py tests/engine/test_index_pending.py -k "not bomb"
sanitize: venv sanitize-run

sanitize-run:
	mkdir -p $(SAN_DIR)
	CFLAGS="$(SAN_FLAGS)" LDFLAGS="-fsanitize=address,undefined" \
	  $(PY) -m rmqfs.engine.read._kernel_build --out $(SAN_DIR) > $(SAN_DIR).path
	export RMQFS_KERNEL_MODULE=$$(cat $(SAN_DIR).path) \
	  LD_PRELOAD=$$($${CC:-gcc} -print-file-name=libasan.so) \
	  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  PYTHONMALLOC=malloc ARROW_DEFAULT_MEMORY_POOL=system; \
	$(PY) -c 'from engine.read import kernel; import sys; \
	  assert kernel.load().lib.rmq_source_digest and \
	  sys.modules["rmqfs.engine.read._kernel_cffi"].__file__ == sys.argv[1]' $$RMQFS_KERNEL_MODULE && \
	$(VENV)/bin/pytest -q -p no:cacheprovider $(SAN_TESTS) $(PYTEST_ARGS)

# ruff (rules in pyproject.toml), ruff's formatter (check only: run `ruff format .` to apply)
# and mypy (files and flags in pyproject.toml).
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# `make test` (the README's test command) runs the suite but for the long runs behind a marker
# (the sanitizer build, the wheel build, tests marked long), which `make test-long` runs; CI
# (.ci/run) runs both. Each prints its slowest tests.
TEST_MARKS ?= not long and not sanitize and not wheel
# Test processes (pytest-xdist): each test file runs whole in one of them (--dist loadfile:
# its module fixtures, an S3 server or a store, are started once); 0 runs in this process.
TEST_WORKERS ?= 2
XDIST = $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadfile)
test: venv
	$(VENV)/bin/pytest -q -ra --durations=15 $(XDIST) -m "$(TEST_MARKS)" $(PYTEST_ARGS)

test-long: venv
	$(VENV)/bin/pytest -q -ra --durations=15 $(XDIST) -m "long or sanitize or wheel" $(PYTEST_ARGS)

demo: venv
	$(PY) -m rmqfs.mount.demo $(DATA)

bench: venv
	$(PY) -m bench.engine
	$(PY) -m bench.fuse
	$(PY) -m bench.spark

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache engine/read/_kernel_cffi*.so engine/read/_kernel_cffi.c
