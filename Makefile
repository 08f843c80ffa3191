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
	@grep -E '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-14s %s\n", $$1, $$2}'

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
