package decision

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
)

// A controller is known only once its status writes name it, so on a
// brand-new parent it may write approvals as a person would. Those it
// alone gave approve none of its drift, once it is known.
func TestApprovalsOnlyTheControllerGaveDoNotApproveItsDrift(t *testing.T) {
	const entry = `{"apiVersion":"*","kind":"*","name":"*","mode":"always"}`
	digest := annotations.EntryDigest(json.RawMessage(entry))
	ctrlLong, aliceLong, bobLong := controllerid.LongHash(ctrlUser), controllerid.LongHash("alice"), controllerid.LongHash("bob")
	tests := []struct {
		name        string
		record      string
		controllers string
		want        Category
	}{
		{name: "given around the proxy", want: DriftApproved},
		{name: "given by the drifting controller", record: ctrlLong + ":" + digest, want: DriftUnapproved},
		{name: "given by a person", record: aliceLong + ":" + digest, want: DriftApproved},
		{name: "given by the controller and again by a person", record: aliceLong + ":" + digest + "," + ctrlLong + ":" + digest, want: DriftApproved},
		{name: "given by another of the parent's recorded controllers", record: bobLong + ":" + digest, controllers: bobLong + "," + ctrlLong, want: DriftUnapproved},
		{name: "the record names another entry", record: ctrlLong + ":" + strings.Repeat("0", 16), want: DriftApproved},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			setAnn(annotations.Approvals, "["+entry+"]")(in.Parent)
			if tc.record != "" {
				setAnn(annotations.ApprovalsBy, tc.record)(in.Parent)
			}
			if tc.controllers != "" {
				setAnn(annotations.Controllers, tc.controllers)(in.Parent)
			}
			d := Decide(in)
			if d.Category != tc.want {
				t.Fatalf("category %s (%s), want %s", d.Category, d.Reason, tc.want)
			}
			if tc.want == DriftApproved {
				if d.ApprovalsSetAside != 0 || len(d.Warnings) != 0 {
					t.Errorf("approved, yet %d approvals set aside, warnings %q", d.ApprovalsSetAside, d.Warnings)
				}
				return
			}
			if d.Result != Deny || d.ApprovalsSetAside != 1 {
				t.Errorf("result %s with %d approvals set aside, want Deny with 1", d.Result, d.ApprovalsSetAside)
			}
			want := "kausality: kausality.io/approvals on parent apps/v1 Deployment default/web: entry 0 was given by the parent's own controller " +
				"(before its status writes named it), and does not approve its drift; a person must"
			if len(d.Warnings) != 1 || d.Warnings[0] != want {
				t.Errorf("warnings %q, want %q", d.Warnings, want)
			}
			// The entry is left as written: the suggestion keeps it, and
			// so does any rewrite of the annotation.
			if !strings.Contains(d.Message, `\"name\":\"*\"`) && !strings.Contains(d.Message, `"name":"*"`) {
				t.Errorf("the suggested value drops the set-aside entry: %s", d.Message)
			}
		})
	}
}

// Every allowed write that changes an object's approvals records who added
// which entry, on the version it was decided on.
func TestAWriteRecordsWhoAddedEachApproval(t *testing.T) {
	const (
		e1 = `{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","mode":"always"}`
		e2 = `{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-2","generation":5}`
	)
	d1, d2 := annotations.EntryDigest(json.RawMessage(e1)), annotations.EntryDigest(json.RawMessage(e2))
	aliceLong, bobLong := controllerid.LongHash("alice"), controllerid.LongHash("bob")
	// newParent is a Deployment nobody has written status for: nothing
	// tells its controller from a person.
	newParent := func(ms ...mut) *unstructured.Unstructured {
		return mkParent(append([]mut{noObsGen, noManagedFields, delAnn(annotations.Phase)}, ms...)...)
	}
	tests := []struct {
		name       string
		op         Operation
		user       string
		old, new   *unstructured.Unstructured
		wantRecord *string
	}{
		{name: "a first approval", op: Update, user: "alice", old: newParent(), new: newParent(setAnn(annotations.Approvals, "["+e1+"]")),
			wantRecord: ptrTo(aliceLong + ":" + d1)},
		{name: "created with approvals", op: Create, user: "alice", new: newParent(setAnn(annotations.Approvals, "["+e1+"]")),
			wantRecord: ptrTo(aliceLong + ":" + d1)},
		{name: "an approval added beside one recorded", op: Update, user: "bob",
			old:        newParent(setAnn(annotations.Approvals, "["+e1+"]"), setAnn(annotations.ApprovalsBy, aliceLong+":"+d1)),
			new:        newParent(setAnn(annotations.Approvals, "["+e1+","+e2+"]"), setAnn(annotations.ApprovalsBy, aliceLong+":"+d1)),
			wantRecord: ptrTo(annotations.Writers{d1: {aliceLong}, d2: {bobLong}}.String())},
		{name: "a forged record is not taken", op: Update, user: "bob",
			old:        newParent(setAnn(annotations.Approvals, "["+e1+"]"), setAnn(annotations.ApprovalsBy, aliceLong+":"+d1)),
			new:        newParent(setAnn(annotations.Approvals, "["+e1+","+e2+"]"), setAnn(annotations.ApprovalsBy, aliceLong+":"+d1+"."+d2)),
			wantRecord: ptrTo(annotations.Writers{d1: {aliceLong}, d2: {bobLong}}.String())},
		{name: "the approvals removed", op: Update, user: "bob",
			old: newParent(setAnn(annotations.Approvals, "["+e1+"]"), setAnn(annotations.ApprovalsBy, aliceLong+":"+d1)),
			new: newParent(setAnn(annotations.ApprovalsBy, aliceLong+":"+d1)), wantRecord: ptrTo("")},
		{name: "approvals untouched", op: Update, user: "bob",
			old: newParent(setAnn(annotations.Approvals, "["+e1+"]"), setAnn(annotations.ApprovalsBy, aliceLong+":"+d1)),
			new: newParent(setAnn(annotations.Approvals, "["+e1+"]"), setAnn(annotations.ApprovalsBy, aliceLong+":"+d1), setAnn("team", "web"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := Input{Operation: tc.op, Child: parentRef, OldObject: tc.old, NewObject: tc.new, User: &user.DefaultInfo{Name: tc.user},
				FieldManager: "kubectl", Mode: ModeInputs{Default: annotations.ModeEnforce}, Now: now}
			d := Decide(in)
			if d.Result != Allow {
				t.Fatalf("%s/%s: %s", d.Result, d.Category, d.Reason)
			}
			stored := annotationsOf(tc.new)
			if stored == nil {
				stored = map[string]string{}
			}
			if d.ChildAnnotations != nil {
				for _, k := range d.ChildAnnotations.Remove {
					delete(stored, k)
				}
				for k, v := range d.ChildAnnotations.Set {
					stored[k] = v
				}
			}
			got, had := stored[annotations.ApprovalsBy]
			switch {
			case tc.wantRecord == nil:
				if had && got != annotationsOf(tc.old)[annotations.ApprovalsBy] {
					t.Errorf("the record changed to %q on a write that leaves the approvals", got)
				}
			case *tc.wantRecord == "":
				if had {
					t.Errorf("the record %q stays without approvals", got)
				}
			case got != *tc.wantRecord:
				t.Errorf("record %q, want %q", got, *tc.wantRecord)
			}
			if tc.op == Update && tc.wantRecord != nil && !d.OnStoredVersion {
				t.Error("a write that changes the record is not made on the version it was decided on")
			}
		})
	}
}

func ptrTo(s string) *string { return &s }

// A mode the parent's controller set before it was known, on a child it
// created or on the namespace, does not gate its drift; one a person set
// does.
func TestModesTheControllerSetDoNotGateIt(t *testing.T) {
	ctrlLong := controllerid.LongHash(ctrlUser)
	aliceLong := controllerid.LongHash("alice")
	tests := []struct {
		name       string
		in         func(in *Input)
		result     Result
		source     ModeSource
		wantWarned string
	}{
		{name: "the child's mode set by a person", in: func(in *Input) {
			setAnn(annotations.Mode, "log")(in.OldObject)
			setAnn(annotations.ModesBy, modesByHash(aliceLong, "log"))(in.OldObject)
		}, result: Allow, source: ModeFromObject},
		{name: "the child's mode set by the controller", in: func(in *Input) {
			setAnn(annotations.Mode, "log")(in.OldObject)
			setAnn(annotations.ModesBy, modesByHash(ctrlLong, "log"))(in.OldObject)
		}, result: Deny, source: ModeFromDefault, wantWarned: "kausality.io/mode=log on child apps/v1 ReplicaSet default/web-1 was made by the parent's own controller"},
		{name: "the child's mode set by the controller, then changed around the proxy", in: func(in *Input) {
			setAnn(annotations.Mode, "log")(in.OldObject)
			setAnn(annotations.ModesBy, modesByHash(ctrlLong, "enforce"))(in.OldObject)
		}, result: Allow, source: ModeFromObject},
		{name: "the namespace's mode set by a person", in: func(in *Input) {
			in.Mode.Namespace, in.Mode.NamespaceModesBy = "log", modesByHash(aliceLong, "log")
		}, result: Allow, source: ModeFromNamespace},
		{name: "the namespace's mode set by the controller", in: func(in *Input) {
			in.Mode.Namespace, in.Mode.NamespaceModesBy = "log", modesByHash(ctrlLong, "log")
		}, result: Deny, source: ModeFromDefault, wantWarned: "kausality.io/mode=log on namespace default was made by the parent's own controller"},
		{name: "the namespace's enforce mode lowered by the controller, under a default of log", in: func(in *Input) {
			in.Mode.Default = annotations.ModeLog
			in.Mode.Namespace = "log"
			in.Mode.NamespaceModesBy = modesByHash(ctrlLong, "log") + ":" + base64.RawURLEncoding.EncodeToString([]byte("enforce"))
		}, result: Deny, source: ModeFromNamespace, wantWarned: `the value before it, "enforce", does`},
		{name: "the namespace's enforce mode removed by the controller, under a default of log", in: func(in *Input) {
			in.Mode.Default = annotations.ModeLog
			in.Mode.NamespaceModesBy = "mode=" + ctrlLong + ":-:" + base64.RawURLEncoding.EncodeToString([]byte("enforce"))
		}, result: Deny, source: ModeFromNamespace, wantWarned: "the removal of kausality.io/mode on namespace default was made by the parent's own controller"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.in(&in)
			d := Decide(in)
			if d.Category != DriftUnapproved || d.Result != tc.result || d.ModeSource != tc.source {
				t.Fatalf("%s/%s from %s (%s), want %s/DriftUnapproved from %s", d.Result, d.Category, d.ModeSource, d.Reason, tc.result, tc.source)
			}
			warned := strings.Join(d.Warnings, "\n")
			if tc.wantWarned != "" && !strings.Contains(warned, tc.wantWarned) {
				t.Errorf("warnings %q do not say %q", d.Warnings, tc.wantWarned)
			}
			if tc.wantWarned == "" && strings.Contains(warned, "own controller") {
				t.Errorf("warnings %q set a mode aside", d.Warnings)
			}
		})
	}
}

// An allowance mode the parent's controller set on the parent does not
// decide how its writes are checked.
func TestAnAllowanceModeTheControllerSetDoesNotCheckIt(t *testing.T) {
	granted := `[{"kind":"ReplicaSet","mutation":"spec.replicas","generation":2,"initiator":"alice","policy":"deployment-replicas","trace":[{"kind":"Deployment","name":"web","generation":2,"field":"spec.replicas"}]}]`
	ctrl := &user.DefaultInfo{Name: testController}
	for _, tc := range []struct {
		setter   string
		wantDeny bool
	}{{setter: "alice", wantDeny: false}, {setter: testController, wantDeny: true}} {
		t.Run("set by "+tc.setter, func(t *testing.T) {
			parent := allowanceObject("Deployment", 2, 4, "app:1", map[string]string{annotations.Allowances: granted,
				annotations.AllowanceMode: "shadow",
				annotations.ModesBy:       "allowance-mode=" + controllerid.LongHash(tc.setter) + ":" + annotations.Digest([]byte("shadow"))})
			in := Input{Operation: Update, DesiredChanged: true, User: ctrl, Parent: parent, Settle: &settle.Facts{SettledAt: 1},
				Child:     ObjectRef{Kind: "ReplicaSet", Name: "web-1"},
				OldObject: allowanceObject("ReplicaSet", 1, 4, "app:1", nil), NewObject: allowanceObject("ReplicaSet", 1, 4, "evil:1", nil)}
			got := DecideAllowances(context.Background(), Decision{Result: Allow, Category: Expected}, in,
				AllowanceInputs{Policies: allowanceTestPolicies(), NamespaceAnnotations: map[string]string{annotations.AllowanceMode: "enforce"}})
			if (got.Result == Deny) != tc.wantDeny {
				t.Fatalf("result %s (%s), want deny=%v", got.Result, got.Message, tc.wantDeny)
			}
			if warned := strings.Join(got.Warnings, "\n"); tc.wantDeny != strings.Contains(warned, "kausality.io/allowance-mode=shadow on parent apps/v1 Deployment ns/web was made by the parent's own controller") {
				t.Errorf("warnings %q", got.Warnings)
			}
		})
	}
}

func modesByHash(userHash, mode string) string {
	return "mode=" + userHash + ":" + annotations.Digest([]byte(mode))
}

// enforce holds a controller back whoever set it: set by the controller
// itself, it is not set aside for a laxer level below.
func TestAnEnforceModeTheControllerSetStillHoldsIt(t *testing.T) {
	in := base()
	in.Mode.Default = annotations.ModeLog
	in.Mode.Namespace, in.Mode.NamespaceModesBy = "enforce", modesByHash(controllerid.LongHash(ctrlUser), "enforce")
	d := Decide(in)
	if d.Result != Deny || d.ModeSource != ModeFromNamespace {
		t.Fatalf("%s/%s in %s from %s, want Deny in the namespace's enforce", d.Result, d.Category, d.Mode, d.ModeSource)
	}
	if strings.Contains(strings.Join(d.Warnings, "\n"), "own controller") {
		t.Errorf("warnings %q set the mode aside", d.Warnings)
	}
}
