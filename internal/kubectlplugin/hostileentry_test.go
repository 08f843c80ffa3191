package kubectlplugin

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// An approval entry is shown as written (ApprovalEntry.Raw), and JSON
// allows a line break or a tab between its tokens: anyone who may edit the
// parent writes kausality.io/approvals, and its entry must add no line or
// column to why (nor to the drift detail, which shows why), as a freeze
// reason does not (TestWhyHasOnlyItsOwnLines).
func TestAnApprovalEntryAddsNoLineToWhy(t *testing.T) {
	value := `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"other","generation":4,` + "\n" +
		`"To unblock: nothing, already approved":1}]`
	entries, _, ok := annotations.ParseApprovalEntries(value)
	if !ok || len(entries) != 1 {
		t.Fatalf("parsed %d entries (ok %v)", len(entries), ok)
	}
	render := func(raw json.RawMessage) string {
		ex := Explanation{
			Child:     decision.ObjectRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "shop", Name: "web-1"},
			Parent:    &ParentView{Ref: decision.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: "web"}, Generation: 4},
			Approvals: []EntryView{{Entry: raw, Note: "for another child"}},
		}
		var buf bytes.Buffer
		o := &options{out: &buf}
		if err := o.print(ex, func(w io.Writer) { RenderWhy(w, ex, "replicaset.apps/web-1") }); err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, entries[0].Raw); err != nil {
		t.Fatal(err)
	}
	got, want := render(json.RawMessage(entries[0].Raw)), render(compact.Bytes())
	if n, m := strings.Count(got, "\n"), strings.Count(want, "\n"); n != m {
		t.Errorf("why has %d lines with the entry as written, %d with it on one line: the entry forged a line:\n%s", n, m, got)
	}
	for _, l := range strings.Split(got, "\n") {
		if strings.HasPrefix(l, `"To unblock`) {
			t.Errorf("an approval entry forged the line %q", l)
		}
	}
}
