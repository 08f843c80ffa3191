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
	if got := Intersect([]string{"a", "b"}, []string{"c", "b", "a"}); !reflect.DeepEqual(got, []string{"b", "a"}) {
		t.Errorf("Intersect = %q", got)
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

func TestIdentifyByHash(t *testing.T) {
	tests := []struct {
		name                  string
		user                  string
		updaters, controllers []string
		determined, isCtrl    bool
		set                   []string
	}{
		{"single updater is the controller", "u1", []string{"u1"}, nil, true, true, []string{"u1"}},
		{"single updater, other user", "u2", []string{"u1"}, []string{"u2"}, true, false, []string{"u1"}},
		{"intersection contains user", "c1", []string{"x", "c1"}, []string{"c1", "c2"}, true, true, []string{"c1"}},
		{"intersection lacks user", "x", []string{"x", "c1"}, []string{"c1"}, true, false, []string{"c1"}},
		{"empty intersection", "c1", []string{"x", "y"}, []string{"c1"}, true, false, nil},
		{"no updaters: parent controllers", "c1", nil, []string{"c1"}, true, true, []string{"c1"}},
		{"no updaters: not a controller", "x", nil, []string{"c1"}, true, false, []string{"c1"}},
		{"cannot determine: two updaters, no controllers", "x", []string{"x", "y"}, nil, false, false, nil},
		{"cannot determine: nothing known", "x", nil, nil, false, false, nil},
	}
	for _, tt := range tests {
		id := IdentifyByHash(tt.user, tt.updaters, tt.controllers)
		if id.Method != MethodUserHash || id.Determined != tt.determined || id.IsController != tt.isCtrl || !reflect.DeepEqual(id.ControllerHashes, tt.set) {
			t.Errorf("%s: got %+v", tt.name, id)
		}
	}
}

func TestIdentify(t *testing.T) {
	ctrl := Hash("system:serviceaccount:infra:ctrl")
	tests := []struct {
		name         string
		mf, ann      string
		fieldManager string
		user         string
		updaters     []string
		method       Method
		determined   bool
		isController bool
		reason       string
	}{
		{"managedFields: controller", deploymentManagedFields, "", "kube-controller-manager", "anyone", nil, MethodManagedFields, true, true,
			`field manager "kube-controller-manager" owns the parent's status.observedGeneration`},
		{"managedFields: other actor", deploymentManagedFields, "", "kubectl-edit", "system:serviceaccount:infra:ctrl", nil, MethodManagedFields, true, false,
			`field manager "kubectl-edit" is not the parent's controller "kube-controller-manager"`},
		{"managedFields beats hashes", deploymentManagedFields, `{"kausality.io/controllers":"` + ctrl + `"}`, "kubectl-edit", "system:serviceaccount:infra:ctrl", []string{ctrl}, MethodManagedFields, true, false,
			`field manager "kubectl-edit" is not the parent's controller "kube-controller-manager"`},
		{"no field manager: hashes", deploymentManagedFields, `{"kausality.io/controllers":"` + ctrl + `"}`, "", "system:serviceaccount:infra:ctrl", nil, MethodUserHash, true, true,
			"no field manager on the request; child has no updaters; parent controllers"},
		{"no entry: hashes, controller", "", `{"kausality.io/controllers":"` + ctrl + `"}`, "ctrl", "system:serviceaccount:infra:ctrl", []string{ctrl, "zzzzz"}, MethodUserHash, true, true,
			"intersection of child updaters and parent controllers"},
		{"no entry: hashes, other", "", `{"kausality.io/controllers":"` + ctrl + `"}`, "kubectl", "alice", []string{ctrl}, MethodUserHash, true, false,
			"child has a single updater"},
		{"no entry: lenient", "", "", "ctrl", "alice", nil, MethodUserHash, false, false,
			"cannot determine the controller: child has no single updater and the parent has no kausality.io/controllers annotation"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id := Identify(parent(t, tt.mf, tt.ann), tt.fieldManager, Hash(tt.user), tt.updaters)
			if id.Method != tt.method || id.Determined != tt.determined || id.IsController != tt.isController || id.Reason != tt.reason {
				t.Errorf("got %+v", id)
			}
		})
	}
}
