// Package deploytest tests the deployment artifacts against a real local
// control plane (internal/testenv): the kustomize manifests in manifests/
// (server-side dry runs of every entry point, RBAC that is exactly as broad
// as listed and sufficient to run the proxy with kube-controller-manager
// through it), the `kausality-proxy kubeconfig` and `certs` subcommands,
// and the Dockerfile's build flags (the binary they produce is static).
//
// It has no code of its own; everything is in the _test.go files. Run it
// with `make test-deploy` (or `make test`).
package deploytest
