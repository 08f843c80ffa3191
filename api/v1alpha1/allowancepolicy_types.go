package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// AllowancePolicy lives in its own group, kausal.io, the name the Kausal
// design gives it; the other types of this package are kausality.io's. A
// generator run over this package therefore needs the group given per
// type, not per package.
const (
	AllowanceGroup      = "kausal.io"
	AllowancePolicyKind = "AllowancePolicy"
)

// AllowancePolicyGroupVersion is the group and version of AllowancePolicy.
var AllowancePolicyGroupVersion = schema.GroupVersion{Group: AllowanceGroup, Version: "v1alpha1"}

// AllowancePoliciesGVR is the resource of AllowancePolicy.
var AllowancePoliciesGVR = AllowancePolicyGroupVersion.WithResource("allowancepolicies")

// Subject kinds, as in RBAC.
const (
	SubjectUser           = "User"
	SubjectGroup          = "Group"
	SubjectServiceAccount = "ServiceAccount"
)

// RelationChild is the one relation: the allowed object is a child of the
// policy's object, found through its controller ownerReference.
const RelationChild = "Child"

// Mutations that are operations rather than field paths.
const (
	MutationCreate = "create"
	MutationDelete = "delete"
)

// AllowancePolicy maps changes of a parent's fields to the mutations its
// controller may then make to its children, and names who may start such a
// change and which controllers may carry it out.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=kausality
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Kind",type=string,JSONPath=`.spec.match.kind`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type AllowancePolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec AllowancePolicySpec `json:"spec"`
	// +optional
	Status AllowancePolicyStatus `json:"status,omitempty"`
}

// AllowancePolicySpec is when the policy applies, who it applies to, and
// what it allows.
type AllowancePolicySpec struct {
	Match AllowanceMatch `json:"match"`
	// Subjects may trigger the policy: those with mayInitiate start a new
	// chain of allowances with their change of the parent; the others only
	// carry out or pass on allowances that already exist.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Subjects []AllowanceSubject `json:"subjects"`
	// Allow lists the child mutations a matching change permits.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	Allow []AllowedMutation `json:"allow"`
}

// AllowanceMatch says which changes of which parents the policy applies to.
type AllowanceMatch struct {
	// Kind of the parent, e.g. Deployment.
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// Group is the API group of the parent kind: apps for a Deployment,
	// "" for the core group. Unset, the kind matches in every group, so a
	// custom resource named like a built-in kind matches too.
	// +optional
	Group *string `json:"group,omitempty"`
	// Fields whose change triggers the policy: paths of the desired state
	// such as spec.replicas or spec.template.spec.containers[*].image;
	// [*] matches any index, a path matches every field below it.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Fields []string `json:"fields"`
	// CEL conditions on object (the new parent) and oldObject (the stored
	// one, null on create); all must hold.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	CEL []string `json:"cel,omitempty"`
	// Capture names fields of the new parent whose values are recorded in
	// the trace as attestations, e.g. metadata.annotations[jira].
	// +optional
	// +kubebuilder:validation:MaxItems=16
	Capture []string `json:"capture,omitempty"`
}

// AllowanceSubject is a user, group or service account, as in RBAC.
type AllowanceSubject struct {
	// +kubebuilder:validation:Enum=User;Group;ServiceAccount
	Kind string `json:"kind"`
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Namespace of a ServiceAccount; empty for the other kinds.
	// +optional
	Namespace string `json:"namespace,omitempty"`
	// MayInitiate lets the subject start a new chain of allowances.
	// +optional
	MayInitiate bool `json:"mayInitiate,omitempty"`
}

// AllowedMutation is what the parent's controller may do to children of
// one kind.
type AllowedMutation struct {
	// Kind of the child, e.g. ReplicaSet.
	// +kubebuilder:validation:MinLength=1
	Kind string `json:"kind"`
	// Group is the API group of the child kind: apps for a ReplicaSet,
	// "" for the core group (a Pod). Unset, the kind matches in every
	// group.
	// +optional
	Group *string `json:"group,omitempty"`
	// Relation of the child to the parent; Child (by controller
	// ownerReference) is the only one.
	// +kubebuilder:validation:Enum=Child
	// +kubebuilder:default=Child
	// +optional
	Relation string `json:"relation,omitempty"`
	// Mutations: field paths of the child's desired state the controller
	// may change ([*] wildcards allowed, a path covers every field below
	// it), create, or delete.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Mutations []string `json:"mutations"`
}

// AllowancePolicyStatus is written by the proxy.
type AllowancePolicyStatus struct {
	// Conditions: Ready is True when the policy compiled, False with the
	// reason when it never applies.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// AllowancePolicyList is a list of AllowancePolicies.
//
// +kubebuilder:object:root=true
type AllowancePolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []AllowancePolicy `json:"items"`
}
