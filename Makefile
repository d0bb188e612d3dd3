# GPU Steward. `make test` and `make demo` do all set-up on a fresh machine (as root for apt).
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: test demo demo-fast bench lint typecheck rules-check unit prometheus-bin victoria-metrics-bin chromium-bin deps clean manifests dashboards protos wrk-bin gpu-check

$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip "setuptools>=68"
	$(PY) -m pip install -q -r requirements.lock
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $(STAMP)

deps: $(STAMP) prometheus-bin victoria-metrics-bin

# Debian's prometheus brings prometheus and promtool; alertmanager for amtool checks.
prometheus-bin:
	@if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then \
	  echo "installing Debian's prometheus"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus prometheus-alertmanager >/dev/null; \
	fi

# Debian's victoria-metrics brings victoria-metrics (single-node) and vmalert: the portability test
# (tests/rules/test_victoriametrics.py) runs the rules under vmalert on its own ports. Where systemd runs,
# the package also enables its own service on :8428, which the tests do not use.
victoria-metrics-bin:
	@if ! command -v victoria-metrics >/dev/null || ! command -v vmalert >/dev/null; then \
	  echo "installing Debian's victoria-metrics"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends victoria-metrics >/dev/null; \
	fi

# Debian's chromium: the backtest's HTML report is opened headless over the DevTools protocol
# (tests/automator/backtest/test_html.py, tests/browser.py); no WebDriver is used.
chromium-bin:
	@if ! command -v chromium >/dev/null; then \
	  echo "installing Debian's chromium"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null; \
	fi

# ruff, then the import contracts of pyproject.toml (layers; client libraries only in the adapters).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

typecheck: $(STAMP)
	$(VENV)/bin/mypy

rules-check: prometheus-bin
	promtool check rules --lint=all rules/*.yaml alerts/*.yaml

# The fast tests; tests marked `integration` start real processes (prometheus, the exporter, the service).
unit: deps
	$(VENV)/bin/pytest -q -m "not integration" -n auto

test: deps chromium-bin lint typecheck rules-check
	$(VENV)/bin/pytest -q

# The closed loop on a fake cluster (docs/demo.md); demo-fast divides time by 10 and exits when the story is told.
demo: deps
	$(PY) deploy/demo/run_demo.py

demo-fast: deps
	$(PY) deploy/demo/run_demo.py --fast

# Regenerate dashboards/json/*.json and their ConfigMaps in deploy/dashboards/ (docs/dashboards.md).
dashboards: $(STAMP)
	$(PY) -m dashboards.generate

# Regenerate the generated manifests: the PrometheusRule and the no-operator rule/scrape ConfigMap (docs/install.md).
manifests: $(STAMP)
	$(PY) deploy/prometheusrule/generate.py
	$(PY) deploy/components/no-operator/generate.py

# wrk (Debian's package) drives the KEDA endpoint benchmark.
wrk-bin:
	@command -v wrk >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends wrk >/dev/null; }

# Regenerate the KEDA external scaler's Python code from its proto (grpcio-tools, pinned in requirements.lock).
protos: $(STAMP)
	$(PY) -m grpc_tools.protoc -I. --python_out=. --grpc_python_out=. automator/keda/externalscaler/externalscaler.proto

# The real-GPU check of the NVML source (docs/exporter.md, "Verified on real hardware"): report to $OUT,
# else build/gpu-check. Without a GPU it says so and exits 0. It installs nothing (a GPU machine may be
# offline): the venv's Python where there is one, else python3 with the packages it has.
gpu-check:
	$(if $(wildcard $(PY)),$(PY),python3) -m tools.gpucheck

bench: deps wrk-bin
	$(PY) -m tests.bench.run_all

clean:
	rm -rf $(VENV) .demo .demo-fast .bench .mypy_cache .ruff_cache .pytest_cache
