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

.PHONY: plugin
plugin: ## Build the kubectl plugin bin/kubectl-kausality (`kubectl kausality` once bin/ is on PATH).
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/kubectl-kausality ./cmd/kubectl-kausality

.PHONY: install-plugin
install-plugin: ## go install the kubectl plugin into $(go env GOBIN) (default ~/go/bin), which must be on PATH.
	CGO_ENABLED=0 $(GO) install -trimpath -ldflags '$(LDFLAGS)' ./cmd/kubectl-kausality
	@gobin=$$($(GO) env GOBIN); [ -n "$$gobin" ] || gobin=$$($(GO) env GOPATH)/bin; \
	echo "installed $$gobin/kubectl-kausality; with $$gobin on PATH, run: kubectl kausality --help"

.PHONY: testbin
testbin: ## Build etcd, kube-apiserver, kube-controller-manager and kubectl from pinned modules into bin/ (skipped when current).
	bash hack/testbin/build.sh $(BIN)

# The e2e suite runs kubectl kausality drifts in a real terminal (tmux);
# a fresh Debian machine has none. Without apt-get, the suite fails with
# the reason.
.PHONY: tmux
tmux: ## Install tmux from the distribution's packages when it is missing.
	@command -v tmux >/dev/null || { command -v apt-get >/dev/null && { apt-get update -qq && apt-get install -y -qq tmux; } || echo "tmux is missing and cannot be installed here: the e2e terminal UI tests will fail" >&2; }

.PHONY: test
test: testbin tmux ## Run all unit and integration tests against a real local control plane.
	KAUSALITY_TESTBIN=$(BIN) $(GO) test -count=1 -timeout $(TEST_TIMEOUT) $(GOTESTFLAGS) ./...

.PHONY: vet
vet: ## go vet everything, with and without the kind and hardening build tags.
	$(GO) vet ./...
	$(GO) vet -tags kind ./...
	$(GO) vet -tags hardening ./...

GOLANGCI_LINT := $(BIN)/golangci-lint

# golangci-lint is pinned as a Go tool in its own module (hack/tools), so
# that its dependencies never move the proxy's k8s.io versions.
$(GOLANGCI_LINT): hack/tools/go.mod hack/tools/go.sum
	cd hack/tools && GOWORK=off $(GO) build -o $(GOLANGCI_LINT) github.com/golangci/golangci-lint/v2/cmd/golangci-lint

.PHONY: lint
lint: $(GOLANGCI_LINT) ## Run golangci-lint (.golangci.yaml), with and without the kind and hardening build tags.
	$(GOLANGCI_LINT) run ./...
	$(GOLANGCI_LINT) run --build-tags kind ./...
	$(GOLANGCI_LINT) run --build-tags hardening ./...

.PHONY: fmt-check
fmt-check: ## Fail when a tracked Go file is not gofmt-formatted.
	@bad=$$(git ls-files '*.go' | xargs gofmt -l); \
	if [ -n "$$bad" ]; then echo "gofmt would change these files (run gofmt -w):"; echo "$$bad"; exit 1; fi

.PHONY: tidy-check
tidy-check: ## Fail when go.mod or go.sum (main or tools module) is not tidy.
	$(GO) mod tidy -diff
	cd hack/tools && GOWORK=off $(GO) mod tidy -diff
	cd hack/controller-gen && GOWORK=off $(GO) mod tidy -diff

# controller-gen is pinned as a Go tool in its own module (hack/controller-gen)
# for the same reason: it needs newer k8s.io modules than the proxy uses.
CONTROLLER_GEN := $(CURDIR)/.tmp/controller-gen

$(CONTROLLER_GEN): hack/controller-gen/go.mod hack/controller-gen/go.sum
	cd hack/controller-gen && GOWORK=off $(GO) build -o $(CONTROLLER_GEN) sigs.k8s.io/controller-tools/cmd/controller-gen

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate the deep copies of the api/ types (their CRDs are checked against them by api/v1alpha1's tests).
	$(CONTROLLER_GEN) object paths=./api/...

.PHONY: generate-check
generate-check: generate ## Fail when make generate changes or adds a file under api/.
	@stale=$$(git status --porcelain -- api/); \
	if [ -n "$$stale" ]; then echo "generated files are stale or not committed (run make generate):"; echo "$$stale"; exit 1; fi

.PHONY: verify
verify: fmt-check vet tidy-check generate-check lint ## Everything CI checks before the tests: gofmt, go vet, go mod tidy, generated files, golangci-lint.

.PHONY: run
run: testbin ## Run the proxy against an embedded local control plane (or ARGS=--upstream-kubeconfig=FILE).
	KAUSALITY_TESTBIN=$(BIN) $(GO) run ./internal/devserver $(ARGS)

# ---- Deployment artifacts: image, manifests, kind ----

# IMG is the image docker-build builds. (e2e-kind builds and loads its own,
# kausality-proxy:e2e: see e2e/framework/kind.go.)
IMG          ?= kausality-proxy:dev
KIND_CLUSTER ?= kausality-e2e

.PHONY: docker-build
docker-build: ## Build the container image $(IMG) from the Dockerfile (needs Docker with BuildKit).
	docker build -t $(IMG) .

.PHONY: manifests
manifests: testbin ## Print the default install (manifests/, rendered by kubectl's built-in kustomize).
	@$(BIN)/kubectl kustomize manifests/

# Each target runs for a fixed number of executions, about 30s on a 2-core
# machine. A count, not a duration: with `-fuzztime <duration>`, Go's fuzz
# coordinator can report its own deadline as a failure ("context deadline
# exceeded") when the timer fires while a worker is busy, which fails a run
# that found nothing. FUZZTIME=<duration or Nx> overrides every budget, for
# longer local runs.
FUZZ_TARGETS := \
	./intercept/body:FuzzDecode:140000x \
	./intercept/patch:FuzzApply:90000x \
	./intercept/annotations:FuzzParseAnnotations:1600000x \
	./intercept/trace:FuzzExtend:500000x \
	./intercept:FuzzClassify:90000x

.PHONY: fuzz
fuzz: ## Run every fuzz target for its execution budget (about 30s each; FUZZTIME overrides); crashers land in the package's testdata/fuzz.
	@for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; rest=$${t#*:}; name=$${rest%%:*}; budget=$${rest#*:}; \
		budget=$(if $(FUZZTIME),$(FUZZTIME),$$budget); \
		echo "fuzz $$pkg $$name ($$budget)"; \
		$(GO) test -run '^$$' -fuzz "^$$name$$" -fuzztime $$budget $$pkg || exit 1; \
	done

# Hardening: the fuzz targets, then the load, fault and slow-client suites
# (e2e/hardening, build tag hardening: `make test` does not run them) against
# two replicas of the real binary on a local control plane; writes
# docs/reliability.md from what they measured (its "Issues found and fixed"
# section is kept as written).
HARDENING_DIR := $(BIN)/hardening

.PHONY: test-hardening
test-hardening: testbin ## Fuzz, then load, faults and slow clients against two proxy replicas; writes docs/reliability.md.
	@mkdir -p $(HARDENING_DIR)
	$(MAKE) --no-print-directory fuzz > $(HARDENING_DIR)/fuzz.txt 2>&1 || { cat $(HARDENING_DIR)/fuzz.txt; exit 1; }
	@grep -E '^fuzz ' $(HARDENING_DIR)/fuzz.txt
	@rm -f $(HARDENING_DIR)/figures.json
	KAUSALITY_TESTBIN=$(BIN) KAUSALITY_HARDENING_FIGURES=$(HARDENING_DIR)/figures.json \
		$(GO) test -tags hardening -count=1 -timeout 40m $(GOTESTFLAGS) ./e2e/hardening/
	$(GO) run ./internal/reliability/cmd/reliabilitydoc -figures $(HARDENING_DIR)/figures.json -fuzz $(HARDENING_DIR)/fuzz.txt -out docs/reliability.md

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
	$(MAKE) testbin
	@# The kind provider (e2e/framework/kind.go) builds the images itself
	@# (kausality-proxy:e2e from the Dockerfile, and the DriftReport sink),
	@# creates the kind cluster $(KIND_CLUSTER), loads the images, applies
	@# manifests/overlays/kind-e2e, repoints the cluster's
	@# kube-controller-manager at the proxy, runs the shared scenarios and
	@# deletes the cluster (KAUSALITY_KIND_KEEP=1 keeps it).
	KIND_CLUSTER=$(KIND_CLUSTER) KAUSALITY_TESTBIN=$(BIN) $(GO) test -tags kind ./e2e/ -count=1 -timeout 60m $(GOTESTFLAGS)

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

# The scale profile: 10,000 parents and 100,000 children on the real control
# plane, what the proxy holds and spends for them; minutes to create, so CI
# does not run it. A smaller SCALE (parents) makes a quick run; SCALE_RUNS=2
# runs it twice, each on a fresh control plane, to show the spread.
SCALE ?= 10000
SCALE_RUNS ?= 1

.PHONY: bench-scale
bench-scale: testbin ## Measure memory and CPU per object the proxy does not decide about, at SCALE parents (10x children); writes docs/scale.md.
	@mkdir -p $(BENCH_DIR)
	$(GO) build -o $(BENCH_DIR)/kausality-bench ./internal/bench
	KAUSALITY_TESTBIN=$(BIN) $(BENCH_DIR)/kausality-bench -scale $(SCALE) -runs $(SCALE_RUNS) -out docs/scale.md -command 'make bench-scale SCALE=$(SCALE) SCALE_RUNS=$(SCALE_RUNS)' $(BENCH_ARGS)

.PHONY: bench-compare
bench-compare: ## Compare fresh micro-benchmarks with internal/bench/baseline.txt (benchstat).
	@mkdir -p $(BENCH_DIR)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCH_TIME) -count $(BENCH_COMPARE_COUNT) $(BENCH_PKGS) > $(BENCH_DIR)/micro-new.txt || { cat $(BENCH_DIR)/micro-new.txt; exit 1; }
	$(GO) run $(BENCHSTAT) $(BENCH_BASELINE) $(BENCH_DIR)/micro-new.txt
