package access

import (
	"reflect"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/endpoints/request"
)

func TestAttributes(t *testing.T) {
	alice := &user.DefaultInfo{Name: "alice", Groups: []string{"dev"}}
	tests := []struct {
		name string
		info request.RequestInfo
		verb string
		want authorizer.AttributesRecord
	}{
		{
			name: "a write is reviewed for its verb on every object of the resource: the name is left out",
			info: request.RequestInfo{IsResourceRequest: true, Verb: "update", APIGroup: "apps", APIVersion: "v1", Namespace: "prod", Resource: "replicasets", Name: "web-1"},
			verb: "update",
			want: authorizer.AttributesRecord{User: alice, Verb: "update", Namespace: "prod", APIGroup: "apps", APIVersion: "v1", Resource: "replicasets", ResourceRequest: true},
		},
		{
			name: "reading the object a write names keeps its subresource and takes the verb asked",
			info: request.RequestInfo{IsResourceRequest: true, Verb: "patch", APIGroup: "apps", APIVersion: "v1", Namespace: "prod", Resource: "deployments", Subresource: "scale", Name: "web"},
			verb: "get",
			want: authorizer.AttributesRecord{User: alice, Verb: "get", Namespace: "prod", APIGroup: "apps", APIVersion: "v1", Resource: "deployments", Subresource: "scale", ResourceRequest: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Attributes(alice, &tt.info, tt.verb); !reflect.DeepEqual(*got, tt.want) {
				t.Errorf("attributes %+v, want %+v", *got, tt.want)
			}
		})
	}
}
