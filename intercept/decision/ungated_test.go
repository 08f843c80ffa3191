package decision

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestUngatedBy(t *testing.T) {
	pod := schema.GroupKind{Kind: "Pod"}
	secret := schema.GroupKind{Kind: "Secret"}
	certificate := schema.GroupKind{Group: "cert-manager.io", Kind: "Certificate"}
	kinds := []UngatedKind{{Child: pod}, {Child: secret, Parent: certificate}}
	for _, tc := range []struct {
		name          string
		child, parent schema.GroupKind
		want          string
	}{
		{"a kind ungated under every parent", pod, schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}, "Pod"},
		{"a kind ungated under its parent's kind", secret, certificate, "Secret under Certificate.cert-manager.io"},
		{"the same kind under another parent", secret, schema.GroupKind{Group: "apps", Kind: "Deployment"}, ""},
		{"the parent's kind in another group", secret, schema.GroupKind{Group: "example.com", Kind: "Certificate"}, ""},
		{"a kind not listed", schema.GroupKind{Kind: "ConfigMap"}, certificate, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			k, ok := UngatedBy(kinds, tc.child, tc.parent)
			got := ""
			if ok {
				got = k.String()
			}
			if got != tc.want {
				t.Errorf("UngatedBy(%s under %s) = %q, want %q", tc.child, tc.parent, got, tc.want)
			}
		})
	}
}

func TestGroupKindOf(t *testing.T) {
	for _, tc := range []struct {
		apiVersion, kind string
		want             schema.GroupKind
	}{
		{"v1", "Secret", schema.GroupKind{Kind: "Secret"}},
		{"apps/v1", "Deployment", schema.GroupKind{Group: "apps", Kind: "Deployment"}},
		{"cert-manager.io/v1", "Certificate", schema.GroupKind{Group: "cert-manager.io", Kind: "Certificate"}},
	} {
		if got := GroupKindOf(tc.apiVersion, tc.kind); got != tc.want {
			t.Errorf("GroupKindOf(%s, %s) = %v, want %v", tc.apiVersion, tc.kind, got, tc.want)
		}
	}
}
