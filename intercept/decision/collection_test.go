package decision

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestCollection(t *testing.T) {
	rs := func(name string) ObjectRef {
		return ObjectRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "apps", Name: name}
	}
	allowed := func(name string, warnings ...string) Decision {
		return Decision{Result: Allow, Category: NoParent, Child: rs(name), Reason: "no controller", Warnings: warnings}
	}
	frozen := func(name string) Decision {
		return Decision{Result: Deny, Category: Frozen, Child: rs(name), Reason: "frozen", Message: "the parent is frozen; unfreeze it",
			Causes: []metav1.StatusCause{{Type: "FieldValueForbidden", Field: "metadata.annotations[kausality.io/freeze]", Message: "frozen"}}}
	}
	many := func(n int, d func(string) Decision) []Decision {
		out := make([]Decision, n)
		for k := range out {
			out[k] = d(fmt.Sprintf("rs-%d", k))
		}
		return out
	}
	tests := []struct {
		name      string
		dryRun    bool
		decisions []Decision
		// wantRefused, wantDenied and wantBlocked are the verdict.
		wantRefused bool
		wantDenied  int
		wantBlocked []int
		// wantWarnings are the answer's warnings.
		wantWarnings []string
		// wantMessage is in the refusal's message.
		wantMessage string
		wantCauses  int
	}{
		{name: "nothing listed: forwarded", decisions: nil},
		{name: "every object may go: forwarded with their warnings, each once",
			decisions:    []Decision{allowed("a", "w1"), allowed("b", "w1", "w2")},
			wantWarnings: []string{"w1", "w2"}},
		{name: "one object held refuses the whole request, naming it",
			decisions:   []Decision{allowed("a"), frozen("b"), allowed("c")},
			wantRefused: true, wantDenied: 1, wantBlocked: []int{1},
			wantMessage: "deletecollection of replicasets.apps in namespace apps denied, nothing was deleted: 1 of the 3 objects it would delete may not be deleted: " +
				"apps/v1 ReplicaSet apps/b (Frozen). the parent is frozen; unfreeze it",
			wantCauses: 1},
		{name: "a refusal names ten objects and counts the others; a cause they share is given once",
			decisions:   many(12, frozen),
			wantRefused: true, wantDenied: 12, wantBlocked: []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
			wantMessage: "apps/v1 ReplicaSet apps/rs-9 (Frozen), and 2 more", wantCauses: 1},
		{name: "a dry run's answer says each object's verdict, within the bound",
			dryRun: true, decisions: many(12, func(name string) Decision { return allowed(name) }),
			wantWarnings: append(dryRunVerdicts(10), "kausality: 2 more warnings about this deletecollection are in the proxy's decision log")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Collection{DryRun: tt.dryRun}
			for k := range tt.decisions {
				c.Add(&tt.decisions[k])
			}
			v := c.Verdict
			if v.Refused != tt.wantRefused || v.Denied != tt.wantDenied || !slices.Equal(v.Blocked, tt.wantBlocked) || c.Decided != len(tt.decisions) {
				t.Fatalf("verdict %+v after %d, want refused %v, denied %d, blocked %v", v, c.Decided, tt.wantRefused, tt.wantDenied, tt.wantBlocked)
			}
			if got := c.Warnings(); !slices.Equal(got, tt.wantWarnings) {
				t.Errorf("warnings %q, want %q", got, tt.wantWarnings)
			}
			if !v.Refused {
				return
			}
			blocked := make([]*Decision, len(v.Blocked))
			for n, k := range v.Blocked {
				blocked[n] = &tt.decisions[k]
			}
			status := c.Refusal(schema.GroupResource{Group: "apps", Resource: "replicasets"}, "apps", v, blocked)
			if status.Code != 403 || status.Reason != metav1.StatusReasonForbidden || !strings.Contains(status.Message, tt.wantMessage) {
				t.Errorf("refusal %d %s %q, want 403 Forbidden with %q", status.Code, status.Reason, status.Message, tt.wantMessage)
			}
			if status.Details == nil || status.Details.Group != "apps" || status.Details.Kind != "replicasets" || len(status.Details.Causes) != tt.wantCauses {
				t.Errorf("details %+v, want group apps, kind replicasets and %d causes", status.Details, tt.wantCauses)
			}
		})
	}
}

func TestDistinctSideWrites(t *testing.T) {
	prune := func(parent string) SideWrite {
		return SideWrite{Target: ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "apps", Name: parent},
			AnnotationChanges: AnnotationChanges{Remove: []string{"kausality.io/approvals"}}, Reasons: []string{"prune"}}
	}
	got := DistinctSideWrites([]SideWrite{prune("a"), prune("a"), prune("b"), prune("a")})
	if len(got) != 2 || got[0].Target.Name != "a" || got[1].Target.Name != "b" {
		t.Fatalf("got %+v, want one write to a and one to b", got)
	}
}

// dryRunVerdicts are the dry-run verdicts of n allowed ReplicaSets
// rs-0.. without a controller.
func dryRunVerdicts(n int) []string {
	out := make([]string, n)
	for k := range out {
		out[k] = fmt.Sprintf("kausality dry-run: Allow (NoParent): apps/v1 ReplicaSet apps/rs-%d: no controller", k)
	}
	return out
}
