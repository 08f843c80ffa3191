package decision

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
)

// Whatever changes the write path hands in, a decision about a Secret
// carries none of its values: not in the message, the causes, the warnings
// (which reach the caller and the decision log) or the reason.
func TestSecretValuesNeverShown(t *testing.T) {
	const value = "hunter2-database-password"
	child := func(kind, apiVersion, v string) *unstructured.Unstructured {
		c := mkChild(1)
		c.SetKind(kind)
		c.SetAPIVersion(apiVersion)
		delete(c.Object, "spec")
		c.Object["data"] = map[string]any{"password": v}
		return c
	}
	changes := []desired.Change{{Path: "data.password", Old: `"old-` + value + `"`, New: `"` + value + `"`}}
	tests := []struct {
		name       string
		kind, api  string
		in         func(in *Input)
		wantValues bool
		category   Category
	}{
		{name: "Secret, denied in enforce mode", kind: "Secret", api: "v1", category: DriftUnapproved},
		{name: "Secret, allowed with a warning in log mode", kind: "Secret", api: "v1", category: DriftUnapproved,
			in: func(in *Input) { in.Mode.Default = annotations.ModeLog }},
		{name: "Secret, rejected", kind: "Secret", api: "v1", category: DriftRejected,
			in: func(in *Input) {
				setAnn(annotations.Rejections, `[{"apiVersion":"v1","kind":"Secret","name":"web-1","reason":"no"}]`)(in.Parent)
			}},
		{name: "Secret, frozen", kind: "Secret", api: "v1", category: Frozen,
			in: func(in *Input) { setAnn(annotations.Freeze, "true")(in.Parent) }},
		{name: "a ConfigMap shows its values", kind: "ConfigMap", api: "v1", category: DriftUnapproved, wantValues: true,
			in: func(in *Input) { in.Mode.Default = annotations.ModeLog }},
		{name: "a Secret of another group is no Secret", kind: "Secret", api: "example.com/v1", category: DriftUnapproved, wantValues: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base()
			in.Child = ObjectRef{APIVersion: tt.api, Kind: tt.kind, Namespace: "default", Name: "web-1"}
			in.OldObject, in.NewObject = child(tt.kind, tt.api, "old-"+value), child(tt.kind, tt.api, value)
			in.Changes = changes
			if tt.in != nil {
				tt.in(&in)
			}
			d := Decide(in)
			if d.Category != tt.category {
				t.Fatalf("category %s (%s), want %s", d.Category, d.Reason, tt.category)
			}
			causes, _ := json.Marshal(d.Causes)
			shown := d.Message + "\n" + string(causes) + "\n" + strings.Join(d.Warnings, "\n") + "\n" + d.Reason
			if got := strings.Contains(shown, value); got != tt.wantValues {
				t.Errorf("values shown: %v, want %v:\n%s", got, tt.wantValues, shown)
			}
			if !strings.Contains(shown, "data.password") {
				t.Errorf("the changed key is not named:\n%s", shown)
			}
		})
	}
}
