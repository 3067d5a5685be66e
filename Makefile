# rmqfs: `make demo` and `make test` set up everything they need on a fresh Debian machine.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
SYSPY ?= python3
APT_PKGS := fuse3 libfuse3-dev pkg-config gcc zlib1g-dev rsync restic
STAMP := $(VENV)/.installed

.PHONY: all deps venv kernel lint test demo bench clean

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

# The columnar decoder's compiled core (engine/read/_kernel.c, zlib): built beside its module
# under a name that carries the source's digest, so an edited source is rebuilt here.
kernel: $(STAMP)
	@$(PY) -m engine.read.kernel >/dev/null

# ruff (rules in pyproject.toml), ruff's formatter (check only: run `ruff format .` to apply)
# and mypy (files and flags in pyproject.toml).
lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

test: venv
	$(VENV)/bin/pytest -q -ra $(PYTEST_ARGS)

demo: venv
	$(PY) -m mount.demo $(DATA)

bench: venv
	$(PY) -m bench.engine
	$(PY) -m bench.fuse
	$(PY) -m bench.spark

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache engine/read/_kernel-*.so
