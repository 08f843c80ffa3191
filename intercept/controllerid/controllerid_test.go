package controllerid

import (
	"reflect"
	"strconv"
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

// The managedFields entry a cached parent keeps is read without the
// parser, which serializes the subtree it parses.
func TestObservedGenerationManagersOfALeanEntryAllocatesOnlyTheResult(t *testing.T) {
	p := parent(t, `[{"manager":"kube-controller-manager","operation":"Update","subresource":"status","fieldsV1":{"f:status":{"f:observedGeneration":{}}}}]`, "")
	var got []string
	allocs := testing.AllocsPerRun(100, func() {
		managers, err := ObservedGenerationManagers(p)
		if err != nil {
			t.Fatal(err)
		}
		got = managers
	})
	if !reflect.DeepEqual(got, []string{"kube-controller-manager"}) {
		t.Errorf("managers %q", got)
	}
	if allocs > 1 {
		t.Errorf("reading a lean entry allocates %.0f times, want at most 1 (the result)", allocs)
	}
}

func TestIdentify(t *testing.T) {
	ctrl := LongHash("system:serviceaccount:kube-system:deployment-controller")
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
			id := Identify(parent(t, tt.mf, tt.ann), tt.fieldManager, UserOf(tt.user))
			if id.Method != tt.method || id.Determined != tt.determined || id.IsController != tt.isController || id.Reason != tt.reason {
				t.Errorf("got %+v", id)
			}
		})
	}
}

func TestLongHash(t *testing.T) {
	tests := map[string]string{}
	for _, id := range []string{"alice", "system:serviceaccount:kube-system:deployment-controller", ""} {
		h := LongHash(id)
		if len(h) != LongHashLen || strings.Trim(h, "0123456789abcdefghijklmnopqrstuvwxyz") != "" {
			t.Errorf("LongHash(%q) = %q: not %d base36 characters", id, h, LongHashLen)
		}
		if prev, ok := tests[h]; ok {
			t.Errorf("LongHash(%q) = LongHash(%q)", id, prev)
		}
		tests[h] = id
	}
	if UserOf("alice") != (User{Long: LongHash("alice"), Short: "c5xzg"}) {
		t.Errorf("UserOf = %+v", UserOf("alice"))
	}
}

// collider finds a user name whose short hash is victim's: it takes
// milliseconds, which is why short hashes stop counting once a long one is
// recorded.
func collider(t *testing.T, victim string) string {
	t.Helper()
	want := Hash(victim)
	for i := 0; i < 1<<26; i++ {
		name := "system:serviceaccount:tenant:x" + strconv.Itoa(i)
		if Hash(name) == want {
			return name
		}
	}
	t.Fatal("no colliding name found")
	return ""
}

func TestUserIn(t *testing.T) {
	ctrl := UserOf("system:serviceaccount:kube-system:deployment-controller")
	attacker := UserOf(collider(t, "system:serviceaccount:kube-system:deployment-controller"))
	if attacker.Short != ctrl.Short || attacker.Long == ctrl.Long {
		t.Fatalf("collider: %+v vs %+v", attacker, ctrl)
	}
	tests := []struct {
		name     string
		recorded string
		user     User
		want     bool
	}{
		{"long hash recorded", ctrl.Long, ctrl, true},
		{"Kausality's short record names the controller", ctrl.Short, ctrl, true},
		{"... and, inevitably, a name chosen to match it", ctrl.Short, attacker, true},
		{"once a long hash is recorded, short entries match nobody", ctrl.Long + "," + ctrl.Short, attacker, false},
		{"... the controller still matches by its long hash", ctrl.Long + "," + ctrl.Short, ctrl, true},
		{"a colliding name never matches a long hash", ctrl.Long, attacker, false},
		{"empty record", "", ctrl, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.user.In(ParseHashes(tt.recorded)); got != tt.want {
				t.Errorf("In(%q) = %v, want %v", tt.recorded, got, tt.want)
			}
		})
	}
}

func TestRecordController(t *testing.T) {
	u := func(id string) User { return UserOf(id) }
	ctrl, a, b, c, d, e := u("ctrl"), u("a"), u("b"), u("c"), u("d"), u("e")
	join := func(hs ...string) string { return strings.Join(hs, ",") }
	full := join(a.Long, b.Long, c.Long, d.Long, e.Long)
	tests := []struct {
		name    string
		value   string
		user    User
		want    string
		changed bool
		refusal string
	}{
		{"first controller", "", ctrl, ctrl.Long, true, ""},
		{"already first", join(ctrl.Long, a.Long), ctrl, join(ctrl.Long, a.Long), false, ""},
		{"recorded: moves first", join(a.Long, ctrl.Long), ctrl, join(ctrl.Long, a.Long), true, ""},
		{"recorded in a full record: moves first, nobody leaves", full, e, join(e.Long, a.Long, b.Long, c.Long, d.Long), true, ""},
		{"newcomer with room: first, nobody leaves", join(a.Long, b.Long), ctrl, join(ctrl.Long, a.Long, b.Long), true, ""},
		{"newcomer to a full record: refused, nobody pushed out", full, ctrl, full, false, RefusedFull},
		{"Kausality's record naming the user: upgraded to the long hash", join(ctrl.Short, a.Short), ctrl, ctrl.Long, true, ""},
		{"newcomer to Kausality's record: refused, it would void the short entries", join(a.Short), ctrl, a.Short, false, RefusedLegacy},
		{"entries the proxy does not write stay", join("forged", a.Long), ctrl, join(ctrl.Long, "forged", a.Long), true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, changed, refusal := RecordController(tt.value, tt.user)
			if got != tt.want || changed != tt.changed || refusal != tt.refusal {
				t.Errorf("RecordController(%q) = %q, %v, %q; want %q, %v, %q", tt.value, got, changed, refusal, tt.want, tt.changed, tt.refusal)
			}
		})
	}
}
