# Strata — every developer and CI entry point. `make demo` and `make test` work on a fresh
# machine: they build what they need (Rust workspace, control-plane components from Go modules)
# and cache it under $(STRATA_CACHE).
SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c

STRATA_CACHE ?= $(HOME)/.cache/strata
export CARGO_TARGET_DIR ?= $(STRATA_CACHE)/cargo-target
export STRATA_BIN_DIR := $(CARGO_TARGET_DIR)/debug
# Component versions of the local plane (the render tests use its helm binary).
include e2e/plane/versions.env
export HELM ?= $(STRATA_CACHE)/bin/helm-$(HELM_VERSION)/helm
# Two cores: one cargo job graph at a time, never parallel cargo invocations.
CARGO ?= cargo
# Development and test builds carry the test-only flags (`--pod-address-override`, a local
# stand-in for pods); release and image builds never do. Every build here uses the same set so
# cargo never rebuilds a service just for a different feature set.
TEST_FEATURES := --features admission-webhook/test-hooks,rollout-operator/test-hooks

.PHONY: all build demo demo-check test lint unit e2e chaos plane-build bench crds dashboards manifests images images-test dist fmt fuzz clean-plane help

all: build

help:
	@echo "make demo   start the local control plane, install Strata, take the guided tour"
	@echo "make demo-check   the same tour headless: exits non-zero at the first step that fails"
	@echo "make test   lint + unit tests + end-to-end tests on the local control plane"
	@echo "make lint | unit | e2e | chaos | bench | crds | dashboards | manifests | images | fmt"

build:
	$(CARGO) build --workspace --bins $(TEST_FEATURES)

plane-build:
	bash e2e/plane/build.sh >/dev/null

lint:
	$(CARGO) fmt --all --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings

# Unit, table and golden tests: everything except the end-to-end tier. The render golden tests
# run the real helm the plane build provides, and fail without one (STRATA_SKIP_HELM_TESTS=1
# skips them instead).
unit: plane-build
	$(CARGO) test --workspace --exclude strata-e2e $(TEST_FEATURES)

# End-to-end tests against one shared local control plane; then, on the same plane, the check
# that every verb the chart grants was used by some test (e2e/tests/rbac_coverage.rs reads the
# plane's audit log; `STRATA_UPDATE_DOCS=1 make e2e` rewrites the table in docs/security.md).
# Test binaries run E2E_PARALLEL at a time (scripts/run-e2e.sh; the load and fault scenarios
# alone afterwards): most of their time is spent waiting on the cluster.
E2E_PARALLEL ?= 3
# The plane has a real node (kubelet, containerd, kube-proxy): the images are built first
# (`image-test` profile, OCI archives) and, once the plane is up, started as containers on it
# (scripts/images.sh); the in-cluster tier (e2e/tests/in_cluster.rs) installs the chart from them.
e2e: build plane-build images-test
	$(CARGO) test -p strata-e2e --no-run
	scripts/with-plane.sh bash -c 'scripts/images.sh --profile image-test --run-only && scripts/run-e2e.sh $(E2E_PARALLEL) && $(CARGO) test -p strata-e2e --test rbac_coverage -- --ignored --nocapture'

# The images of the in-cluster tier: the same Containerfile and checks as `make images`, built
# with the cheaper `image-test` cargo profile; not started (that needs the plane's real node).
images-test: build plane-build
	scripts/images.sh --profile image-test --no-run

# The plane build (Go, mostly downloads on a fresh machine) runs beside lint's cargo build.
# The demo's in-cluster path last: the real node is one per machine, and the e2e plane holds
# it while the suite runs (e2e/tests/demo.rs checks the tour's fallback to host processes there).
test:
	$(MAKE) -j2 lint plane-build
	$(MAKE) unit e2e
	$(MAKE) demo-check DEMO_ARGS='--real-node required --port-base 28080'

# The fault-injection scenarios (docs/reliability.md) on one local control plane; they also run
# within `make test`'s end-to-end tier.
chaos: build plane-build
	$(CARGO) test -p strata-e2e --no-run
	scripts/with-plane.sh $(CARGO) test -p strata-e2e --test chaos --test plane_restart --test memory --test services --test webhook_robustness --test webhook --test layer_guarantees -- --test-threads=2

# The guided tour (e2e/src/demo.rs). `demo` keeps everything running until Ctrl-C;
# `demo-check` runs the same tour headless and exits non-zero at the first step whose outcome
# does not happen (`make test` runs it too, as e2e/tests/demo.rs).
DEMO_ARGS ?=
demo: build plane-build images-test
	@$(STRATA_BIN_DIR)/strata-plane demo --dir $(CARGO_TARGET_DIR)/strata-demo --bin-dir $(STRATA_BIN_DIR) $(DEMO_ARGS)

demo-check: build plane-build images-test
	@$(STRATA_BIN_DIR)/strata-plane demo --check --dir $(CARGO_TARGET_DIR)/strata-demo-check --bin-dir $(STRATA_BIN_DIR) $(DEMO_ARGS)

# Benchmarks; results are written to docs/benchmarks.md. The Go anchors are measured in the
# same run from binaries built by hand outside this repository and named by environment
# variables (ANCHOR_ROLLOUT_OPERATOR_BIN, ...; see bench/run.sh): the repository never builds
# them. Never part of `make test`.
bench:
	bench/run.sh

# Regenerates manifests/crds/ from the Rust CRD types; `make test` fails when it is stale.
crds:
	STRATA_UPDATE_CRDS=1 $(CARGO) test -p rollout-operator -p layer-controller --test crds

# Grafana dashboards and Prometheus alert rules (dashboards/*.json, alerts.yaml) from their
# generator; `cargo test -p strata-e2e --test metrics_catalog` checks them against the metrics.
dashboards:
	python3 dashboards/generate.py

fmt:
	$(CARGO) fmt --all

# Fuzz every decoding path for FUZZ_SECONDS each (needs a nightly toolchain; installs
# cargo-fuzz into the cache on first use). Seeds (fuzz/seeds/<target>, committed) start each
# run; what a run discovers stays in fuzz/corpus/<target> (not committed). Not part of
# `make test`. One target: `make fuzz FUZZ_TARGETS=review_pod_eviction`.
FUZZ_SECONDS ?= 30
FUZZ_TARGETS ?= review_no_downscale review_prepare_downscale review_pod_eviction \
  review_zpdb_validation review_addonslayer_validation zpdb_spec depends_on status_input \
  status_compact
fuzz:
	@command -v cargo-fuzz >/dev/null || test -x $(STRATA_CACHE)/cargo-fuzz/bin/cargo-fuzz || \
	  $(CARGO) install cargo-fuzz --locked --root $(STRATA_CACHE)/cargo-fuzz
	cd fuzz && for t in $(FUZZ_TARGETS); do \
	  mkdir -p corpus/$$t && seeds=$$(test -d seeds/$$t && echo seeds/$$t || true); \
	  PATH="$(STRATA_CACHE)/cargo-fuzz/bin:$$PATH" CARGO_TARGET_DIR=$(STRATA_CACHE)/fuzz-target \
	    cargo +nightly fuzz run --fuzz-dir . $$t corpus/$$t $$seeds -- -max_total_time=$(FUZZ_SECONDS) -len_control=0 || exit 1; \
	done

# Regenerates what comes from the chart: helm/strata's values table and values.schema.json,
# its copies of the CRDs and dashboards, and the plain manifests under manifests/<service>/.
# `make test` fails when any of them is stale.
manifests: plane-build
	STRATA_UPDATE_MANIFESTS=1 $(CARGO) test -p strata-e2e --test chart generated_files_are_current

# The CLI as a kubectl plugin for krew: dist/kubectl-strata_v<version>_linux_amd64.tar.gz and
# dist/strata.yaml (krew/strata.yaml with the archive's URL and SHA-256). DIST_URL: where the
# archive will be published.
dist:
	scripts/dist.sh

# Container images of the four services (podman; see scripts/images.sh), checked and started as
# containers on the local plane's real node. Not part of `make test` (a release build of four
# binaries); `make test` builds the same images with the `image-test` profile.
images: build plane-build
	scripts/with-plane.sh scripts/images.sh --profile image
