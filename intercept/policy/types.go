// Package policy is ApprovalPolicy and ClusterApprovalPolicy: their Go
// types, which policies apply to a writer, compiling their rules (CEL
// through k8s.io/apiserver's environment and cost limits, regular
// expressions) once per policy version, and matching a write against them.
// No I/O: the proxy's informers feed it objects, and the decision asks it
// whether a drift write matches.
package policy

import (
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and Version of the proxy's own API.
const (
	Group   = "kausality.io"
	Version = "v1alpha1"
)

// Kinds.
const (
	KindNamespaced = "ApprovalPolicy"
	KindCluster    = "ClusterApprovalPolicy"
)

// Resources of the two kinds.
var (
	ApprovalPoliciesGVR        = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "approvalpolicies"}
	ClusterApprovalPoliciesGVR = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "clusterapprovalpolicies"}
)

// Rule modes. A policy has no state to consume, so only Always approves;
// rules with the other modes of the approval annotation never match, and
// the policy's condition says so.
const (
	ModeAlways     = "always"
	ModeGeneration = "generation"
	ModeOnce       = "once"
)

// Wildcard matches every namespace or name.
const Wildcard = "*"

// ApprovalPolicy approves, in place of per-object kausality.io/approvals,
// the drift writes of one controller that match its rules. It lives in
// the controller's namespace and is named after its service account.
type ApprovalPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              Spec   `json:"spec"`
	Status            Status `json:"status,omitempty"`
}

// ClusterApprovalPolicy is an ApprovalPolicy for the controllers its spec
// names in serviceAccounts, wherever they run.
type ClusterApprovalPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ClusterSpec `json:"spec"`
	Status            Status      `json:"status,omitempty"`
}

// Spec is an ApprovalPolicy's spec.
type Spec struct {
	// Rules are tried in order; the first that matches approves.
	Rules []Rule `json:"rules"`
}

// ClusterSpec is a ClusterApprovalPolicy's spec: the rules, and the
// controllers they are for. A cluster policy names its controllers
// explicitly, so no policy ever approves for every writer.
type ClusterSpec struct {
	ServiceAccounts []ServiceAccountRef `json:"serviceAccounts"`
	Rules           []Rule              `json:"rules"`
}

// ServiceAccountRef names a controller's service account.
type ServiceAccountRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// Rule is one pattern of writes the policy approves.
type Rule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Namespace and Name of the written object: exact, or a glob ("*"
	// matches all, "*" and "?" as in path.Match); "" is "*". An
	// ApprovalPolicy's rules match in its own namespace only, whatever
	// their namespace says; one that names no other is Invalid.
	Namespace string   `json:"namespace,omitempty"`
	Name      string   `json:"name,omitempty"`
	Prereqs   *Prereqs `json:"prereqs,omitempty"`
	Match     *Match   `json:"match,omitempty"`
	Mode      string   `json:"mode"`
	// Expiry ends the rule (RFC 3339); the decision's clock decides.
	Expiry string `json:"expiry,omitempty"`
	// NewOrigins lets the rule also match writes by another actor than
	// the parent's controller. Those are allowed anyway; the match is only
	// recorded in the decision.
	NewOrigins bool `json:"newOrigins,omitempty"`
}

// Prereqs hold on the stored (old) object.
type Prereqs struct {
	CEL string `json:"cel"`
}

// Match holds on the new object; every condition given must hold.
type Match struct {
	CEL string `json:"cel,omitempty"`
	// Regexp must match the whole canonical JSON of the new object's
	// desired state (see DesiredJSON).
	Regexp string `json:"regexp,omitempty"`
}

// Status is written by the proxy.
type Status struct {
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ConditionReady is the one condition the proxy writes: True when every
// rule compiled, False (with the reasons below) when some rule never
// matches, a CEL evaluation exceeded the cost limit, or a write ran out of
// its evaluation budget in the policy.
const ConditionReady = "Ready"

// Condition reasons.
const (
	ReasonCompiled        = "Compiled"
	ReasonInvalid         = "Invalid"
	ReasonCostExceeded    = "CostExceeded"
	ReasonUnsupportedMode = "UnsupportedMode"
	// ReasonOutsideNamespace: a rule of an ApprovalPolicy names a
	// namespace other than the policy's.
	ReasonOutsideNamespace = "OutsideNamespace"
	// ReasonBudgetExceeded: a write spent its whole evaluation budget
	// (WriteBudget) before the policy's rules were all tried.
	ReasonBudgetExceeded = "BudgetExceeded"
)

// ServiceAccountOf splits "system:serviceaccount:NS:NAME"; ok is false for
// any other user.
func ServiceAccountOf(user string) (ServiceAccountRef, bool) {
	rest, found := strings.CutPrefix(user, "system:serviceaccount:")
	if !found {
		return ServiceAccountRef{}, false
	}
	ns, name, found := strings.Cut(rest, ":")
	if !found || ns == "" || name == "" || strings.Contains(name, ":") {
		return ServiceAccountRef{}, false
	}
	return ServiceAccountRef{Namespace: ns, Name: name}, true
}
