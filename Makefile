# `make demo` and `make test` work from a fresh clone: they create .venv if absent and install.
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
# The CPU build of torch. On the project's machines this version lies on local disk.
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.ttball-installed

.PHONY: install demo test test-fast check web clean

$(PY):
	python3 -m venv $(VENV)

$(STAMP): $(PY) pyproject.toml
	$(PIP) install -q --upgrade pip
	$(PIP) install -q "$(TORCH_SPEC)"
	$(PIP) install -q -e ".[serve,dev,cpu,ray]"
	touch $(STAMP)

WEB_SRC := $(wildcard web/src/*.js web/static/*) web/build.mjs

# The web page (ttball/web/, served by `ttball serve` at /): npm packages built with esbuild.
web: ttball/web/index.html

web/node_modules/.package-lock.json: web/package.json web/package-lock.json
	cd web && npm ci --ignore-scripts --no-audit --no-fund

ttball/web/index.html: web/node_modules/.package-lock.json $(WEB_SRC)
	cd web && npm run build

install: $(STAMP) web

demo: install
	$(VENV)/bin/ttball track demo/rally.mp4 --device cpu --out out/demo --overlay
	$(VENV)/bin/ttball eval out/demo/track.csv demo/rally.csv

test: check
	$(PY) -m pytest -q

# the lint and type checks, also the first part of `make test` (what CI runs)
check: install
	$(PY) -m ruff check ttball tests
	$(PY) -m mypy

clean:
	rm -rf out build *.egg-info
