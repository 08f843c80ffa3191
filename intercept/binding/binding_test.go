package binding

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/endpoints/request"
)

func TestIs(t *testing.T) {
	for _, tc := range []struct {
		info request.RequestInfo
		want bool
	}{
		{request.RequestInfo{Verb: "create", Resource: "pods", Subresource: "binding", Name: "p"}, true},
		{request.RequestInfo{Verb: "create", Resource: "bindings"}, true},
		{request.RequestInfo{Verb: "update", Resource: "pods", Subresource: "binding", Name: "p"}, false},
		{request.RequestInfo{Verb: "create", Resource: "pods", Subresource: "eviction", Name: "p"}, false},
		{request.RequestInfo{Verb: "create", APIGroup: "example.com", Resource: "bindings"}, false},
		{request.RequestInfo{Verb: "create", Resource: "bindings", Subresource: "status"}, false},
	} {
		if got := Is(&tc.info); got != tc.want {
			t.Errorf("Is(%+v) = %v, want %v", tc.info, got, tc.want)
		}
	}
}

func TestRefusal(t *testing.T) {
	info := &request.RequestInfo{Verb: "create", Resource: "pods", Subresource: "binding", Namespace: "apps", Name: "p"}
	for _, tc := range []struct {
		name, body string
		wantCode   int32 // 0: none
	}{
		{"no annotations", `{"apiVersion":"v1","kind":"Binding","metadata":{"name":"p"},"target":{"name":"n"}}`, 0},
		{"other annotations", `{"metadata":{"name":"p","annotations":{"a":"b"}},"target":{"name":"n"}}`, 0},
		{"a control", `{"metadata":{"name":"p","annotations":{"kausality.io/freeze":"true"}},"target":{"name":"n"}}`, 403},
		{"allowances", `{"metadata":{"name":"p","annotations":{"kausal.io/allowances":"[]"}},"target":{"name":"n"}}`, 403},
		{"not JSON", `{"metadata":`, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Refusal(info, "application/json", []byte(tc.body))
			var code int32
			var status apierrors.APIStatus
			if errors.As(err, &status) {
				code = status.Status().Code
			}
			if code != tc.wantCode || (err == nil) != (tc.wantCode == 0) {
				t.Fatalf("Refusal = %v (code %d), want code %d", err, code, tc.wantCode)
			}
		})
	}
}
