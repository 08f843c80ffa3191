package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// Kinds of the policies.
const (
	ApprovalPolicyKind        = "ApprovalPolicy"
	ClusterApprovalPolicyKind = "ClusterApprovalPolicy"
)

// Modes of an approval rule. A policy has no state to consume, so only Always approves;
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
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced
type ApprovalPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ApprovalPolicySpec   `json:"spec"`
	Status            ApprovalPolicyStatus `json:"status,omitempty"`
}

// ClusterApprovalPolicy is an ApprovalPolicy for the controllers its spec
// names in serviceAccounts, wherever they run.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster
type ClusterApprovalPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ClusterApprovalPolicySpec `json:"spec"`
	Status            ApprovalPolicyStatus      `json:"status,omitempty"`
}

// ApprovalPolicySpec is an ApprovalPolicy's spec.
type ApprovalPolicySpec struct {
	// Rules are tried in order; the first that matches approves.
	Rules []ApprovalRule `json:"rules"`
}

// ClusterApprovalPolicySpec is a ClusterApprovalPolicy's spec: the rules, and the
// controllers they are for. A cluster policy names its controllers
// explicitly, so no policy ever approves for every writer.
type ClusterApprovalPolicySpec struct {
	ServiceAccounts []ServiceAccountRef `json:"serviceAccounts"`
	Rules           []ApprovalRule      `json:"rules"`
}

// ServiceAccountRef names a controller's service account.
type ServiceAccountRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// ApprovalRule is one pattern of writes the policy approves.
type ApprovalRule struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Namespace and Name of the written object: exact, or a glob ("*"
	// matches all, "*" and "?" as in path.Match); "" is "*". An
	// ApprovalPolicy's rules match in its own namespace only, whatever
	// their namespace says; one that names no other is Invalid.
	Namespace string       `json:"namespace,omitempty"`
	Name      string       `json:"name,omitempty"`
	Prereqs   *RulePrereqs `json:"prereqs,omitempty"`
	Match     *RuleMatch   `json:"match,omitempty"`
	Mode      string       `json:"mode"`
	// Expiry ends the rule (RFC 3339); the decision's clock decides.
	Expiry string `json:"expiry,omitempty"`
	// NewOrigins lets the rule also match writes by another actor than
	// the parent's controller. Those are allowed anyway; the match is only
	// recorded in the decision.
	NewOrigins bool `json:"newOrigins,omitempty"`
}

// RulePrereqs hold on the stored (old) object.
type RulePrereqs struct {
	CEL string `json:"cel"`
}

// RuleMatch holds on the new object; every condition given must hold.
type RuleMatch struct {
	CEL string `json:"cel,omitempty"`
	// Regexp must match the whole canonical JSON of the new object's
	// desired state (the policy package's DesiredJSON).
	Regexp string `json:"regexp,omitempty"`
}

// ApprovalPolicyStatus is written by the proxy.
type ApprovalPolicyStatus struct {
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

// ApprovalPolicyList is a list of ApprovalPolicies.
//
// +kubebuilder:object:root=true
type ApprovalPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ApprovalPolicy `json:"items"`
}

// ClusterApprovalPolicyList is a list of ClusterApprovalPolicies.
//
// +kubebuilder:object:root=true
type ClusterApprovalPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ClusterApprovalPolicy `json:"items"`
}
