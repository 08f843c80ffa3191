// Package v1alpha1 holds the types users write or receive: ApprovalPolicy
// and ClusterApprovalPolicy (CRDs the proxy reads), and the DriftReport the
// proxy POSTs to drift webhooks. It is the single source of their shape:
// the CRDs in manifests/base/crds are checked against these types by
// crd_test.go, and the deep copies are generated (make generate).
//
// The package may hold more than one API group: each group keeps its own
// GroupVersion and registration file (register.go is kausality.io). Only
// types, constants and their registration live here; no behaviour.
//
// +kubebuilder:object:generate=true
package v1alpha1
