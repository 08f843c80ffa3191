package decision

import (
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

// Denials carry annotation text; kubectl prints it to a terminal as it
// comes.
func TestDenialTextIsPrintable(t *testing.T) {
	in := base()
	in.User = &user.DefaultInfo{Name: "mallory\x1b[8m"}
	setAnn(annotations.Freeze, `{"user":"ops","reason":"incident\u001b[2J\u001b]8;;http://evil\u0007 42\u202e"}`)(in.Parent)
	d := Decide(in)
	if d.Category != Frozen {
		t.Fatalf("category %s", d.Category)
	}
	texts := []string{d.Message}
	for _, c := range d.Causes {
		texts = append(texts, c.Message, c.Field)
	}
	for _, s := range texts {
		if strings.ContainsAny(s, "\x1b\x07\u202e") {
			t.Errorf("control characters reach the caller: %q", s)
		}
	}
	if !strings.Contains(d.Message, `incident\x1b[2J\x1b]8;;http://evil\x07 42\u202e`) || !strings.Contains(d.Message, `mallory\x1b[8m`) {
		t.Errorf("the escapes are not shown visibly: %q", d.Message)
	}
}

func TestParentHidden(t *testing.T) {
	const freeze = `{"user":"ops","reason":"secret incident INC-99"}`
	tests := []struct {
		name     string
		in       func() Input
		category Category
		unblock  string
	}{
		{"frozen parent, a person who may not read it", func() Input {
			in := base()
			in.User = &user.DefaultInfo{Name: "alice"}
			setAnn(annotations.Freeze, freeze)(in.Parent)
			return in
		}, Frozen, "to lift the freeze"},
		{"unapproved drift", func() Input {
			in := base()
			setAnn(annotations.Controllers, ctrlHash)(in.Parent)
			return in
		}, DriftUnapproved, "to approve it"},
		{"rejected drift", func() Input {
			in := base()
			setAnn(annotations.Rejections, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","reason":"secret reason"}]`)(in.Parent)
			return in
		}, DriftRejected, "to lift the rejection"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shown := Decide(tt.in())
			if shown.Result != Deny || shown.Category != tt.category || !strings.Contains(shown.Message, "default/web ") {
				t.Fatalf("a caller who may read the parent: %s %s %q", shown.Result, shown.Category, shown.Message)
			}
			in := tt.in()
			in.ParentHidden = true
			d := Decide(in)
			if d.Result != Deny || d.Category != tt.category {
				t.Fatalf("hiding the parent changed the verdict: %s %s", d.Result, d.Category)
			}
			texts := append([]string{d.Message}, d.Warnings...)
			for _, c := range d.Causes {
				texts = append(texts, c.Message, c.Field)
			}
			for _, s := range texts {
				for _, secret := range []string{"Deployment", "default/web ", "generation 5", "INC-99", "secret reason"} {
					if strings.Contains(s, secret) {
						t.Errorf("%q shows %q", s, secret)
					}
				}
			}
			if !strings.Contains(d.Message, askOwnerText+" "+tt.unblock) {
				t.Errorf("the message does not say what to do: %q", d.Message)
			}
		})
	}
}

func TestParentHiddenWithholdsWarningsAboutIt(t *testing.T) {
	in := base()
	in.Mode.Default = annotations.ModeLog
	in.ParentHidden = true
	setAnn(annotations.Approvals, `[{broken`)(in.Parent)
	d := Decide(in)
	if d.Result != Allow || len(d.Warnings) == 0 {
		t.Fatalf("%s %q", d.Result, d.Warnings)
	}
	for _, w := range d.Warnings {
		if strings.Contains(w, "default/web ") || strings.Contains(w, "generation 5") {
			t.Errorf("warning shows the parent: %q", w)
		}
	}
}

func TestResetControllers(t *testing.T) {
	ctrl := controllerid.LongHash(ctrlUser)
	// The written object is the parent itself, a Deployment without owner.
	in := func(who, newValue string, omit bool) Input {
		in := base()
		in.Parent = nil
		in.Child = parentRef
		in.User = &user.DefaultInfo{Name: who}
		in.DesiredChanged, in.Changes = false, nil
		in.OldObject = mkParent(setAnn(annotations.Controllers, ctrl))
		in.NewObject = mkParent(setAnn(annotations.Controllers, newValue))
		if omit {
			in.NewObject = mkParent(delAnn(annotations.Controllers))
		}
		return in
	}
	tests := []struct {
		name string
		in   Input
		want *AnnotationChanges
	}{
		{"a person empties the record: it goes", in("alice", "", false), &AnnotationChanges{Remove: []string{annotations.Controllers}}},
		{"a write that omits it keeps it (a replace from a manifest)", in("alice", "", true), set(annotations.Controllers, ctrl)},
		{"a person cannot write another value", in("alice", controllerid.LongHash("alice"), false), set(annotations.Controllers, ctrl)},
		{"a recorded controller cannot reset its own record", in(ctrlUser, "", false), set(annotations.Controllers, ctrl)},
		{"the parent's controller copying an empty value from the parent does not reset the child's", func() Input {
			in := in(ctrlUser, "", false)
			in.Child, in.Parent = rsRef, mkParent(setAnn(annotations.Controllers, controllerid.LongHash(ctrlUser)))
			in.OldObject = mkChild(1, setAnn(annotations.Controllers, controllerid.LongHash("replicaset-controller")))
			in.NewObject = mkChild(1, setAnn(annotations.Controllers, ""))
			return in
		}(), set(annotations.Controllers, controllerid.LongHash("replicaset-controller"))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.in)
			if d.Result != Allow {
				t.Fatalf("%s: %s", d.Result, d.Message)
			}
			eq := func(a, b *AnnotationChanges) bool { return js(a) == js(b) }
			if !eq(d.ChildAnnotations, tt.want) {
				t.Errorf("child annotations %s, want %s", js(d.ChildAnnotations), js(tt.want))
			}
		})
	}
}
