# gpucloud: one command runner. `make up` runs the platform, `make test` runs the tests.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

PYTHON ?= python3
UV_VERSION := 0.13.9
UV := $(PYTHON) -m uv
VENV := .venv
STACK := $(PYTHON) deploy/local/stack.py
PKGS := gpucloud_libs gpucloud_gateway gpucloud_instances gpucloud_storage gpucloud_metering gpucloud_monitoring gpucloud_agent gpucloud_stack gpucloud_client gpucloud_cli
export UV_PYTHON_DOWNLOADS := never

.PHONY: help up down status logs reset provision env venv test test-ceph lint fmt bench bench-quick screenshots

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

up: venv ## provision (first time), start the stack and the five services
	@$(STACK) up

down: ## stop everything; data is kept
	@$(STACK) down

status: ## health, pid and memory of every component
	@$(STACK) status

logs: ## show a component's log: make logs c=kafka [f=1]
	@$(STACK) logs $(c) $(if $(f),-f)

reset: ## stop everything and wipe the data directory
	@$(STACK) reset

provision: ## build or download the server binaries into the cache
	@$(STACK) provision

env: ## print shell exports for talking to the running stack
	@$(STACK) env

venv: $(VENV)/.synced ## create the virtual environment from uv.lock

$(VENV)/.synced: pyproject.toml uv.lock libs/pyproject.toml deploy/local/pyproject.toml agent/pyproject.toml cli/pyproject.toml $(wildcard services/*/pyproject.toml)
	@$(PYTHON) -m uv --version >/dev/null 2>&1 || $(PYTHON) -m pip install --quiet --disable-pip-version-check "uv==$(UV_VERSION)"
	@$(UV) sync --frozen --all-packages --python $(PYTHON) --quiet
	@touch $@

test: venv ## start the stack if needed, run the whole suite, check every bill of the run against its history, then the object-store contract on Ceph
	@$(STACK) up
	@since=$$(date -u +%FT%TZ); $(VENV)/bin/pytest $(PYTEST_ARGS) \
		&& $(VENV)/bin/python -m bench exactness --since $$since
	@$(MAKE) --no-print-directory test-ceph

# The object-store contract (tests marked object_store) against a stack whose object
# store is Ceph RGW, in its own data directory; the default stack stops first (ports).
CEPH := GPUCLOUD_OBJECT_STORE=ceph
# A cold Ceph that does not come up is stopped and started once more before giving up.
test-ceph: venv ## the object-store contract against Ceph RGW (stops the MinIO stack first)
	@$(STACK) down >/dev/null
	@( $(CEPH) $(STACK) up || { echo "Ceph did not come up; stopping it and trying once more"; \
		$(CEPH) $(STACK) down >/dev/null; $(CEPH) $(STACK) up; } ) \
		&& $(CEPH) $(VENV)/bin/pytest -m object_store $(PYTEST_ARGS); \
		status=$$?; $(CEPH) $(STACK) down; exit $$status

screenshots: venv ## the console's browser tests, saving each page's screenshot in docs/console/
	@$(STACK) up
	@GPUCLOUD_CONSOLE_SCREENSHOTS=docs/console $(VENV)/bin/pytest tests/e2e/test_console_browser.py $(PYTEST_ARGS)

lint: venv ## ruff, formatting, mypy (strict), the import-layering contracts and helm lint
	@$(VENV)/bin/ruff check .
	@$(VENV)/bin/ruff format --check .
	@$(VENV)/bin/mypy $(addprefix -p ,$(PKGS) tests bench)
	@$(VENV)/bin/lint-imports
	@"$$($(VENV)/bin/python -c 'from gpucloud_stack import provision; print(provision.ensure(provision.HELM, say=False) / "helm")')" \
		lint --strict --quiet deploy/helm/gpucloud --set identity.existingSecret=identity-keys,identity.publicKeys.gateway=key,identity.publicKeys.instances=key,kafka.admin.existingSecret=kafka-admin,ingress.tlsSecret=gpucloud-tls

fmt: venv ## apply ruff fixes and formatting
	@$(VENV)/bin/ruff check --fix .
	@$(VENV)/bin/ruff format .

bench: venv ## the start-path regression guard, then every benchmark, printing their figures
	@$(STACK) up
	@$(VENV)/bin/python -m bench instances --quick
	@$(VENV)/bin/python -m bench

bench-quick: venv ## only the start-path regression guard: ratios against their limits
	@$(STACK) up
	@$(VENV)/bin/python -m bench instances --quick
