package desired

import (
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestCRDSpecReplicasPath(t *testing.T) {
	crd := func(versions ...interface{}) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]interface{}{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]interface{}{"name": "sprockets.example.com"},
			"spec":     map[string]interface{}{"versions": versions},
		}}
	}
	version := func(name string, scale map[string]interface{}) map[string]interface{} {
		v := map[string]interface{}{"name": name, "served": true}
		if scale != nil {
			v["subresources"] = map[string]interface{}{"scale": scale}
		}
		return v
	}
	cases := []struct {
		name     string
		crd      *unstructured.Unstructured
		version  string
		path     string
		scalable bool
		wantErr  bool
	}{
		{name: "the version's own path", crd: crd(version("v1", map[string]interface{}{"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"})), version: "v1", path: ".spec.size", scalable: true},
		{name: "versions differ: the request's version counts",
			crd:     crd(version("v1", map[string]interface{}{"specReplicasPath": ".spec.replicas"}), version("v2", map[string]interface{}{"specReplicasPath": ".spec.scaling.count"})),
			version: "v2", path: ".spec.scaling.count", scalable: true},
		{name: "no scale subresource", crd: crd(version("v1", nil)), version: "v1"},
		{name: "version not in the CRD", crd: crd(version("v1", map[string]interface{}{"specReplicasPath": ".spec.size"})), version: "v9"},
		{name: "scale without a path", crd: crd(version("v1", map[string]interface{}{})), version: "v1", wantErr: true},
		{name: "a path this proxy cannot follow", crd: crd(version("v1", map[string]interface{}{"specReplicasPath": ".spec.sizes[0]"})), version: "v1", wantErr: true},
		{name: "no versions", crd: crd(), version: "v1"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path, scalable, err := CRDSpecReplicasPath(tc.crd, tc.version)
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, want error %v", err, tc.wantErr)
			}
			if path != tc.path || scalable != tc.scalable {
				t.Fatalf("got %q scalable=%v, want %q scalable=%v", path, scalable, tc.path, tc.scalable)
			}
		})
	}
}
