package decision

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

// ownWrite: a write of the Deployment default/web itself (it has no
// parent), recorded as controlled by ctrlUser, by ctrlUser; edit turns the
// stored object into the written one.
func ownWrite(status bool, edit mut, stored ...mut) Input {
	old := mkParent(append([]mut{setAnn(annotations.Controllers, ctrlHash)}, stored...)...)
	written := old.DeepCopy()
	edit(written)
	return Input{
		Operation:   Update,
		Child:       parentRef,
		OldObject:   old,
		NewObject:   written,
		StatusWrite: status,
		User:        &user.DefaultInfo{Name: ctrlUser},
		// Not the owner of status.observedGeneration: the record decides.
		FieldManager: "manager",
		Mode:         ModeInputs{Default: annotations.ModeEnforce},
		Now:          now,
	}
}

func edits(ms ...mut) mut {
	return func(u *unstructured.Unstructured) {
		for _, m := range ms {
			m(u)
		}
	}
}

func TestControls(t *testing.T) {
	always := `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","mode":"always"}]`
	tests := []struct {
		name     string
		in       func() Input
		result   Result
		category Category
		// child: the annotation changes forwarded with the write.
		child *AnnotationChanges
		// says: the message names these.
		says []string
		// recheck: decided again on a live read of the object.
		recheck bool
	}{
		{
			name:     "the object's controller approves its own drift on the object",
			in:       func() Input { return ownWrite(false, setAnn(annotations.Approvals, always)) },
			result:   Deny,
			category: OwnControlsRefused,
			says:     []string{"the controller of apps/v1 Deployment default/web may not edit its own kausality.io/approvals; a person must", ctrlUser},
		},
		{
			name:     "the object's controller lifts its freeze",
			in:       func() Input { return ownWrite(false, delAnn(annotations.Freeze), setAnn(annotations.Freeze, "true")) },
			result:   Deny,
			category: OwnControlsRefused,
			says:     []string{"kausality.io/freeze"},
		},
		{
			name: "the object's controller sets mode, snoozes and rejects nothing any more",
			in: func() Input {
				return ownWrite(false, edits(setAnn(annotations.Mode, "log"), setAnn(annotations.SnoozeUntil, "2030-01-01T00:00:00Z"),
					setAnn(annotations.Snooze, "2030-01-01T00:00:00Z"), delAnn(annotations.Rejections)),
					setAnn(annotations.Rejections, `[{"reason":"no"}]`))
			},
			result:   Deny,
			category: OwnControlsRefused,
			says:     []string{"kausality.io/mode, kausality.io/rejections, kausality.io/snooze, kausality.io/snooze-until"},
		},
		{
			name: "identified by owning status.observedGeneration when nothing is recorded",
			in: func() Input {
				in := ownWrite(false, setAnn(annotations.Approvals, always), delAnn(annotations.Controllers))
				in.FieldManager = kcm
				return in
			},
			result:   Deny,
			category: OwnControlsRefused,
			says:     []string{`its field manager "kube-controller-manager" owns the object's status.observedGeneration`},
		},
		{
			name: "a person approves",
			in: func() Input {
				in := ownWrite(false, setAnn(annotations.Approvals, always))
				alice(&in)
				return in
			},
			result:   Allow,
			category: NoDesiredChange,
			child:    aliceAdded(always),
			recheck:  true,
		},
		{
			name: "a person approves on a copy that was already read live",
			in: func() Input {
				in := ownWrite(false, setAnn(annotations.Approvals, always))
				alice(&in)
				in.Confirmed = true
				return in
			},
			result:   Allow,
			category: NoDesiredChange,
			child:    aliceAdded(always),
		},
		{
			name: "the object's controller writes a freeze into its last-applied configuration",
			in: func() Input {
				return ownWrite(false, setAnn(annotations.LastApplied, `{"metadata":{"annotations":{"kausality.io/freeze":"x"}},"spec":{}}`))
			},
			result:   Deny,
			category: OwnControlsRefused,
			says:     []string{"may not edit its own " + annotations.LastApplied},
		},
		{
			name: "a decoy Metadata member hides nothing",
			in: func() Input {
				return ownWrite(false, setAnn(annotations.LastApplied, `{"metadata":{"annotations":{"kausality.io/freeze":"x"}},"Metadata":{}}`),
					setAnn(annotations.LastApplied, `{"metadata":{}}`))
			},
			result:   Deny,
			category: OwnControlsRefused,
		},
		{
			name: "the object's controller drops a rejection from its last-applied configuration",
			in: func() Input {
				return ownWrite(false, setAnn(annotations.LastApplied, `{"metadata":{"annotations":{"note":"b"}}}`),
					setAnn(annotations.LastApplied, `{"metadata":{"annotations":{"note":"a","kausality.io/rejections":"[]"}}}`))
			},
			result:   Deny,
			category: OwnControlsRefused,
		},
		{
			name: "the object's controller rewrites its last-applied configuration, controls alone",
			in: func() Input {
				return ownWrite(false, setAnn(annotations.LastApplied, `{"metadata":{"annotations":{"note":"b","kausality.io/freeze":"x"}}}`),
					setAnn(annotations.LastApplied, `{"metadata":{"annotations":{"note":"a","kausality.io/freeze":"x"}}}`))
			},
			result:   Allow,
			category: NoDesiredChange,
		},
		{
			name:     "the object's controller changes its other annotations",
			in:       func() Input { return ownWrite(false, setAnn("example.com/revision", "2")) },
			result:   Allow,
			category: NoDesiredChange,
		},
		{
			name: "the object's controller patches controls its copy does not hold: decided again on a live read",
			in: func() Input {
				in := ownWrite(false, setAnn("example.com/revision", "2"))
				in.NamesControls = true
				return in
			},
			result:   Allow,
			category: NoDesiredChange,
			recheck:  true,
		},
		{
			name: "status: the same",
			in: func() Input {
				in := ownWrite(true, setAnn("example.com/revision", "2"))
				in.NamesControls = true
				return in
			},
			result:   Allow,
			category: StatusWrite,
			recheck:  true,
		},
		{
			name: "the object's controller patches controls of a copy read live",
			in: func() Input {
				in := ownWrite(false, setAnn("example.com/revision", "2"))
				in.NamesControls, in.ObjectLive = true, true
				return in
			},
			result:   Allow,
			category: NoDesiredChange,
		},
		{
			name: "a person patches controls the copy does not hold: nothing to recheck",
			in: func() Input {
				in := ownWrite(false, setAnn("example.com/revision", "2"))
				in.NamesControls = true
				alice(&in)
				return in
			},
			result:   Allow,
			category: NoDesiredChange,
		},
		{
			name: "a PUT of an old copy is no edit: kube-apiserver answers it with a conflict",
			in: func() Input {
				in := ownWrite(false, delAnn(annotations.Approvals), setAnn(annotations.Approvals, always))
				in.StaleUpdate = true
				return in
			},
			result:   Allow,
			category: NoDesiredChange,
		},
		{
			name: "a controller that is also the child's controller copies its parent's approvals into the child: kept as stored",
			in: func() Input {
				in := base()
				in.OldObject = mkChild(1, setAnn(annotations.Controllers, ctrlHash))
				in.NewObject = mkChild(1, setAnn(annotations.Controllers, ctrlHash), setAnn(annotations.Approvals, always))
				in.DesiredChanged, in.Changes = false, nil
				return in
			},
			result:   Allow,
			category: NoDesiredChange,
			child:    &AnnotationChanges{Remove: []string{annotations.Approvals}},
		},
		{
			name:     "status: the object's controller approves its own drift",
			in:       func() Input { return ownWrite(true, setAnn(annotations.Approvals, always)) },
			result:   Deny,
			category: OwnControlsRefused,
			says:     []string{"(status subresource)", "may not edit its own kausality.io/approvals; a person must"},
		},
		{
			name: "status: another writer sets the mode of a child",
			in: func() Input {
				in := ownWrite(true, setAnn(annotations.Mode, "log"))
				in.User = &user.DefaultInfo{Name: "system:serviceaccount:ops:operator"}
				return in
			},
			result:   Deny,
			category: StatusAnnotationsRefused,
			says:     []string{"changes kausality.io/mode", "not changed through the status subresource", "kubectl annotate -n default deployment.apps/web"},
		},
		{
			name: "status: a person's trace label",
			in: func() Input {
				in := ownWrite(true, setAnn("kausality.io/trace-ticket", "T-1"))
				alice(&in)
				return in
			},
			result:   Deny,
			category: StatusAnnotationsRefused,
			says:     []string{"kausality.io/trace-ticket"},
		},
		{
			name: "status: annotations removed as a whole",
			in: func() Input {
				return ownWrite(true, func(u *unstructured.Unstructured) { u.SetAnnotations(nil) }, setAnn(annotations.Freeze, "true"))
			},
			result:   Deny,
			category: OwnControlsRefused,
			says:     []string{"kausality.io/freeze"},
		},
		{
			name: "status: system annotations are kept as stored",
			in: func() Input {
				return ownWrite(true, edits(setAnn(annotations.Controllers, "zzzzz"), delAnn(annotations.Phase), setAnn(annotations.Reservations, "r1")))
			},
			result:   Allow,
			category: StatusWrite,
			child: &AnnotationChanges{Set: map[string]string{annotations.Controllers: ctrlHash, annotations.Phase: "initialized"},
				Remove: []string{annotations.Reservations}},
		},
		{
			name: "status: a PUT of an old copy is forwarded as it is",
			in: func() Input {
				in := ownWrite(true, edits(delAnn(annotations.Approvals), setAnn(annotations.Controllers, "aaaaa")), setAnn(annotations.Approvals, always))
				in.StaleUpdate = true
				return in
			},
			result:   Allow,
			category: StatusWrite,
		},
		{
			name:     "status: no kausality.io annotation changes",
			in:       func() Input { return ownWrite(true, setAnn("example.com/x", "y"), setAnn(annotations.Freeze, "true")) },
			result:   Allow,
			category: StatusWrite,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Decide(tt.in())
			if d.Result != tt.result || d.Category != tt.category {
				t.Fatalf("got %s (%s): %s, want %s (%s)", d.Result, d.Category, d.Reason, tt.result, tt.category)
			}
			if d.RecheckController != tt.recheck {
				t.Errorf("recheckController = %v, want %v", d.RecheckController, tt.recheck)
			}
			if !reflect.DeepEqual(d.ChildAnnotations, tt.child) {
				t.Errorf("child annotations: got %s, want %s", js(d.ChildAnnotations), js(tt.child))
			}
			for _, s := range tt.says {
				if !strings.Contains(d.Message, s) {
					t.Errorf("the message does not say %q: %s", s, d.Message)
				}
			}
			if d.Result == Deny && (len(d.Causes) == 0 || len(d.ParentWrites) > 0 || d.ConsumeOnce || d.Report != ReportNone) {
				t.Errorf("a refusal that is not clean: %s", js(d))
			}
		})
	}
}

// aliceAdded is the record of alice adding the one approval entry value
// holds.
func aliceAdded(value string) *AnnotationChanges {
	return set(annotations.ApprovalsBy, annotations.Attribute("", "", value, controllerid.LongHash("alice")))
}
