package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and Version of the proxy's own API.
const (
	Group   = "kausality.io"
	Version = "v1alpha1"
)

// GroupVersion is kausality.io/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: Group, Version: Version}

// Resources of the policy kinds.
var (
	ApprovalPoliciesGVR        = GroupVersion.WithResource("approvalpolicies")
	ClusterApprovalPoliciesGVR = GroupVersion.WithResource("clusterapprovalpolicies")
)

var schemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

// AddToScheme registers the kausality.io/v1alpha1 kinds that are stored in
// kube-apiserver. DriftReport is not among them: it is only ever POSTed.
var AddToScheme = schemeBuilder.AddToScheme

func addKnownTypes(scheme *runtime.Scheme) error {
	metav1.AddToGroupVersion(scheme, GroupVersion)
	scheme.AddKnownTypes(GroupVersion,
		&ApprovalPolicy{}, &ApprovalPolicyList{},
		&ClusterApprovalPolicy{}, &ClusterApprovalPolicyList{},
	)
	return nil
}
