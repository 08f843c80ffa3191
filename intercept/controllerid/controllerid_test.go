package controllerid

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func TestHash(t *testing.T) {
	// Same values as Kausality's HashUsername.
	tests := map[string]string{
		"alice": "c5xzg",
		"system:serviceaccount:kube-system:deployment-controller": "1likq",
		"kube-controller-manager":                                 "kp5ah",
		"":                                                        "1r6c4",
	}
	for in, want := range tests {
		if got := Hash(in); got != want {
			t.Errorf("Hash(%q) = %q, want %q", in, got, want)
		}
	}
	if UserIdentifier("bob", "uid-1") != "bob" || UserIdentifier("", "uid-1") != "uid-1" {
		t.Error("UserIdentifier")
	}
}

func TestHashLists(t *testing.T) {
	if got := ParseHashes(" a, ,b,c "); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("ParseHashes = %q", got)
	}
	if ParseHashes("") != nil {
		t.Error("empty")
	}
	in := []string{"1", "2", "3", "4", "5"}
	if got := AddHash(in, "6"); !reflect.DeepEqual(got, []string{"2", "3", "4", "5", "6"}) {
		t.Errorf("AddHash limit = %q", got)
	}
	if !reflect.DeepEqual(in, []string{"1", "2", "3", "4", "5"}) {
		t.Error("AddHash modified its input")
	}
	if got := AddHash(in, "3"); !reflect.DeepEqual(got, in) {
		t.Errorf("AddHash present = %q", got)
	}
	tests := []struct {
		value, h, want string
		changed        bool
	}{
		{"", "aaaaa", "aaaaa", true},
		{"aaaaa", "bbbbb", "aaaaa,bbbbb", true},
		{"aaaaa,bbbbb", "aaaaa", "aaaaa,bbbbb", false},
		{"1,2,3,4,5", "6", "2,3,4,5,6", true},
	}
	for _, tt := range tests {
		got, changed := AddHashValue(tt.value, tt.h)
		if got != tt.want || changed != tt.changed {
			t.Errorf("AddHashValue(%q,%q) = %q %v", tt.value, tt.h, got, changed)
		}
	}
}

func parent(t *testing.T, managedFields, annotations string) *unstructured.Unstructured {
	t.Helper()
	s := `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","namespace":"default"`
	if managedFields != "" {
		s += `,"managedFields":` + managedFields
	}
	if annotations != "" {
		s += `,"annotations":` + annotations
	}
	s += `}}`
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON([]byte(s)); err != nil {
		t.Fatal(err)
	}
	return u
}

const deploymentManagedFields = `[
 {"manager":"kubectl-client-side-apply","operation":"Update","apiVersion":"apps/v1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:replicas":{}},"f:metadata":{"f:annotations":{".":{},"f:note":{}}}}},
 {"manager":"decoy","operation":"Update","apiVersion":"apps/v1","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:status":{"f:observedGeneration":{}}},"f:metadata":{"f:annotations":{"f:status.observedGeneration":{}}}}},
 {"manager":"kube-controller-manager","operation":"Update","apiVersion":"apps/v1","subresource":"status","fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:availableReplicas":{},"f:conditions":{".":{},"k:{\"type\":\"Available\"}":{".":{},"f:status":{}}},"f:observedGeneration":{}}}}
]`

func TestObservedGenerationManagers(t *testing.T) {
	tests := []struct {
		name string
		mf   string
		want []string
		err  string
	}{
		{"none", "", nil, ""},
		{"deployment", deploymentManagedFields, []string{"kube-controller-manager"}, ""},
		{"status without observedGeneration", `[{"manager":"x","fieldsV1":{"f:status":{"f:conditions":{}}}}]`, nil, ""},
		{"shared ownership", `[{"manager":"a","fieldsV1":{"f:status":{"f:observedGeneration":{}}}},{"manager":"b","operation":"Apply","fieldsV1":{"f:status":{"f:observedGeneration":{}}}}]`, []string{"a", "b"}, ""},
		{"unparsable entry", `[{"manager":"bad","fieldsV1":{"f:status":{"k:{bad":{}}}},{"manager":"good","fieldsV1":{"f:status":{"f:observedGeneration":{}}}}]`, []string{"good"}, "managedFields[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ObservedGenerationManagers(parent(t, tt.mf, ""))
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
				t.Errorf("err = %v, want %q", err, tt.err)
			}
		})
	}
}

func TestIdentify(t *testing.T) {
	ctrl := Hash("system:serviceaccount:kube-system:deployment-controller")
	recorded := `{"kausality.io/controllers":"` + ctrl + `"}`
	tests := []struct {
		name         string
		mf, ann      string
		fieldManager string
		user         string
		method       Method
		determined   bool
		isController bool
		reason       string
	}{
		{"record: the controller, whatever its manager string", deploymentManagedFields, recorded, "renamed-binary",
			"system:serviceaccount:kube-system:deployment-controller", MethodStatusWriters, true, true,
			"the caller's status writes advanced the parent's observedGeneration (kausality.io/controllers)"},
		{"record: a person sending the controller's manager string", deploymentManagedFields, recorded, "kube-controller-manager",
			"alice", MethodStatusWriters, true, false,
			"the caller is not among the users whose status writes advanced the parent's observedGeneration (kausality.io/controllers)"},
		{"record: another controller sharing the manager string", deploymentManagedFields, recorded, "kube-controller-manager",
			"system:serviceaccount:kube-system:replicaset-controller", MethodStatusWriters, true, false,
			"the caller is not among the users whose status writes advanced the parent's observedGeneration (kausality.io/controllers)"},
		{"no record: managedFields, controller", deploymentManagedFields, "", "kube-controller-manager", "anyone", MethodManagedFields, true, true,
			`no recorded status writer; field manager "kube-controller-manager" owns the parent's status.observedGeneration`},
		{"no record: managedFields, other actor", deploymentManagedFields, "", "kubectl-edit", "system:serviceaccount:infra:ctrl", MethodManagedFields, true, false,
			`no recorded status writer; field manager "kubectl-edit" is not the parent's controller "kube-controller-manager"`},
		{"no record, no field manager: lenient", deploymentManagedFields, "", "", "x", MethodManagedFields, false, false,
			"no recorded status writer, and the request has no field manager to compare with the owner of status.observedGeneration"},
		{"a new parent: lenient", "", "", "ctrl", "alice", "", false, false,
			"the parent has reported no observedGeneration yet: its controller is not known"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := Identify(parent(t, tt.mf, tt.ann), tt.fieldManager, Hash(tt.user))
			if id.Method != tt.method || id.Determined != tt.determined || id.IsController != tt.isController || id.Reason != tt.reason {
				t.Errorf("got %+v", id)
			}
		})
	}
}

func TestRecordController(t *testing.T) {
	tests := []struct {
		value, h, want string
		changed        bool
	}{
		{"", "a", "a", true},
		{"a,b", "a", "a,b", false},
		{"a,b", "b", "b,a", true},
		{"a,b,c,d,e", "f", "f,a,b,c,d", true},
	}
	for _, tt := range tests {
		got, changed := RecordController(tt.value, tt.h)
		if got != tt.want || changed != tt.changed {
			t.Errorf("RecordController(%q, %q) = %q, %v; want %q, %v", tt.value, tt.h, got, changed, tt.want, tt.changed)
		}
	}
}
