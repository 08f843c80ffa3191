package decision

import (
	"encoding/json"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/approval"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

// A controller is known only once its status writes name it, so on a
// brand-new parent it may write approvals as a person would. Those it
// alone gave approve none of its drift, once it is known.
func TestApprovalsOnlyTheControllerGaveDoNotApproveItsDrift(t *testing.T) {
	const entry = `{"apiVersion":"*","kind":"*","name":"*","mode":"always"}`
	digest := approval.EntryDigest(json.RawMessage(entry))
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
	d1, d2 := approval.EntryDigest(json.RawMessage(e1)), approval.EntryDigest(json.RawMessage(e2))
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
			wantRecord: ptrTo(approval.Writers{d1: {aliceLong}, d2: {bobLong}}.String())},
		{name: "a forged record is not taken", op: Update, user: "bob",
			old:        newParent(setAnn(annotations.Approvals, "["+e1+"]"), setAnn(annotations.ApprovalsBy, aliceLong+":"+d1)),
			new:        newParent(setAnn(annotations.Approvals, "["+e1+","+e2+"]"), setAnn(annotations.ApprovalsBy, aliceLong+":"+d1+"."+d2)),
			wantRecord: ptrTo(approval.Writers{d1: {aliceLong}, d2: {bobLong}}.String())},
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
