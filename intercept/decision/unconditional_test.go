package decision

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestUpdateNeedsResourceVersion(t *testing.T) {
	for _, tc := range []struct {
		gr                           schema.GroupResource
		ofStatus, custom, withStatus bool
		want                         bool
	}{
		{schema.GroupResource{Group: "example.com", Resource: "widgets"}, false, true, true, true},
		{schema.GroupResource{Group: "example.com", Resource: "widgets"}, true, true, true, true},
		// A custom resource without a status subresource: its /status
		// is kube-apiserver's 404.
		{schema.GroupResource{Group: "example.com", Resource: "gadgets"}, false, true, false, true},
		{schema.GroupResource{Group: "example.com", Resource: "gadgets"}, true, true, false, false},
		{schema.GroupResource{Group: "policy", Resource: "poddisruptionbudgets"}, false, false, false, true},
		{schema.GroupResource{Group: "policy", Resource: "poddisruptionbudgets"}, true, false, false, true},
		{schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, false, false, false, true},
		{schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}, true, false, false, false},
		{schema.GroupResource{Group: "storage.k8s.io", Resource: "csistoragecapacities"}, false, false, false, true},
		{schema.GroupResource{Group: "apiextensions.k8s.io", Resource: "customresourcedefinitions"}, false, false, false, true},
		// The built-in kinds controllers mostly write allow it.
		{schema.GroupResource{Group: "apps", Resource: "deployments"}, false, false, false, false},
		{schema.GroupResource{Group: "apps", Resource: "deployments"}, true, false, false, false},
		{schema.GroupResource{Group: "apps", Resource: "replicasets"}, false, false, false, false},
		{schema.GroupResource{Resource: "configmaps"}, false, false, false, false},
		{schema.GroupResource{Resource: "pods"}, false, false, false, false},
		// An aggregated API server's resource: not known to refuse.
		{schema.GroupResource{Group: "metrics.k8s.io", Resource: "pods"}, false, false, false, false},
	} {
		if got := UpdateNeedsResourceVersion(tc.gr, tc.ofStatus, tc.custom, tc.withStatus); got != tc.want {
			t.Errorf("UpdateNeedsResourceVersion(%s, status %v, custom %v with status %v) = %v, want %v", tc.gr, tc.ofStatus, tc.custom, tc.withStatus, got, tc.want)
		}
	}
}
