package approval

import (
	"reflect"
	"testing"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

var rs = Child{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1"}

// entries are approvals as the proxy would write them.
func entries(list ...Approval) []Entry {
	var out []Entry
	for _, a := range list {
		out = append(out, annotations.NewApprovalEntry(a))
	}
	return out
}

// raw is the raw form of a as entries writes it.
func raw(a Approval) []byte { return annotations.NewApprovalEntry(a).Raw }

func TestMatches(t *testing.T) {
	tests := []struct {
		name string
		a    Approval
		want bool
	}{
		{"exact", Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1"}, true},
		{"other name", Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-2"}, false},
		{"other kind", Approval{APIVersion: "apps/v1", Kind: "Deployment", Name: "web-1"}, false},
		{"other version", Approval{APIVersion: "apps/v1beta1", Kind: "ReplicaSet", Name: "web-1"}, false},
		{"wildcard name", Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "*"}, true},
		{"all wildcards", Approval{APIVersion: "*", Kind: "*", Name: "*"}, true},
	}
	for _, tt := range tests {
		if got := MatchesApproval(tt.a, rs); got != tt.want {
			t.Errorf("%s: approval match = %v", tt.name, got)
		}
		r := Rejection{APIVersion: tt.a.APIVersion, Kind: tt.a.Kind, Name: tt.a.Name}
		if got := MatchesRejection(r, rs); got != tt.want {
			t.Errorf("%s: rejection match = %v", tt.name, got)
		}
	}
}

func TestValidAndStale(t *testing.T) {
	tests := []struct {
		name         string
		a            Approval
		gen          int64
		valid, stale bool
	}{
		{"once same gen", Approval{Generation: 5}, 5, true, false},
		{"once explicit same gen", Approval{Generation: 5, Mode: Once}, 5, true, false},
		{"once older gen", Approval{Generation: 4, Mode: Once}, 5, false, true},
		{"once newer gen", Approval{Generation: 6, Mode: Once}, 5, false, false},
		{"once without gen", Approval{Mode: Once}, 5, false, true},
		{"generation same", Approval{Generation: 5, Mode: Generation}, 5, true, false},
		{"generation older", Approval{Generation: 3, Mode: Generation}, 5, false, true},
		{"always", Approval{Mode: Always}, 5, true, false},
		{"always with old gen", Approval{Generation: 1, Mode: Always}, 5, true, false},
		{"unknown mode", Approval{Generation: 5, Mode: "forever"}, 5, false, false},
	}
	for _, tt := range tests {
		if got := Valid(tt.a, At(tt.gen)); got != tt.valid {
			t.Errorf("%s: Valid = %v", tt.name, got)
		}
		if got := Stale(tt.a, At(tt.gen)); got != tt.stale {
			t.Errorf("%s: Stale = %v", tt.name, got)
		}
	}
}

func TestActiveRejection(t *testing.T) {
	if !ActiveRejection(Rejection{}, At(7)) {
		t.Error("rejection without generation must always be active")
	}
	if !ActiveRejection(Rejection{Generation: 7}, At(7)) {
		t.Error("rejection at the parent generation must be active")
	}
	if ActiveRejection(Rejection{Generation: 6}, At(7)) {
		t.Error("rejection for another generation must not be active")
	}
}

func TestFindApprovalPrefersNonConsuming(t *testing.T) {
	list := []Approval{
		{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5, Mode: Once},
		{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5, Mode: Generation},
		{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "other", Mode: Always},
	}
	if got := FindApproval(entries(list...), rs, At(5)); got != 1 {
		t.Errorf("got %d, want 1 (generation beats once)", got)
	}
	list = append(list, Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "*", Mode: Always})
	if got := FindApproval(entries(list...), rs, At(5)); got != 3 {
		t.Errorf("got %d, want 3 (always beats generation)", got)
	}
	if got := FindApproval(entries(list[:1]...), rs, At(6)); got != -1 {
		t.Errorf("stale once approval matched: %d", got)
	}
}

func TestEvaluate(t *testing.T) {
	once5 := Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5, Mode: Once}
	gen5 := Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5, Mode: Generation}
	always := Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Mode: Always}
	staleOnce := Approval{APIVersion: "v1", Kind: "ConfigMap", Name: "c", Generation: 3, Mode: Once}
	staleGen := Approval{APIVersion: "v1", Kind: "ConfigMap", Name: "d", Generation: 4, Mode: Generation}
	otherAlways := Approval{APIVersion: "v1", Kind: "Secret", Name: "s", Mode: Always}
	rej := Rejection{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Reason: "no"}
	rej4 := Rejection{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 4, Reason: "old"}
	rej5 := Rejection{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5, Reason: "now"}

	tests := []struct {
		name       string
		approvals  []Approval
		rejections []Rejection
		malformed  bool
		want       Evaluation
	}{
		{name: "nothing", want: Evaluation{Outcome: NotApproved}},
		{
			name: "once consumed", approvals: []Approval{once5, otherAlways},
			want: Evaluation{Outcome: Approved, Approval: &once5, Consume: true, ApprovalsChanged: true,
				NewApprovals: `[{"apiVersion":"v1","kind":"Secret","name":"s","mode":"always"}]`},
		},
		{
			name: "last once consumed removes annotation", approvals: []Approval{once5},
			want: Evaluation{Outcome: Approved, Approval: &once5, Consume: true, ApprovalsChanged: true, NewApprovals: ""},
		},
		{
			name: "once consumed and stale pruned", approvals: []Approval{staleOnce, once5, staleGen, otherAlways},
			want: Evaluation{Outcome: Approved, Approval: &once5, Consume: true, ApprovalsChanged: true,
				NewApprovals: `[{"apiVersion":"v1","kind":"Secret","name":"s","mode":"always"}]`,
				Pruned:       []Approval{staleOnce, staleGen}},
		},
		{
			name: "generation not consumed", approvals: []Approval{gen5},
			want: Evaluation{Outcome: Approved, Approval: &gen5},
		},
		{
			name: "generation with stale pruned", approvals: []Approval{gen5, staleOnce},
			want: Evaluation{Outcome: Approved, Approval: &gen5, ApprovalsChanged: true,
				NewApprovals: `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"generation"}]`,
				Pruned:       []Approval{staleOnce}},
		},
		{
			name: "always", approvals: []Approval{always},
			want: Evaluation{Outcome: Approved, Approval: &always},
		},
		{
			name: "only stale approvals: not approved, pruned", approvals: []Approval{staleOnce, staleGen},
			want: Evaluation{Outcome: NotApproved, ApprovalsChanged: true, NewApprovals: "", Pruned: []Approval{staleOnce, staleGen}},
		},
		{
			name: "rejection beats approval", approvals: []Approval{always}, rejections: []Rejection{rej},
			want: Evaluation{Outcome: Rejected, Rejection: &rej},
		},
		{
			name: "rejection for current generation", rejections: []Rejection{rej4, rej5},
			want: Evaluation{Outcome: Rejected, Rejection: &rej5},
		},
		{
			name: "rejection for old generation inactive", approvals: []Approval{once5}, rejections: []Rejection{rej4},
			want: Evaluation{Outcome: Approved, Approval: &once5, Consume: true, ApprovalsChanged: true},
		},
		{
			name: "malformed rejections reject", approvals: []Approval{always}, malformed: true,
			want: Evaluation{Outcome: Rejected, RejectionsMalformed: true, Rejection: &Rejection{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1",
				Reason: "the parent's kausality.io/rejections annotation is malformed; every child counts as rejected until it is fixed"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Evaluate(entries(tt.approvals...), tt.rejections, tt.malformed, rs, At(5))
			if tt.want.Approval != nil {
				tt.want.ApprovalRaw = raw(*tt.want.Approval)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got  %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestConsumeKeepsOtherOnce(t *testing.T) {
	a := Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5}
	b := Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5}
	v, pruned := Consume(entries(a, b), 0, At(5))
	if v != `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5}]` || pruned != nil {
		t.Errorf("got %s %v", v, pruned)
	}
}

func TestPruneValue(t *testing.T) {
	v := `[{"apiVersion":"v1","kind":"ConfigMap","name":"c","generation":3},{"apiVersion":"v1","kind":"Secret","name":"s","mode":"always"}]`
	nv, pruned, changed := PruneValue(v, At(4))
	if !changed || nv != `[{"apiVersion":"v1","kind":"Secret","name":"s","mode":"always"}]` || len(pruned) != 1 {
		t.Errorf("got %q %v %v", nv, pruned, changed)
	}
	if _, _, changed := PruneValue(v, At(3)); changed {
		t.Error("nothing stale at generation 3")
	}
	if nv, _, changed := PruneValue("{broken", At(9)); changed || nv != "{broken" {
		t.Error("malformed value must be left alone")
	}
}

// What a person wrote but the proxy cannot read, and every entry it keeps,
// survive its rewrites byte for byte and in place: consuming, pruning and
// the value a denial suggests only take out the entries they mean to.
func TestRewritesKeepEntriesAsWritten(t *testing.T) {
	const (
		once5     = `{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"once"}`
		stale3    = `{"apiVersion":"v1","kind":"ConfigMap","name":"c","generation":3}`
		noName    = `{"apiVersion":"apps/v1","kind":"ReplicaSet","generation":5}`
		badMode   = `{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"twice"}`
		badType   = `{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":"5"}`
		oldBad    = `{"apiVersion":"v1","kind":"ConfigMap","name":"c","generation":1,"mode":"sometimes"}`
		noted     = `{ "apiVersion": "v1", "kind": "Secret", "name": "s", "mode": "always", "note": "INC-7" }`
		notObject = `42`
	)
	list := func(entries ...string) string {
		out := "["
		for i, e := range entries {
			if i > 0 {
				out += ","
			}
			out += e
		}
		return out + "]"
	}
	tests := []struct {
		name      string
		value     string
		evaluated string // NewApprovals of Evaluate for rs at generation 5
		pruned    string // PruneValue at generation 5
		suggested string // the value a denial at generation 6 suggests
	}{
		{
			name:      "consumed once between unparsable entries",
			value:     list(noName, once5, badMode, notObject),
			evaluated: list(noName, badMode, notObject),
			pruned:    list(noName, once5, badMode, notObject),
			suggested: list(noName, badMode, notObject, `{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":6,"mode":"once"}`),
		},
		{
			name:      "stale entry pruned, an unparsable one for an old generation kept",
			value:     list(stale3, oldBad, noted, once5),
			evaluated: list(oldBad, noted),
			pruned:    list(oldBad, noted, once5),
			suggested: list(oldBad, noted, `{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":6,"mode":"once"}`),
		},
		{
			name:      "an entry of the wrong type never approves and is kept",
			value:     list(badType, stale3),
			evaluated: list(badType),
			pruned:    list(badType),
			suggested: list(badType, `{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":6,"mode":"once"}`),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parsed, _, ok := annotations.ParseApprovalEntries(tt.value)
			if !ok {
				t.Fatalf("%s does not parse", tt.value)
			}
			ev := Evaluate(parsed, nil, false, rs, At(5))
			if ev.NewApprovals != tt.evaluated {
				t.Errorf("after the write:\n got  %s\n want %s", ev.NewApprovals, tt.evaluated)
			}
			if ev.Consume && string(ev.ApprovalRaw) != once5 {
				t.Errorf("the consumed entry as written: %s", ev.ApprovalRaw)
			}
			if nv, _, _ := PruneValue(tt.value, At(5)); nv != tt.pruned {
				t.Errorf("pruned:\n got  %s\n want %s", nv, tt.pruned)
			}
			if _, v := Suggest(parsed, rs, At(6)); v != tt.suggested {
				t.Errorf("suggested:\n got  %s\n want %s", v, tt.suggested)
			}
		})
	}
}

// A value that is not a JSON array holds no approvals and is never
// rewritten: nobody can tell its entries apart.
func TestBrokenValueIsNeverRewritten(t *testing.T) {
	for _, v := range []string{
		`[{"apiVersion":"v1","kind":"ConfigMap","name":"c","generation":3},{broken`,
		`{"apiVersion":"v1","kind":"ConfigMap","name":"c","generation":3}`,
	} {
		if nv, pruned, changed := PruneValue(v, At(9)); changed || nv != v || pruned != nil {
			t.Errorf("PruneValue(%s) = %q %v %v", v, nv, pruned, changed)
		}
		parsed, _, _ := annotations.ParseApprovalEntries(v)
		if ev := Evaluate(parsed, nil, false, rs, At(9)); ev.ApprovalsChanged || ev.Outcome != NotApproved {
			t.Errorf("Evaluate(%s) = %+v", v, ev)
		}
	}
}

func TestSuggest(t *testing.T) {
	cur := []Approval{
		{APIVersion: "v1", Kind: "ConfigMap", Name: "old", Generation: 2},
		{APIVersion: "v1", Kind: "Secret", Name: "s", Mode: Always},
	}
	a, v := Suggest(entries(cur...), rs, At(5))
	if want := (Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5, Mode: Once}); a != want {
		t.Errorf("suggestion %+v", a)
	}
	if want := `[{"apiVersion":"v1","kind":"Secret","name":"s","mode":"always"},{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"once"}]`; v != want {
		t.Errorf("value %s", v)
	}
}

// Writing the suggested approval to a Deployment bumps its generation; the
// approval must still admit the write it was suggested for, and only that
// one.
func TestWindowSpansAnnotationBumps(t *testing.T) {
	sugg, _ := Suggest(nil, rs, At(5))
	afterWrite := Window{From: 5, To: 6}
	ev := Evaluate(entries(sugg), nil, false, rs, afterWrite)
	if ev.Outcome != Approved || !ev.Consume || ev.NewApprovals != "" {
		t.Fatalf("the suggested approval after the bump it caused: %+v", ev)
	}
	afterSpecChange := Window{From: 7, To: 7}
	if ev := Evaluate(entries(sugg), nil, false, rs, afterSpecChange); ev.Outcome != NotApproved || len(ev.Pruned) != 1 {
		t.Fatalf("after the spec moved on the approval must be stale: %+v", ev)
	}
	for _, w := range []Window{{}, {From: 9, To: 5}} {
		if w.Contains(4) || !At(5).Contains(5) {
			t.Fatalf("degenerate window %+v", w)
		}
	}
}

// A cluster-scoped parent's children may be in any namespace: an entry
// that names one matches the child in it only, and the suggested approval
// names it. An entry without namespace matches a child in any, as entries
// written before the field did. A namespaced parent's children are in its
// own namespace, which a Child does not carry.
func TestNamespacesOfAClusterScopedParentsChildren(t *testing.T) {
	inA := ChildOf("v1", "ConfigMap", "team-a", "cfg", "")
	inB := ChildOf("v1", "ConfigMap", "team-b", "cfg", "")
	underNamespaced := ChildOf("v1", "ConfigMap", "team-a", "cfg", "team-a")
	if underNamespaced.Namespace != "" || inA.Namespace != "team-a" {
		t.Fatalf("ChildOf: %+v under a namespaced parent, %+v under a cluster-scoped one", underNamespaced, inA)
	}
	for _, tc := range []struct {
		name      string
		namespace string
		child     Child
		want      bool
	}{
		{"the namespace it names", "team-a", inA, true},
		{"another namespace", "team-a", inB, false},
		{"no namespace: any", "", inB, true},
		{"a wildcard namespace", "*", inB, true},
		{"a namespaced parent's child", "team-a", underNamespaced, false},
	} {
		a := Approval{APIVersion: "v1", Kind: "ConfigMap", Name: "cfg", Namespace: tc.namespace}
		if got := MatchesApproval(a, tc.child); got != tc.want {
			t.Errorf("%s: approval match = %v, want %v", tc.name, got, tc.want)
		}
		r := Rejection{APIVersion: "v1", Kind: "ConfigMap", Name: "cfg", Namespace: tc.namespace}
		if got := MatchesRejection(r, tc.child); got != tc.want {
			t.Errorf("%s: rejection match = %v, want %v", tc.name, got, tc.want)
		}
	}
	a, v := Suggest(nil, inA, At(3))
	if a.Namespace != "team-a" || v != `[{"apiVersion":"v1","kind":"ConfigMap","name":"cfg","namespace":"team-a","generation":3,"mode":"once"}]` {
		t.Errorf("suggestion %+v %s, want it to name the child's namespace", a, v)
	}
	if ev := Evaluate(entries(a), nil, false, inB, At(3)); ev.Outcome == Approved {
		t.Errorf("the approval of team-a/cfg approved team-b/cfg: %+v", ev)
	}
}
