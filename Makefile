# Everything the project needs is installed by these targets: a fresh machine needs only
# `make test` (or `make demo`, which needs only Python and Node.js). Nothing installed by hand
# is assumed.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
PYTEST_ARGS ?=
# Two workers, each taking whole test files: most wire tests wait on the SDK's link set-up
# or on a JVM's start, so two of them overlap well on 2 cores (13.6 -> 9.7 min).
# PYTEST_WORKERS= runs in one process.
PYTEST_WORKERS ?= -n 2 --dist loadfile
# A machine may set PYTHONDONTWRITEBYTECODE (CI images often do). Then every Python process the
# suite starts (each operator, consumer, local server and `ehb` command) compiles the project's
# modules again, and pytest rewrites the asserts of every test module at each collection (23 s
# against 9 s once compiled). The compiled files go to __pycache__/, which git and the images
# ignore.
unexport PYTHONDONTWRITEBYTECODE


.PHONY: controlplane
.PHONY: all install test chart-versions lint typecheck importlint pytest docs figures figures-balance figures-scale figures-real figures-faults figures-soak demo clean java-check node promtool-check

all: test

# Both distributions, editable: the product (with its test tools and PySpark) and the
# development stack beside it (the emulator, the local Kubernetes API, demo, chaos, benchmarks).
$(STAMP): pyproject.toml devstack/pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev,spark,otel]' -e ./devstack
	@touch $(STAMP)

# Azurite (the local Blob Storage) comes from npm into ./node_modules, pinned by package.json.
$(NODE_STAMP): package.json
	@command -v npm >/dev/null || { echo "npm is required for Azurite: install Node.js 18+ (e.g. apt-get install nodejs npm)"; exit 1; }
	npm install --no-audit --no-fund --loglevel=error
	@touch $(NODE_STAMP)

# PySpark needs a Java runtime (17 or newer). On a Debian machine where we are root, install one;
# elsewhere say what to install.
java-check:
	@if ! java -version >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing a Java runtime for PySpark"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq default-jre-headless >/dev/null; \
	  else \
	    echo "PySpark needs Java 17+: install a JRE (e.g. apt-get install default-jre-headless)"; exit 1; \
	  fi; \
	fi
	@major=$$(java -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1); \
	  if [ "$${major:-0}" -lt 17 ]; then echo "PySpark needs Java 17+, found $$major"; exit 1; fi

# promtool (from Debian's prometheus package) checks and unit-tests the alert rules of
# monitoring/prometheus/. On a Debian machine where we are root, install it; elsewhere say what.
promtool-check:
	@if ! command -v promtool >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing promtool (Debian's prometheus package) for the alert rules' tests"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	  else \
	    echo "the alert rules' tests need promtool: install Prometheus 2.x (e.g. apt-get install prometheus)"; exit 1; \
	  fi; \
	fi

# The real control plane (kube-apiserver, kube-controller-manager, etcd), built from source with
# Go into devstack/controlplane/bin/ once, and skipped while the pins in its go.mod/go.sum match:
# about 8 minutes cold on 2 cores, under a second warm (docs/local-stack.md).
controlplane:
	@command -v go >/dev/null || { echo "the real control plane is built with Go 1.26+: install Go"; exit 1; }
	devstack/controlplane/build.sh

# helm (the charts' lint, template and install tests; the docs' commands) and kstatus (Flux's
# readiness check, for the GitOps tests), built from their pinned Go modules of devstack/tools/
# into the venv's bin. The script skips a tool whose pins match: after the first build (about
# 2.5 minutes on 2 cores) this costs nothing.
.PHONY: go-tools
go-tools: $(STAMP)
	devstack/tools/build.sh $(BIN) helm kstatus

# A class-data archive of Spark's local driver, by the product's own `ehb spark archive`
# (tests/support/sparkarchive.py): every driver JVM the suite starts maps it, and starts in
# half the time and CPU (20 s of JVM CPU for a session and its first query, 10 s with it).
# Written once for the venv (one to two minutes, in two JVMs), again when the venv is
# installed again.
SPARK_ARCHIVE := $(VENV)/spark-classes.jsa
$(SPARK_ARCHIVE): $(STAMP) | java-check
	$(BIN)/ehb spark archive $@

install: $(STAMP) $(NODE_STAMP) java-check promtool-check controlplane go-tools $(SPARK_ARCHIVE)

# Both charts linted and rendered by the venv's helm into build/charts/, as `helm install` would
# apply them: the operator chart with its defaults and CRDs, the consumer chart with the example
# project's values. For a reader with no cluster (docs/install.md, "Without a cluster").
.PHONY: charts
charts: go-tools
	$(BIN)/helm lint --strict charts/eventhub-balancer
	$(BIN)/helm lint --strict charts/eventhub-consumer -f examples/orders/values.yaml \
	  --set consumer.eventHub.fullyQualifiedNamespace=shop.servicebus.windows.net
	@mkdir -p build/charts
	$(BIN)/helm template eventhub-balancer charts/eventhub-balancer \
	  --namespace eventhub-balancer-system --include-crds > build/charts/eventhub-balancer.yaml
	$(BIN)/helm template orders charts/eventhub-consumer --namespace shop \
	  -f examples/orders/values.yaml \
	  --set consumer.eventHub.fullyQualifiedNamespace=shop.servicebus.windows.net \
	  > build/charts/eventhub-consumer.yaml
	@echo "rendered into build/charts/: eventhub-balancer.yaml, eventhub-consumer.yaml"

node: $(NODE_STAMP)

lint: $(STAMP)
	$(BIN)/ruff check operator devstack tests examples
	$(BIN)/ruff format --check operator devstack tests examples
	$(BIN)/hadolint --no-color docker/*.Dockerfile examples/*/Dockerfile
	$(BIN)/check-jsonschema --builtin-schema vendor.github-workflows .github/workflows/*.yaml

# The example project is checked as its own project would be (its tests too).
typecheck: $(STAMP)
	$(BIN)/mypy
	cd examples/orders && $(abspath $(BIN))/mypy --strict orders tests

importlint: $(STAMP)
	$(BIN)/lint-imports

# pytest exits 5 when it collected nothing: that is a failure here, as any other non-zero code.
pytest: install
	$(BIN)/python -m pytest $(PYTEST_WORKERS) --durations=15 $(PYTEST_ARGS)

# The charts rendered by `helm template --kube-version 1.N.0` (the venv's helm, from go-tools) for
# every minor that their kubeVersion admits (up to the newest schema kubernetes-validate ships),
# each rendering validated against that minor's API (tests/support/kubeschemas.py parses each
# schema once: 131 s in one process before, 34 s now on two workers).
chart-versions: $(STAMP) go-tools
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_WORKERS) $(CHART_TESTS)

test: install lint typecheck importlint docs chart-versions pytest

# `make test` ran the chart tests in chart-versions already: its pytest leaves them out (about a
# minute of CPU). `make pytest` alone runs every test.
CHART_TESTS := tests/install/test_chart_kube_versions.py tests/install/test_consumer_chart.py
test: PYTEST_ARGS += $(addprefix --ignore=,$(CHART_TESTS))

# The manual (docs/, mkdocs-material) into site/. --strict: a broken link or a missing page
# fails the build (not --quiet: it hides the warnings that --strict counts). Its figures come
# from the benchmark records in docs/benchmarks/.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# Record the benchmarks' figures for the docs: each run's JSON, date and load average go to
# docs/benchmarks/NAME.json; then the README's figure blocks are rendered again.
RECORD := PATH="$(abspath $(BIN)):$$PATH" $(BIN)/ehb bench record
figures: install
	$(RECORD) planner -- ehb bench planner --json
	$(RECORD) operator -- ehb bench operator --json
	$(RECORD) checkpoints -- ehb bench checkpoints --json
	$(RECORD) emulator -- ehb bench emulator --json
	$(RECORD) consumer -- ehb bench consumer --json
	$(RECORD) --refresh README.md

# The scale series (docs/scale.md): the operator from 32 partitions to 1,024 x 512 pods, and 100
# to 1,000 consumers on one operator; a few minutes, and about 4 more for the 1,000.
figures-scale: install
	$(RECORD) scale-32x31 -- ehb bench operator --json --rounds 3 --partitions 32 --pods 31
	$(RECORD) scale-256x255 -- ehb bench operator --json --rounds 3 --partitions 256 --pods 255
	$(RECORD) scale-1024x128 -- ehb bench operator --json --rounds 3 --partitions 1024 --pods 128
	$(RECORD) scale-1024x512 -- ehb bench operator --json --rounds 3 --partitions 1024 --pods 512
	$(RECORD) scale-100x10x32 -- ehb bench operator --json --rounds 3 --consumers 100 --pods 10 --partitions 32
	$(RECORD) scale-300x4x8 -- ehb bench operator --json --rounds 1 --consumers 300 --pods 4 --partitions 8
	$(RECORD) scale-1000x4x8 -- ehb bench operator --json --rounds 1 --consumers 1000 --pods 4 --partitions 8 --interval 10
	$(RECORD) decide -- ehb bench decide --json

# The side-by-side run against the SDK's balancer takes about 8 minutes.
figures-balance: install
	$(RECORD) balance -- ehb bench balance --json
	$(RECORD) --refresh README.md

# The same benchmarks on the real control plane (`--kube real`; docs/benchmarks.md, "On the
# real control plane"): each record is real-NAME beside the local NAME; about 55 minutes.
figures-real: install
	$(RECORD) real-balance -- ehb bench balance --json --kube real
	$(RECORD) real-operator -- ehb bench operator --json --kube real
	$(RECORD) real-scale-1024x512 -- ehb bench operator --json --rounds 3 --partitions 1024 --pods 512 --kube real
	$(RECORD) real-scale-1000x4x8 -- ehb bench operator --json --consumers 1000 --pods 4 --partitions 8 --rounds 1 --interval 10 --kube real
	$(RECORD) real-shared-0 -- ehb bench operator --json --rounds 1 --consumers 1 --pods 4 --partitions 8 --interval 10 --kube real --other-pods 0
	$(RECORD) real-shared-0-selected -- ehb bench operator --json --rounds 1 --consumers 1 --pods 4 --partitions 8 --interval 10 --kube real --other-pods 0 --pod-selector app.kubernetes.io/part-of=eventhub-balancer
	$(RECORD) real-shared-5000 -- ehb bench operator --json --rounds 1 --consumers 1 --pods 4 --partitions 8 --interval 10 --kube real --other-pods 5000
	$(RECORD) real-shared-5000-selected -- ehb bench operator --json --rounds 1 --consumers 1 --pods 4 --partitions 8 --interval 10 --kube real --other-pods 5000 --pod-selector app.kubernetes.io/part-of=eventhub-balancer
	$(RECORD) real-demo -- ehb demo --json --kube real
	for seed in 1 2 3 4 5 6 7 8; do \
	  $(RECORD) real-chaos-seed$$seed -- ehb bench chaos --json --seconds 40 --seed $$seed --kube real || exit 1; \
	done
	$(RECORD) --refresh README.md

# Under faults on the local API, where the watch faults run too (docs/benchmarks.md): chaos
# with every fault kind over 8 seeds, and a deleted pod behind late watches; about 15 minutes.
figures-faults: install
	for seed in 1 2 3 4 5 6 7 8; do \
	  $(RECORD) chaos-seed$$seed -- ehb bench chaos --json --seconds 40 --seed $$seed || exit 1; \
	done
	$(RECORD) lag -- ehb bench lag --json --rounds 9
	$(RECORD) lag-pods -- ehb bench lag --json --rounds 9 --replicas 1 --kinds pods
	$(RECORD) --refresh README.md

# The soaks of docs/operations.md (a pod's and the operator's steady-state memory): one
# consumer under steady traffic for 10 minutes each, then the operator under 10 minutes of
# churn, about 50 minutes in all; the slopes want a quiet machine.
figures-soak: install
	$(RECORD) soak-plain-200 -- ehb bench soak --json --seconds 600 --rate 200 --partitions 4
	$(RECORD) soak-plain-1000 -- ehb bench soak --json --seconds 600 --rate 1000 --partitions 4
	$(RECORD) soak-spark-1000 -- ehb bench soak --json --seconds 600 --rate 1000 --partitions 4 --spark
	$(RECORD) soak-operator -- ehb bench soak --operator --json --seconds 600 --partitions 32 --pods 8

# The demo runs on the local Kubernetes API: it needs the venv and Azurite, not the real
# control plane, helm, Java or promtool (`ehb demo --kube real` needs `make controlplane`).
demo: $(STAMP) $(NODE_STAMP)
	$(BIN)/ehb demo

# The operator and consumer images, built from docker/'s Dockerfiles without a Docker daemon
# (docs/images.md): a Debian root filesystem from Debian's packages, the project's wheels, umoci.
# Needs root. The Debian layers are cached in .images/; IMAGES_ARGS=--refresh takes Debian's
# packages afresh, IMAGES_ARGS="consumer-connect orders-example" builds the other two.
.PHONY: images
IMAGES_ARGS ?=
images: $(STAMP)
	$(BIN)/python -m eventhub_balancer_devstack.images $(IMAGES_ARGS)
# make test builds them (warm, about a minute): tests/install/test_images.py inspects and runs them.
pytest: images

clean:
	rm -rf $(VENV) node_modules .pytest_cache .mypy_cache .ruff_cache .hypothesis site
