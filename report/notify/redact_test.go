package notify

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

const (
	secretValue    = "hunter2-database-password"
	secretOldValue = "correct-horse-battery-staple"
)

// secretValues are every form a value of the test Secrets can take.
var secretValues = []string{
	secretValue, secretOldValue,
	base64.StdEncoding.EncodeToString([]byte(secretValue)), base64.StdEncoding.EncodeToString([]byte(secretOldValue)),
}

func secretObject(value string, extra map[string]any) *unstructured.Unstructured {
	o := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
		"metadata": map[string]any{"name": "db", "namespace": "ns", "uid": "uid-s",
			"annotations": map[string]any{
				"team": "payments",
				// What kubectl apply leaves behind: the whole Secret.
				lastApplied: `{"apiVersion":"v1","kind":"Secret","data":{"password":"` + base64.StdEncoding.EncodeToString([]byte(value)) + `"}}`,
			}},
		"data":       map[string]any{"password": base64.StdEncoding.EncodeToString([]byte(value)), "user": base64.StdEncoding.EncodeToString([]byte("app"))},
		"stringData": map[string]any{"token": value},
	}}
	for k, v := range extra {
		o.Object[k] = v
	}
	return o
}

func assertNoSecretValues(t *testing.T, what string, data []byte) {
	t.Helper()
	for _, v := range secretValues {
		if strings.Contains(string(data), v) {
			t.Errorf("%s carries the value %q: %s", what, v, data)
		}
	}
}

func TestRedactSecrets(t *testing.T) {
	secretChild := v1alpha1.ChildRef{APIVersion: "v1", Kind: "Secret", Namespace: "ns", Name: "db"}
	cmChild := v1alpha1.ChildRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cfg"}
	unredacted := []desired.Change{
		{Path: "data.password", Old: `"` + base64.StdEncoding.EncodeToString([]byte(secretOldValue)) + `"`, New: `"` + base64.StdEncoding.EncodeToString([]byte(secretValue)) + `"`},
		{Path: `stringData["db.token"]`, Old: desired.Unset, New: `"` + secretValue + `"`},
		{Path: "data", Old: `{"password":"` + secretValue + `"}`, New: desired.Unset},
		{Path: "type", Old: `"Opaque"`, New: `"kubernetes.io/basic-auth"`},
		{Path: "datastore", Old: `"a"`, New: `"b"`},
	}
	redacted := []desired.Change{
		{Path: "data.password", Old: Redacted, New: Redacted},
		{Path: `stringData["db.token"]`, Old: desired.Unset, New: Redacted},
		{Path: "data", Old: Redacted, New: desired.Unset},
		{Path: "type", Old: `"Opaque"`, New: `"kubernetes.io/basic-auth"`},
		{Path: "datastore", Old: `"a"`, New: `"b"`},
	}
	typed := &corev1.Secret{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: "ns"}, Data: map[string][]byte{"password": []byte(secretValue)}}
	rawSecret, _ := json.Marshal(secretObject(secretValue, nil).Object)
	configMap := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "cfg"}, "data": map[string]any{"password": "in-a-configmap"}}}

	tests := []struct {
		name        string
		child       v1alpha1.ChildRef
		old, new    runtime.RawExtension
		changes     []desired.Change
		wantChanges []desired.Change
		// redacted: the objects must carry no value; else they must be
		// sent unchanged.
		redacted bool
	}{
		{name: "a Secret as unstructured objects", child: secretChild,
			old: runtime.RawExtension{Object: secretObject(secretOldValue, nil)}, new: runtime.RawExtension{Object: secretObject(secretValue, nil)},
			changes: unredacted, wantChanges: redacted, redacted: true},
		{name: "a Secret as a typed object", child: secretChild, new: runtime.RawExtension{Object: typed},
			changes: unredacted, wantChanges: redacted, redacted: true},
		{name: "a Secret as raw JSON", child: secretChild, new: runtime.RawExtension{Raw: rawSecret},
			changes: unredacted, wantChanges: redacted, redacted: true},
		{name: "a Secret deleted: changes only", child: secretChild, changes: unredacted, wantChanges: redacted, redacted: true},
		{name: "a Secret object under another child reference", child: cmChild, new: runtime.RawExtension{Object: secretObject(secretValue, nil)},
			changes: unredacted, wantChanges: redacted, redacted: true},
		{name: "a ConfigMap keeps its values", child: cmChild, new: runtime.RawExtension{Object: configMap},
			changes: unredacted, wantChanges: unredacted},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var before [2][]byte
			for i, e := range []runtime.RawExtension{tt.old, tt.new} {
				before[i], _ = json.Marshal(e)
			}
			changes := append([]desired.Change(nil), tt.changes...)
			sp := v1alpha1.DriftReportSpec{Child: tt.child, OldObject: tt.old, NewObject: tt.new, Changes: changes}
			redactSecrets(&sp)

			if !reflect.DeepEqual(sp.Changes, tt.wantChanges) {
				t.Errorf("changes:\n got  %+v\n want %+v", sp.Changes, tt.wantChanges)
			}
			if !reflect.DeepEqual(changes, tt.changes) {
				t.Errorf("the caller's changes were modified: %+v", changes)
			}
			for i, e := range []runtime.RawExtension{tt.old, tt.new} {
				if after, _ := json.Marshal(e); string(after) != string(before[i]) {
					t.Errorf("the caller's object %d was modified: %s", i, after)
				}
			}
			body, err := json.Marshal(v1alpha1.DriftReport{Spec: sp})
			if err != nil {
				t.Fatal(err)
			}
			if tt.redacted {
				assertNoSecretValues(t, "the report", body)
				if sp.NewObject.Object != nil || sp.NewObject.Raw != nil {
					var obj struct {
						Data map[string]string `json:"data"`
					}
					nb, _ := json.Marshal(sp.NewObject)
					_ = json.Unmarshal(nb, &obj)
					if obj.Data["password"] != Redacted {
						t.Errorf("the key is gone or not redacted: %s", nb)
					}
				}
			} else if !strings.Contains(string(body), "in-a-configmap") {
				t.Errorf("a ConfigMap's value was redacted: %s", body)
			}
		})
	}
}

func TestSecretDataPath(t *testing.T) {
	tests := []struct {
		path string
		want bool
	}{
		{"data", true}, {"data.password", true}, {`data["tls.key"]`, true},
		{"stringData", true}, {"stringData.token", true}, {`stringData["a.b"]`, true},
		{"datastore", false}, {"type", false}, {"metadata.data", false}, {"spec.data", false}, {"", false},
	}
	for _, tt := range tests {
		if got := secretDataPath(tt.path); got != tt.want {
			t.Errorf("secretDataPath(%q) = %v", tt.path, got)
		}
	}
}

// The body a receiver gets about a drifted Secret holds its keys and no
// value, in any encoding, and its id is computed from the redacted
// changes.
func TestSecretReportCarriesNoValues(t *testing.T) {
	d := &decision.Decision{Report: decision.ReportDetected,
		Child:  decision.ObjectRef{APIVersion: "v1", Kind: "Secret", Namespace: "ns", Name: "db"},
		Parent: &decision.ParentInfo{Ref: decision.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "ns", Name: "web"}, Generation: 2, ObservedGeneration: 2},
		Actor:  decision.Actor{User: "ctrl", FieldManager: "ctrl", IsController: true}}
	changes := []desired.Change{{Path: "data.password", Old: `"` + secretOldValue + `"`, New: `"` + secretValue + `"`}}
	w := Write{Operation: decision.Update, OldObject: secretObject(secretOldValue, nil), NewObject: secretObject(secretValue, nil), Changes: changes}
	body, err := json.Marshal(FromDecision(d, w))
	if err != nil {
		t.Fatal(err)
	}
	assertNoSecretValues(t, "the DriftReport", body)
	var rep v1alpha1.DriftReport
	if err := json.Unmarshal(body, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Spec.ID != ID(ParentObject(rep.Spec.Parent), ChildObject(rep.Spec.Child), []desired.Change{{Path: "data.password", Old: Redacted, New: Redacted}}) {
		t.Errorf("the id is not computed from the redacted changes")
	}
	for _, o := range []runtime.RawExtension{rep.Spec.OldObject, rep.Spec.NewObject} {
		var s struct {
			Data       map[string]string `json:"data"`
			StringData map[string]string `json:"stringData"`
		}
		if err := json.Unmarshal(o.Raw, &s); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{"password": Redacted, "user": Redacted}
		if !reflect.DeepEqual(s.Data, want) || s.StringData["token"] != Redacted {
			t.Errorf("the keys are not kept with redacted values: %s", o.Raw)
		}
	}
	if w.NewObject.Object["data"].(map[string]any)["user"] != base64.StdEncoding.EncodeToString([]byte("app")) || changes[0].New != `"`+secretValue+`"` {
		t.Error("the write path's objects or changes were modified")
	}
}
