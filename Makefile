# kausality-proxy. Run `make help` for the targets.

GO        ?= go
BIN       := $(CURDIR)/bin
GOTESTFLAGS ?=
TEST_TIMEOUT ?= 60m
# ARGS are passed to the proxy by `make run`, e.g. ARGS=--upstream-kubeconfig=$$HOME/.kube/config
ARGS      ?=
LDFLAGS   := -s -w

.PHONY: help
help: ## Show this help.
	@grep -E '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-14s %s\n", $$1, $$2}'

.PHONY: build
build: ## Build bin/kausality-proxy (static).
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/kausality-proxy ./cmd/kausality-proxy

.PHONY: testbin
testbin: ## Build etcd, kube-apiserver, kube-controller-manager and kubectl from pinned modules into bin/ (skipped when current).
	bash hack/testbin/build.sh $(BIN)

.PHONY: test
test: testbin ## Run all unit and integration tests against a real local control plane.
	KAUSALITY_TESTBIN=$(BIN) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(GOTESTFLAGS) ./...

.PHONY: vet
vet: ## go vet everything.
	$(GO) vet ./...

.PHONY: run
run: testbin ## Run the proxy against an embedded local control plane (or ARGS=--upstream-kubeconfig=FILE).
	KAUSALITY_TESTBIN=$(BIN) $(GO) run ./internal/devserver $(ARGS)

# ---- Deployment artifacts: image, manifests, kind ----

# IMG is the image docker-build builds and e2e-kind loads into kind.
IMG          ?= kausality-proxy:dev
KIND_CLUSTER ?= kausality-e2e

.PHONY: docker-build
docker-build: ## Build the container image $(IMG) from the Dockerfile (needs Docker with BuildKit).
	docker build -t $(IMG) .

.PHONY: manifests
manifests: testbin ## Print the default install (manifests/, rendered by kubectl's built-in kustomize).
	@$(BIN)/kubectl kustomize manifests/

.PHONY: test-deploy
test-deploy: testbin ## Test the deployment artifacts only: manifests (server dry-run, RBAC sufficiency), kubeconfig and certs subcommands, static binary.
	KAUSALITY_TESTBIN=$(BIN) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(GOTESTFLAGS) ./internal/deploytest/ ./cmd/kausality-proxy/

.PHONY: e2e-kind
e2e-kind: ## Run the e2e scenarios on a kind cluster (needs Docker; fails, saying why, without it).
	@if ! command -v docker >/dev/null 2>&1; then \
	  echo "e2e-kind: FAILED: the docker CLI is not installed. The kind provider needs Docker; nothing was run. (CI runs the local provider: make test.)" >&2; \
	  exit 1; \
	fi
	@if ! docker info >/dev/null 2>&1; then \
	  echo "e2e-kind: FAILED: Docker is not available: 'docker info' cannot reach a daemon ($${DOCKER_HOST:-unix:///var/run/docker.sock}). The kind provider needs Docker; nothing was run. (CI runs the local provider: make test.)" >&2; \
	  exit 1; \
	fi
	$(MAKE) docker-build IMG=$(IMG)
	@echo "e2e-kind: FAILED: the image $(IMG) was built, but the kind provider of e2e/ is not wired in yet. It will create the kind cluster $(KIND_CLUSTER) with the sigs.k8s.io/kind Go library, load $(IMG) into it, apply manifests/ with that image, repoint an in-cluster controller at the proxy (manifests/examples/repoint-controller), and run the e2e/ scenarios against that cluster." >&2
	@exit 1

# Benchmarks (internal/bench). `make bench` runs the Go micro-benchmarks,
# then the end-to-end suite (direct vs bare reverse proxy vs kausality-proxy,
# interleaved, on a local control plane) and writes docs/performance.md from
# what it measured. `make bench-compare` compares fresh micro-benchmarks with
# internal/bench/baseline.txt; to record a new baseline, run it and copy
# $(BIN)/bench/micro-new.txt over the baseline.
BENCH_PKGS      ?= ./authn ./intercept ./intercept/body ./intercept/patch ./intercept/decision ./intercept/trace ./intercept/desired
BENCH_TIME      ?= 300ms
BENCH_COUNT     ?= 1
BENCH_COMPARE_COUNT ?= 6
BENCH_ARGS      ?=
BENCH_DIR       := $(BIN)/bench
BENCH_BASELINE  := internal/bench/baseline.txt
BENCHSTAT       := golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da

.PHONY: bench
bench: testbin ## Benchmark the proxy against direct and a bare reverse proxy; writes docs/performance.md.
	@mkdir -p $(BENCH_DIR)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCH_TIME) -count $(BENCH_COUNT) $(BENCH_PKGS) > $(BENCH_DIR)/micro.txt || { cat $(BENCH_DIR)/micro.txt; exit 1; }
	@grep -E '^(pkg:|Benchmark)' $(BENCH_DIR)/micro.txt
	$(GO) build -o $(BENCH_DIR)/kausality-bench ./internal/bench
	KAUSALITY_TESTBIN=$(BIN) $(BENCH_DIR)/kausality-bench -micro $(BENCH_DIR)/micro.txt -out docs/performance.md -command 'make bench' $(BENCH_ARGS)

.PHONY: bench-compare
bench-compare: ## Compare fresh micro-benchmarks with internal/bench/baseline.txt (benchstat).
	@mkdir -p $(BENCH_DIR)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCH_TIME) -count $(BENCH_COMPARE_COUNT) $(BENCH_PKGS) > $(BENCH_DIR)/micro-new.txt || { cat $(BENCH_DIR)/micro-new.txt; exit 1; }
	$(GO) run $(BENCHSTAT) $(BENCH_BASELINE) $(BENCH_DIR)/micro-new.txt
