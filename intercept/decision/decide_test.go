package decision

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/approval"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
	"github.com/kausality-io/kausality-proxy/intercept/desired"
	"github.com/kausality-io/kausality-proxy/intercept/history"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
)

var now = time.Date(2026, 1, 24, 10, 30, 0, 0, time.UTC)

const (
	ctrlUser  = "system:serviceaccount:kube-system:deployment-controller"
	ctrlHash  = "1likq" // controllerid.Hash(ctrlUser)
	aliceHash = "c5xzg" // controllerid.Hash("alice")
	kcm       = "kube-controller-manager"

	parentTrace   = `[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","generation":5,"user":"alice","timestamp":"2026-01-24T10:00:00Z"}]`
	oldChildTrace = `[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","generation":4,"user":"alice","timestamp":"2026-01-01T00:00:00Z"},{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":2,"user":"system:serviceaccount:kube-system:deployment-controller","timestamp":"2026-01-01T00:00:01Z"}]`
)

var rsRef = ObjectRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "default", Name: "web-1"}
var parentRef = ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "default", Name: "web"}

// parentUID is the uid of the parent (and of the object a status write
// writes, which stands in the parent's place in those tests).
const parentUID types.UID = "p-uid"

func rsHop(user string, gen int) string {
	return `{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":` + itoa(int64(gen)) +
		`,"user":"` + user + `","timestamp":"2026-01-24T10:30:00Z"}`
}

// hopOnParent is the parent's trace extended by hop.
func hopOnParent(hop string) string { return parentTrace[:len(parentTrace)-1] + "," + hop + "]" }

func origin(hop string) string { return "[" + hop + "]" }

type mut func(u *unstructured.Unstructured)

func setAnn(k, v string) mut {
	return func(u *unstructured.Unstructured) {
		a := u.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a[k] = v
		u.SetAnnotations(a)
	}
}

func delAnn(k string) mut {
	return func(u *unstructured.Unstructured) {
		a := u.GetAnnotations()
		delete(a, k)
		u.SetAnnotations(a)
	}
}

func obsGen(g int64) mut {
	return func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, g, "status", "observedGeneration")
	}
}

func noObsGen(u *unstructured.Unstructured) {
	unstructured.RemoveNestedField(u.Object, "status", "observedGeneration")
}

func noManagedFields(u *unstructured.Unstructured) { u.SetManagedFields(nil) }

func conditions(typeStatus ...string) mut {
	return func(u *unstructured.Unstructured) {
		var cs []interface{}
		for i := 0; i+1 < len(typeStatus); i += 2 {
			cs = append(cs, map[string]interface{}{"type": typeStatus[i], "status": typeStatus[i+1]})
		}
		_ = unstructured.SetNestedSlice(u.Object, cs, "status", "conditions")
	}
}

func deleting(u *unstructured.Unstructured) {
	_ = unstructured.SetNestedField(u.Object, "2026-01-24T10:00:00Z", "metadata", "deletionTimestamp")
}

// mkParent: Deployment default/web, generation 5, observedGeneration 5
// (drift for its controller), Available=True, phase initialized, trace,
// status.observedGeneration owned by kube-controller-manager.
func mkParent(ms ...mut) *unstructured.Unstructured {
	p := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apps/v1",
		"kind":       "Deployment",
		"metadata": map[string]interface{}{
			"name": "web", "namespace": "default", "uid": "p-uid", "resourceVersion": "100", "generation": int64(5),
			"annotations": map[string]interface{}{annotations.Trace: parentTrace, annotations.Phase: "initialized"},
			"managedFields": []interface{}{
				map[string]interface{}{"manager": "kubectl-client-side-apply", "operation": "Update", "fieldsType": "FieldsV1",
					"fieldsV1": map[string]interface{}{"f:spec": map[string]interface{}{"f:replicas": map[string]interface{}{}}}},
				map[string]interface{}{"manager": kcm, "operation": "Update", "subresource": "status", "fieldsType": "FieldsV1",
					"fieldsV1": map[string]interface{}{"f:status": map[string]interface{}{"f:observedGeneration": map[string]interface{}{}}}},
			},
		},
		"spec":   map[string]interface{}{"replicas": int64(3)},
		"status": map[string]interface{}{"observedGeneration": int64(5), "conditions": []interface{}{map[string]interface{}{"type": "Available", "status": "True"}}},
	}}
	for _, m := range ms {
		m(p)
	}
	return p
}

// mkChild: ReplicaSet default/web-1, generation 2, owned by the parent,
// with its own trace and the controller as single updater.
func mkChild(replicas int64, ms ...mut) *unstructured.Unstructured {
	c := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apps/v1",
		"kind":       "ReplicaSet",
		"metadata": map[string]interface{}{
			"name": "web-1", "namespace": "default", "generation": int64(2),
			"annotations":     map[string]interface{}{annotations.Trace: oldChildTrace, annotations.Updaters: ctrlHash, "deployment.kubernetes.io/revision": "1"},
			"ownerReferences": []interface{}{map[string]interface{}{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "p-uid", "controller": true}},
		},
		"spec": map[string]interface{}{"replicas": replicas},
	}}
	for _, m := range ms {
		m(c)
	}
	return c
}

// base: the controller updates the ReplicaSet (replicas 1 → 3) while the
// parent is reconciled: drift, enforce by default.
func base() Input {
	return Input{
		Operation:      Update,
		Child:          rsRef,
		OldObject:      mkChild(1),
		NewObject:      mkChild(3),
		DesiredChanged: true,
		Changes:        []desired.Change{{Path: "spec.replicas", Old: "1", New: "3"}},
		Parent:         mkParent(),
		User:           &user.DefaultInfo{Name: ctrlUser},
		FieldManager:   kcm,
		Mode:           ModeInputs{Default: annotations.ModeEnforce},
		Now:            now,
	}
}

// pruneInput: the controller deletes ReplicaSet web-1 (revision 1, scaled
// down) of a Deployment at revision 3 with the given revisionHistoryLimit,
// which also owns web-2 (retired) and web-3 (current).
func pruneInput(in *Input, limit int64) {
	in.Operation = Delete
	in.NewObject = nil
	in.Changes = nil
	in.OldObject = mkChild(0, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, map[string]interface{}{"replicas": int64(0), "observedGeneration": int64(2)}, "status")
	})
	setAnn(history.RevisionAnnotation, "3")(in.Parent)
	_ = unstructured.SetNestedField(in.Parent.Object, limit, "spec", "revisionHistoryLimit")
	in.OwnedRevisions = []history.Revision{{Name: "web-1", Number: 1}, {Name: "web-2", Number: 2}, {Name: "web-3", Number: 3}}
}

func alice(in *Input) {
	in.User = &user.DefaultInfo{Name: "alice"}
	in.FieldManager = "kubectl-edit"
}

type want struct {
	result          Result
	category        Category
	mode            annotations.DriftMode
	modeSource      ModeSource
	drift           bool
	approval        *approval.Approval
	rejection       *approval.Rejection
	consume         bool
	approvalsUpdate *ApprovalsUpdate
	snoozed         bool
	report          ReportPhase
	warnings        []string
	child           *AnnotationChanges
	parentWrites    []SideWrite
	traceOrigin     bool
}

func set(kv ...string) *AnnotationChanges {
	c := &AnnotationChanges{Set: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		c.Set[kv[i]] = kv[i+1]
	}
	return c
}

func js(v interface{}) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// withConsumedRaw sets u.ConsumedRaw to the consumed entry as written in
// u.Old: that is the form a refused write puts back.
func withConsumedRaw(u ApprovalsUpdate) *ApprovalsUpdate {
	entries, _, _ := annotations.ParseApprovalEntries(u.Old)
	for _, e := range entries {
		if e.Valid && e.Approval == u.Consumed {
			u.ConsumedRaw = e.Raw
			break
		}
	}
	return &u
}

func check(t *testing.T, d Decision, w want) {
	t.Helper()
	eq := func(field string, got, want interface{}) {
		t.Helper()
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s:\n got  %s\n want %s", field, js(got), js(want))
		}
	}
	eq("result", d.Result, w.result)
	eq("category", d.Category, w.category)
	eq("mode", d.Mode, w.mode)
	eq("modeSource", d.ModeSource, w.modeSource)
	eq("drift", d.Drift, w.drift)
	eq("approval", d.Approval, w.approval)
	eq("rejection", d.Rejection, w.rejection)
	eq("consumeOnce", d.ConsumeOnce, w.consume)
	if u := w.approvalsUpdate; u != nil && u.ConsumedRaw == nil {
		w.approvalsUpdate = withConsumedRaw(*u)
	}
	eq("approvalsUpdate", d.ApprovalsUpdate, w.approvalsUpdate)
	eq("snoozed", d.Snooze.Snoozed, w.snoozed)
	eq("report", d.Report, w.report)
	eq("warnings", d.Warnings, w.warnings)
	eq("childAnnotations", d.ChildAnnotations, w.child)
	eq("parentWrites", withoutSeen(d.ParentWrites), w.parentWrites)
	eq("traceOrigin", d.TraceOrigin, w.traceOrigin)
	if d.Result == Deny && (d.Message == "" || len(d.Causes) == 0) {
		t.Errorf("denial without message or causes: %q %v", d.Message, d.Causes)
	}
	if d.Result == Allow && d.Category != DriftUnapproved && d.Message != "" {
		t.Errorf("allowed decision with message %q", d.Message)
	}
}

// withoutSeen drops what the decision saw, which TestRebase covers.
func withoutSeen(writes []SideWrite) []SideWrite {
	if writes == nil {
		return nil
	}
	out := make([]SideWrite, len(writes))
	for i, w := range writes {
		w.Seen = nil
		out[i] = w
	}
	return out
}

func TestDecide(t *testing.T) {
	ctrlHop := rsHop(ctrlUser, 3)
	aliceHop := rsHop("alice", 3)
	a5once := approval.Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5, Mode: approval.Once}
	a5gen := approval.Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5, Mode: approval.Generation}
	aAlways := approval.Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Mode: approval.Always}
	stale := `{"apiVersion":"v1","kind":"ConfigMap","name":"cfg","generation":4,"mode":"once"}`
	otherAlways := `{"apiVersion":"v1","kind":"Secret","name":"s","mode":"always"}`
	unreadable := `{ "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1", "generation": 5, "mode": "twice" }`
	rej := approval.Rejection{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Reason: "needs SRE review"}
	parentWithAnn := func(kv ...string) func(in *Input) {
		return func(in *Input) {
			for i := 0; i+1 < len(kv); i += 2 {
				setAnn(kv[i], kv[i+1])(in.Parent)
			}
		}
	}
	unapprovedEnforce := want{result: Deny, category: DriftUnapproved, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, drift: true, report: ReportDetected}

	tests := []struct {
		name string
		in   func(in *Input)
		want want
	}{
		// --- no parent -------------------------------------------------
		{
			name: "no parent: update starts a new trace and records the updater",
			in: func(in *Input) {
				alice(in)
				in.Parent = nil
			},
			want: want{result: Allow, category: NoParent, traceOrigin: true,
				child: set(annotations.Trace, origin(aliceHop), annotations.Updaters, ctrlHash+","+aliceHash)},
		},
		{
			name: "no parent: create drops forged system annotations, keeps user ones",
			in: func(in *Input) {
				alice(in)
				in.Parent, in.Operation, in.OldObject = nil, Create, nil
				in.NewObject = mkChild(3, setAnn(annotations.Controllers, "forged"), setAnn(annotations.Mode, "log"), setAnn("kausality.io/trace-ticket", "T-1"))
			},
			want: want{result: Allow, category: NoParent, traceOrigin: true,
				child: &AnnotationChanges{
					Set: map[string]string{
						annotations.Trace:    `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":1,"user":"alice","timestamp":"2026-01-24T10:30:00Z","labels":{"ticket":"T-1"}}]`,
						annotations.Updaters: aliceHash,
						annotations.ModesBy:  modesBy("alice", "log"),
					},
					Remove: []string{annotations.Controllers},
				}},
		},
		// --- no desired-state change ------------------------------------
		{
			name: "metadata-only change by a user is not drift and needs no annotation change",
			in: func(in *Input) {
				alice(in)
				in.DesiredChanged, in.Changes = false, nil
				in.NewObject = mkChild(1, setAnn("team", "a"))
			},
			want: want{result: Allow, category: NoDesiredChange},
		},
		{
			name: "status-only change through the main resource is not drift",
			in: func(in *Input) {
				in.DesiredChanged, in.Changes = false, nil
				in.NewObject = mkChild(1, func(u *unstructured.Unstructured) {
					_ = unstructured.SetNestedField(u.Object, int64(3), "status", "readyReplicas")
				})
			},
			want: want{result: Allow, category: NoDesiredChange},
		},
		{
			name: "metadata-only controller sync: annotations copied from the parent are replaced by the stored ones",
			in: func(in *Input) {
				in.DesiredChanged, in.Changes = false, nil
				in.NewObject = mkChild(1, setAnn(annotations.Trace, parentTrace), setAnn(annotations.Approvals, "[]"), delAnn(annotations.Updaters))
			},
			want: want{result: Allow, category: NoDesiredChange,
				child: &AnnotationChanges{Set: map[string]string{annotations.Trace: oldChildTrace, annotations.Updaters: ctrlHash}, Remove: []string{annotations.Approvals}}},
		},
		{
			name: "metadata-only user edit: user annotations editable, system annotations protected",
			in: func(in *Input) {
				alice(in)
				in.DesiredChanged, in.Changes = false, nil
				in.OldObject = mkChild(1, setAnn(annotations.Mode, "enforce"))
				in.NewObject = mkChild(1, setAnn(annotations.Mode, "log"), setAnn("kausality.io/trace-ticket", "T-2"), setAnn(annotations.Updaters, aliceHash), setAnn(annotations.Controllers, aliceHash))
			},
			want: want{result: Allow, category: NoDesiredChange,
				child: &AnnotationChanges{Set: map[string]string{annotations.Updaters: ctrlHash, annotations.ModesBy: modesBy("alice", "log") + ":" + base64.RawURLEncoding.EncodeToString([]byte("enforce"))}, Remove: []string{annotations.Controllers}}},
		},
		// --- lifecycle -------------------------------------------------
		{
			name: "parent deleting: allowed, no drift check, even when frozen",
			in: func(in *Input) {
				deleting(in.Parent)
				setAnn(annotations.Freeze, "true")(in.Parent)
			},
			want: want{result: Allow, category: ParentDeleting, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, traceOrigin: true,
				child: set(annotations.Trace, origin(ctrlHop))},
		},
		{
			name: "parent initializing: allowed, controller hop while not yet observed",
			in: func(in *Input) {
				delAnn(annotations.Phase)(in.Parent)
				conditions("Available", "False")(in.Parent)
				noObsGen(in.Parent)
			},
			want: want{result: Allow, category: ParentInitializing, mode: annotations.ModeEnforce, modeSource: ModeFromDefault,
				child: set(annotations.Trace, hopOnParent(ctrlHop))},
		},
		{
			name: "a new parent's first child, before any status names its controller: a hop of the parent's trace",
			in: func(in *Input) {
				delAnn(annotations.Phase)(in.Parent)
				unstructured.RemoveNestedField(in.Parent.Object, "status")
				noManagedFields(in.Parent)
				in.Operation, in.OldObject = Create, nil
			},
			want: want{result: Allow, category: ParentInitializing, mode: annotations.ModeEnforce, modeSource: ModeFromDefault,
				child: set(annotations.Trace, hopOnParent(rsHop(ctrlUser, 1)))},
		},
		{
			name: "phase high-water mark: flapping conditions keep the parent initialized",
			in: func(in *Input) {
				conditions("Available", "False", "Ready", "False")(in.Parent)
			},
			want: unapprovedEnforce,
		},
		{
			// A child write never annotates the parent with the high-water
			// mark: on a Deployment that would bump the generation and hide
			// drift. The parent's own status write persists it.
			name: "newly initialized parent: a child write does not write the high-water mark",
			in: func(in *Input) {
				delAnn(annotations.Phase)(in.Parent)
				obsGen(4)(in.Parent)
			},
			want: want{result: Allow, category: Expected, mode: annotations.ModeEnforce, modeSource: ModeFromDefault,
				child: set(annotations.Trace, hopOnParent(ctrlHop))},
		},
		// --- freeze ----------------------------------------------------
		{
			name: "frozen parent blocks even expected changes",
			in: func(in *Input) {
				obsGen(4)(in.Parent)
				setAnn(annotations.Freeze, `{"user":"bob","reason":"incident 7","at":"2026-01-24T09:00:00Z"}`)(in.Parent)
			},
			want: want{result: Deny, category: Frozen, mode: annotations.ModeEnforce, modeSource: ModeFromDefault},
		},
		{
			name: "frozen parent blocks other actors too, also in log mode",
			in: func(in *Input) {
				alice(in)
				in.Mode.Default = annotations.ModeLog
				setAnn(annotations.Freeze, "true")(in.Parent)
			},
			want: want{result: Deny, category: Frozen, mode: annotations.ModeLog, modeSource: ModeFromDefault},
		},
		{
			name: "a freeze holds on a parent that has not initialized (a StatefulSet before it was ever ready)",
			in: func(in *Input) {
				delAnn(annotations.Phase)(in.Parent)
				unstructured.RemoveNestedField(in.Parent.Object, "status", "conditions")
				setAnn(annotations.Freeze, "true")(in.Parent)
			},
			want: want{result: Deny, category: Frozen, mode: annotations.ModeEnforce, modeSource: ModeFromDefault},
		},
		// --- intent: settledness decides, not generation numbers ----------
		{
			name: "rollout: observedGeneration caught up, but the parent has not settled at its new spec: expected",
			in: func(in *Input) {
				in.Settle = &settle.Facts{Known: true, Reason: "its spec changed since it last settled"}
			},
			want: want{result: Allow, category: Expected, mode: annotations.ModeEnforce, modeSource: ModeFromDefault,
				child: set(annotations.Trace, hopOnParent(ctrlHop))},
		},
		{
			name: "an annotation-only generation bump does not open an expected window: drift",
			in: func(in *Input) {
				obsGen(4)(in.Parent)
				in.Settle = &settle.Facts{AtCurrentSpec: true, Known: true, Reason: "its spec has not changed since it last settled"}
			},
			want: unapprovedEnforce,
		},
		{
			name: "freeze false is not frozen",
			in:   parentWithAnn(annotations.Freeze, "false"),
			want: unapprovedEnforce,
		},
		{
			name: "malformed freeze counts as frozen and says so",
			in:   parentWithAnn(annotations.Freeze, `{"user":`),
			want: want{result: Deny, category: Frozen, mode: annotations.ModeEnforce, modeSource: ModeFromDefault,
				warnings: []string{"kausality: malformed annotation kausality.io/freeze on parent apps/v1 Deployment default/web: unexpected end of JSON input; treated as frozen"}},
		},
		// --- expected ----------------------------------------------------
		{
			name: "expected: controller reconciles a changed parent, trace hop",
			in:   func(in *Input) { obsGen(4)(in.Parent) },
			want: want{result: Allow, category: Expected, mode: annotations.ModeEnforce, modeSource: ModeFromDefault,
				child: set(annotations.Trace, hopOnParent(ctrlHop))},
		},
		{
			name: "expected: stale approvals are pruned after success",
			in: func(in *Input) {
				obsGen(4)(in.Parent)
				setAnn(annotations.Approvals, "["+stale+","+otherAlways+"]")(in.Parent)
			},
			want: want{result: Allow, category: Expected, mode: annotations.ModeEnforce, modeSource: ModeFromDefault,
				child: set(annotations.Trace, hopOnParent(ctrlHop)),
				parentWrites: []SideWrite{{Target: parentRef, TargetUID: parentUID, AnnotationChanges: *set(annotations.Approvals, "["+otherAlways+"]"),
					Reasons: []string{"prune 1 stale approval(s): the parent's spec is at generation 5"}}}},
		},
		{
			name: "expected: pruning keeps what the proxy cannot read, as written",
			in: func(in *Input) {
				obsGen(4)(in.Parent)
				setAnn(annotations.Approvals, "["+unreadable+","+stale+","+otherAlways+"]")(in.Parent)
			},
			want: want{result: Allow, category: Expected, mode: annotations.ModeEnforce, modeSource: ModeFromDefault,
				child: set(annotations.Trace, hopOnParent(ctrlHop)),
				parentWrites: []SideWrite{{Target: parentRef, TargetUID: parentUID, AnnotationChanges: *set(annotations.Approvals, "["+unreadable+","+otherAlways+"]"),
					Reasons: []string{"prune 1 stale approval(s): the parent's spec is at generation 5"}}}},
		},
		{
			name: "expected: controller writes keep the stored user annotations",
			in: func(in *Input) {
				obsGen(4)(in.Parent)
				in.OldObject = mkChild(1, setAnn(annotations.Mode, "enforce"), setAnn("kausality.io/trace-ticket", "T-9"))
				in.NewObject = mkChild(3, setAnn(annotations.Approvals, "[]"), setAnn(annotations.Phase, "initialized"))
			},
			want: want{result: Allow, category: Expected, mode: annotations.ModeEnforce, modeSource: ModeFromObject,
				child: &AnnotationChanges{
					Set: map[string]string{
						annotations.Trace: hopOnParent(`{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":3,"user":"` + ctrlUser + `","timestamp":"2026-01-24T10:30:00Z","labels":{"ticket":"T-9"}}`),
						annotations.Mode:  "enforce", "kausality.io/trace-ticket": "T-9",
					},
					Remove: []string{annotations.Approvals, annotations.Phase},
				}},
		},
		{
			name: "parent without any observedGeneration: treated as expected",
			in: func(in *Input) {
				noObsGen(in.Parent)
				noManagedFields(in.Parent)
				setAnn(annotations.Controllers, ctrlHash)(in.Parent)
			},
			want: want{result: Allow, category: Expected, mode: annotations.ModeEnforce, modeSource: ModeFromDefault,
				child: set(annotations.Trace, hopOnParent(ctrlHop))},
		},
		{
			name: "malformed parent trace: trace restarts with a warning",
			in: func(in *Input) {
				obsGen(4)(in.Parent)
				setAnn(annotations.Trace, "[{")(in.Parent)
			},
			want: want{result: Allow, category: Expected, mode: annotations.ModeEnforce, modeSource: ModeFromDefault,
				child:    set(annotations.Trace, origin(ctrlHop)),
				warnings: []string{"kausality: malformed annotation kausality.io/trace on parent apps/v1 Deployment default/web: malformed trace: invalid JSON; trace restarted at this object"}},
		},
		// --- drift: approvals --------------------------------------------
		{
			name: "drift without approval is denied in enforce mode",
			want: unapprovedEnforce,
		},
		{
			name: "drift with once approval: allowed, consumed before forwarding, stale pruned",
			in:   parentWithAnn(annotations.Approvals, "["+stale+`,{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5},`+otherAlways+"]"),
			want: want{result: Allow, category: DriftApproved, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, drift: true,
				approval: &approval.Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5},
				consume:  true, report: ReportResolved,
				approvalsUpdate: &ApprovalsUpdate{Target: parentRef, ResourceVersion: "100",
					Old:      "[" + stale + `,{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5},` + otherAlways + "]",
					New:      "[" + otherAlways + "]",
					Consumed: approval.Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5},
					Pruned:   []approval.Approval{{APIVersion: "v1", Kind: "ConfigMap", Name: "cfg", Generation: 4, Mode: approval.Once}}},
				child: set(annotations.Trace, hopOnParent(ctrlHop))},
		},
		{
			name: "drift with once approval: consumption keeps what the proxy cannot read, as written",
			in:   parentWithAnn(annotations.Approvals, "["+unreadable+`,{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5}]`),
			want: want{result: Allow, category: DriftApproved, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, drift: true,
				approval: &approval.Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5},
				consume:  true, report: ReportResolved,
				warnings: []string{`kausality: malformed annotation kausality.io/approvals on parent apps/v1 Deployment default/web: entry 0: unknown mode "twice" (want once, generation or always); entry ignored (kept as written)`},
				approvalsUpdate: &ApprovalsUpdate{Target: parentRef, ResourceVersion: "100",
					Old:      "[" + unreadable + `,{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5}]`,
					New:      "[" + unreadable + "]",
					Consumed: approval.Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5}},
				child: set(annotations.Trace, hopOnParent(ctrlHop))},
		},
		{
			name: "once approval for another generation does not apply",
			in:   parentWithAnn(annotations.Approvals, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":6,"mode":"once"}]`),
			want: unapprovedEnforce,
		},
		{
			name: "drift with generation approval: allowed, not consumed, stale pruned after success",
			in:   parentWithAnn(annotations.Approvals, "["+stale+`,{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"generation"}]`),
			want: want{result: Allow, category: DriftApproved, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, drift: true,
				approval: &a5gen, report: ReportResolved,
				child: set(annotations.Trace, hopOnParent(ctrlHop)),
				parentWrites: []SideWrite{{Target: parentRef, TargetUID: parentUID,
					AnnotationChanges: *set(annotations.Approvals, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"generation"}]`),
					Reasons:           []string{"prune 1 stale approval(s): the parent's spec is at generation 5"}}}},
		},
		{
			name: "drift with always approval",
			in:   parentWithAnn(annotations.Approvals, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","mode":"always"}]`),
			want: want{result: Allow, category: DriftApproved, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, drift: true,
				approval: &aAlways, report: ReportResolved,
				child: set(annotations.Trace, hopOnParent(ctrlHop))},
		},
		{
			name: "only stale approvals: pruned, and the last one removes the annotation (log mode)",
			in: func(in *Input) {
				in.Mode.Default = annotations.ModeLog
				setAnn(annotations.Approvals, "["+stale+"]")(in.Parent)
			},
			want: want{result: Allow, category: DriftUnapproved, mode: annotations.ModeLog, modeSource: ModeFromDefault, drift: true, report: ReportDetected, traceOrigin: true,
				warnings: []string{`kausality: drift allowed in log mode: UPDATE of apps/v1 ReplicaSet default/web-1 by the parent's controller field manager "kube-controller-manager" (user system:serviceaccount:kube-system:deployment-controller) changes spec.replicas (1 → 3) while its parent apps/v1 Deployment default/web (generation 5, observedGeneration 5) is reconciled; approve with kausality.io/approvals entry {"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"once"}`},
				child:    set(annotations.Trace, origin(ctrlHop)),
				parentWrites: []SideWrite{{Target: parentRef, TargetUID: parentUID, AnnotationChanges: AnnotationChanges{Remove: []string{annotations.Approvals}},
					Reasons: []string{"prune 1 stale approval(s): the parent's spec is at generation 5"}}}},
		},
		{
			name: "malformed approvals count as none and say so",
			in:   parentWithAnn(annotations.Approvals, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","mode":"always"`),
			want: want{result: Deny, category: DriftUnapproved, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, drift: true, report: ReportDetected,
				warnings: []string{"kausality: malformed annotation kausality.io/approvals on parent apps/v1 Deployment default/web: unexpected end of JSON input; treated as no approvals"}},
		},
		// --- drift: rejections -------------------------------------------
		{
			name: "rejection beats approval",
			in: parentWithAnn(annotations.Approvals, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","mode":"always"}]`,
				annotations.Rejections, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","reason":"needs SRE review"}]`),
			want: want{result: Deny, category: DriftRejected, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, drift: true, rejection: &rej},
		},
		{
			name: "rejection without generation applies at any generation, also in log mode",
			in: func(in *Input) {
				in.Mode.Default = annotations.ModeLog
				setAnn(annotations.Rejections, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","reason":"needs SRE review"}]`)(in.Parent)
			},
			want: want{result: Deny, category: DriftRejected, mode: annotations.ModeLog, modeSource: ModeFromDefault, drift: true, rejection: &rej},
		},
		{
			name: "rejection for the current generation applies",
			in:   parentWithAnn(annotations.Rejections, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"reason":"gen 5 is bad"}]`),
			want: want{result: Deny, category: DriftRejected, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, drift: true,
				rejection: &approval.Rejection{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5, Reason: "gen 5 is bad"}},
		},
		{
			name: "rejection for an older generation is inactive: approval applies",
			in: parentWithAnn(annotations.Rejections, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":4,"reason":"old"}]`,
				annotations.Approvals, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"once"}]`),
			want: want{result: Allow, category: DriftApproved, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, drift: true,
				approval: &a5once, consume: true, report: ReportResolved,
				approvalsUpdate: &ApprovalsUpdate{Target: parentRef, ResourceVersion: "100",
					Old: `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"once"}]`, New: "", Consumed: a5once},
				child: set(annotations.Trace, hopOnParent(ctrlHop))},
		},
		{
			name: "malformed rejections count as rejected and say so",
			in: parentWithAnn(annotations.Rejections, `not json`,
				annotations.Approvals, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","mode":"always"}]`),
			want: want{result: Deny, category: DriftRejected, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, drift: true,
				rejection: &approval.Rejection{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1",
					Reason: "the parent's kausality.io/rejections annotation is malformed; every child counts as rejected until it is fixed"},
				warnings: []string{"kausality: malformed annotation kausality.io/rejections on parent apps/v1 Deployment default/web: invalid character 'o' in literal null (expecting 'u'); treated as rejected"}},
		},
		// --- snooze --------------------------------------------------------
		{
			name: "snooze active: still denied, no notification",
			in:   parentWithAnn(annotations.SnoozeUntil, "2026-01-25T00:00:00Z"),
			want: want{result: Deny, category: DriftUnapproved, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, drift: true, snoozed: true, report: ReportNone},
		},
		{
			name: "snooze expired: notification sent",
			in:   parentWithAnn(annotations.SnoozeUntil, "2026-01-24T10:29:59Z"),
			want: unapprovedEnforce,
		},
		{
			name: "malformed snooze: not snoozed, says so",
			in:   parentWithAnn(annotations.SnoozeUntil, "soon"),
			want: want{result: Deny, category: DriftUnapproved, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, drift: true, report: ReportDetected,
				warnings: []string{`kausality: malformed annotation kausality.io/snooze-until on parent apps/v1 Deployment default/web: parsing time "soon" as "2006-01-02T15:04:05Z07:00": cannot parse "soon" as "2006"; treated as not snoozed`}},
		},
		// --- mode precedence -------------------------------------------------
		{
			name: "object annotation (stored) beats namespace",
			in: func(in *Input) {
				in.OldObject = mkChild(1, setAnn(annotations.Mode, "log"))
				in.NewObject = mkChild(3, setAnn(annotations.Mode, "log"))
				in.Mode = ModeInputs{Namespace: "enforce", Controller: "enforce", Default: annotations.ModeEnforce}
			},
			want: want{result: Allow, category: DriftUnapproved, mode: annotations.ModeLog, modeSource: ModeFromObject, drift: true, report: ReportDetected, traceOrigin: true,
				warnings: []string{`kausality: drift allowed in log mode: UPDATE of apps/v1 ReplicaSet default/web-1 by the parent's controller field manager "kube-controller-manager" (user system:serviceaccount:kube-system:deployment-controller) changes spec.replicas (1 → 3) while its parent apps/v1 Deployment default/web (generation 5, observedGeneration 5) is reconciled; approve with kausality.io/approvals entry {"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"once"}`},
				child:    set(annotations.Trace, origin(ctrlHop))},
		},
		{
			name: "a write cannot downgrade itself: mode log only in the new object",
			in: func(in *Input) {
				in.NewObject = mkChild(3, setAnn(annotations.Mode, "log"))
				in.Mode = ModeInputs{Namespace: "enforce", Default: annotations.ModeLog}
			},
			want: want{result: Deny, category: DriftUnapproved, mode: annotations.ModeEnforce, modeSource: ModeFromNamespace, drift: true, report: ReportDetected},
		},
		{
			name: "namespace beats controller",
			in: func(in *Input) {
				in.Mode = ModeInputs{Namespace: "enforce", Controller: "log", Default: annotations.ModeLog}
			},
			want: want{result: Deny, category: DriftUnapproved, mode: annotations.ModeEnforce, modeSource: ModeFromNamespace, drift: true, report: ReportDetected},
		},
		{
			name: "controller beats default",
			in:   func(in *Input) { in.Mode = ModeInputs{Controller: "enforce", Default: annotations.ModeLog} },
			want: want{result: Deny, category: DriftUnapproved, mode: annotations.ModeEnforce, modeSource: ModeFromController, drift: true, report: ReportDetected},
		},
		{
			name: "unset default is log",
			in: func(in *Input) {
				in.Mode = ModeInputs{}
				in.Changes = nil
			},
			want: want{result: Allow, category: DriftUnapproved, mode: annotations.ModeLog, modeSource: ModeFromDefault, drift: true, report: ReportDetected, traceOrigin: true,
				warnings: []string{`kausality: drift allowed in log mode: UPDATE of apps/v1 ReplicaSet default/web-1 by the parent's controller field manager "kube-controller-manager" (user system:serviceaccount:kube-system:deployment-controller) changes its desired state while its parent apps/v1 Deployment default/web (generation 5, observedGeneration 5) is reconciled; approve with kausality.io/approvals entry {"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"once"}`},
				child:    set(annotations.Trace, origin(ctrlHop))},
		},
		{
			name: "unknown stored object mode is enforce and says so",
			in: func(in *Input) {
				in.OldObject = mkChild(1, setAnn(annotations.Mode, "lenient"))
				in.NewObject = mkChild(3, setAnn(annotations.Mode, "lenient"))
				in.Mode = ModeInputs{Namespace: "log", Default: annotations.ModeLog}
			},
			want: want{result: Deny, category: DriftUnapproved, mode: annotations.ModeEnforce, modeSource: ModeFromObject, drift: true, report: ReportDetected,
				warnings: []string{`kausality: malformed annotation kausality.io/mode on child apps/v1 ReplicaSet default/web-1 (stored): unknown mode "lenient" (want log or enforce); treated as enforce`}},
		},
		// --- other actors ----------------------------------------------------
		{
			name: "new origin: another field manager starts a new trace, keeps its user annotations",
			in: func(in *Input) {
				alice(in)
				in.NewObject = mkChild(3, setAnn("kausality.io/trace-ticket", "OPS-1"), setAnn(annotations.Trace, "forged"))
			},
			want: want{result: Allow, category: NewOrigin, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, traceOrigin: true,
				child: set(
					annotations.Trace, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":3,"user":"alice","timestamp":"2026-01-24T10:30:00Z","labels":{"ticket":"OPS-1"}}]`,
					annotations.Updaters, ctrlHash+","+aliceHash)},
		},
		// --- user-hash fallback ------------------------------------------------
		{
			name: "user hash: parent controllers and child updaters identify the controller: drift",
			in: func(in *Input) {
				noManagedFields(in.Parent)
				setAnn(annotations.Controllers, "aaaaa,"+ctrlHash)(in.Parent)
				in.OldObject = mkChild(1, setAnn(annotations.Updaters, aliceHash+","+ctrlHash))
				in.NewObject = mkChild(3, setAnn(annotations.Updaters, aliceHash+","+ctrlHash))
			},
			want: unapprovedEnforce,
		},
		{
			name: "a child's single updater never overrides the parent's controllers: drift",
			in: func(in *Input) {
				noManagedFields(in.Parent)
				setAnn(annotations.Controllers, ctrlHash)(in.Parent)
				in.OldObject = mkChild(1, setAnn(annotations.Updaters, aliceHash))
				in.NewObject = mkChild(3, setAnn(annotations.Updaters, aliceHash))
			},
			want: unapprovedEnforce,
		},
		{
			name: "the recorded controller is the controller under any field manager",
			in: func(in *Input) {
				setAnn(annotations.Controllers, ctrlHash)(in.Parent)
				in.FieldManager = "renamed-binary"
			},
			want: unapprovedEnforce,
		},
		{
			name: "a person sending the controller's field manager is a new origin",
			in: func(in *Input) {
				setAnn(annotations.Controllers, ctrlHash)(in.Parent)
				in.User = &user.DefaultInfo{Name: "alice"}
			},
			want: want{result: Allow, category: NewOrigin, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, traceOrigin: true,
				child: set(annotations.Trace, origin(`{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":3,"user":"alice","timestamp":"2026-01-24T10:30:00Z"}`),
					annotations.Updaters, ctrlHash+","+aliceHash)},
		},
		{
			name: "a new parent (no status yet): controller unknown, the child carries on the parent's trace",
			in: func(in *Input) {
				noManagedFields(in.Parent)
				in.OldObject = mkChild(1, setAnn(annotations.Updaters, aliceHash+","+ctrlHash))
				in.NewObject = mkChild(3, setAnn(annotations.Updaters, aliceHash+","+ctrlHash))
			},
			want: want{result: Allow, category: ControllerUnknown, mode: annotations.ModeEnforce, modeSource: ModeFromDefault,
				child: set(annotations.Trace, hopOnParent(ctrlHop))},
		},
		// --- self-healing -------------------------------------------------------
		{
			name: "a controller re-creating an ungated kind under a settled parent: traced, not gated",
			in: func(in *Input) {
				in.UngatedKinds = []UngatedKind{{Child: schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}}}
			},
			want: want{result: Allow, category: SelfHealing, mode: annotations.ModeEnforce, modeSource: ModeFromDefault,
				child: set(annotations.Trace, hopOnParent(ctrlHop))},
		},
		{
			name: "a kind ungated under its parent's kind: traced, not gated",
			in: func(in *Input) {
				in.UngatedKinds = []UngatedKind{{Child: schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}, Parent: schema.GroupKind{Group: "apps", Kind: "Deployment"}}}
			},
			want: want{result: Allow, category: SelfHealing, mode: annotations.ModeEnforce, modeSource: ModeFromDefault,
				child: set(annotations.Trace, hopOnParent(ctrlHop))},
		},
		{
			name: "a kind ungated under another parent kind is gated here",
			in: func(in *Input) {
				in.UngatedKinds = []UngatedKind{
					{Child: schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}, Parent: schema.GroupKind{Group: "example.com", Kind: "Deployment"}},
					{Child: schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}, Parent: schema.GroupKind{Group: "apps", Kind: "StatefulSet"}},
				}
			},
			want: unapprovedEnforce,
		},
		{
			name: "ungated kinds do not make a person's write anything but a new origin, nor lift a freeze",
			in: func(in *Input) {
				in.UngatedKinds = []UngatedKind{{Child: schema.GroupKind{Group: "apps", Kind: "ReplicaSet"}}}
				setAnn(annotations.Freeze, "true")(in.Parent)
			},
			want: want{result: Deny, category: Frozen, mode: annotations.ModeEnforce, modeSource: ModeFromDefault},
		},
		// --- revision history ----------------------------------------------------
		{
			name: "the controller prunes a scaled-down ReplicaSet beyond revisionHistoryLimit: carried out, not drift",
			in: func(in *Input) {
				pruneInput(in, 1)
			},
			want: want{result: Allow, category: HistoryPruned, mode: annotations.ModeEnforce, modeSource: ModeFromDefault},
		},
		{
			name: "the same delete within revisionHistoryLimit is drift",
			in: func(in *Input) {
				pruneInput(in, 3)
			},
			want: want{result: Deny, category: DriftUnapproved, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, drift: true, report: ReportDetected},
		},
		{
			name: "a frozen parent holds history pruning too",
			in: func(in *Input) {
				pruneInput(in, 1)
				setAnn(annotations.Freeze, "true")(in.Parent)
			},
			want: want{result: Deny, category: Frozen, mode: annotations.ModeEnforce, modeSource: ModeFromDefault},
		},
		// --- approvals across annotation-only generation bumps -------------------
		{
			name: "the suggested approval still admits its write after the bump that writing it caused",
			in: func(in *Input) {
				in.Parent.SetGeneration(6)
				setAnn(annotations.Approvals, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"once"}]`)(in.Parent)
				in.Settle = &settle.Facts{AtCurrentSpec: true, Known: true, SpecSince: 5, Reason: "has not changed its spec since it last settled"}
			},
			want: want{result: Allow, category: DriftApproved, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, drift: true,
				approval: &a5once, consume: true, report: ReportResolved,
				approvalsUpdate: &ApprovalsUpdate{Target: parentRef, ResourceVersion: "100",
					Old: `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"once"}]`, New: "", Consumed: a5once},
				child: set(annotations.Trace, hopOnParent(ctrlHop))},
		},
		{
			name: "user hash: request without field manager falls back to hashes",
			in: func(in *Input) {
				in.FieldManager = ""
				setAnn(annotations.Controllers, ctrlHash)(in.Parent)
			},
			want: unapprovedEnforce,
		},
		// --- CREATE and DELETE ---------------------------------------------------
		{
			name: "create in drift is denied",
			in: func(in *Input) {
				in.Operation, in.OldObject = Create, nil
				in.DesiredChanged, in.Changes = false, nil
			},
			want: unapprovedEnforce,
		},
		{
			name: "create in drift with once approval: kausality annotations copied from the parent are replaced",
			in: func(in *Input) {
				in.Operation, in.OldObject, in.Changes = Create, nil, nil
				in.NewObject = mkChild(3, setAnn(annotations.Trace, parentTrace), setAnn(annotations.Phase, "initialized"), setAnn(annotations.Mode, "log"), delAnn(annotations.Updaters))
				setAnn(annotations.Approvals, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"once"}]`)(in.Parent)
			},
			want: want{result: Allow, category: DriftApproved, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, drift: true,
				approval: &a5once, consume: true, report: ReportResolved,
				approvalsUpdate: &ApprovalsUpdate{Target: parentRef, ResourceVersion: "100",
					Old: `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"once"}]`, New: "", Consumed: a5once},
				child: &AnnotationChanges{
					Set:    map[string]string{annotations.Trace: hopOnParent(rsHop(ctrlUser, 1)), annotations.Updaters: ctrlHash},
					Remove: []string{annotations.Mode, annotations.Phase},
				}},
		},
		{
			name: "delete in drift is denied",
			in: func(in *Input) {
				in.Operation, in.NewObject, in.Changes = Delete, nil, nil
			},
			want: unapprovedEnforce,
		},
		{
			name: "delete in drift with once approval: consumed, nothing to annotate",
			in: func(in *Input) {
				in.Operation, in.NewObject, in.Changes = Delete, nil, nil
				setAnn(annotations.Approvals, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5}]`)(in.Parent)
			},
			want: want{result: Allow, category: DriftApproved, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, drift: true,
				approval: &approval.Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5}, consume: true, report: ReportResolved,
				approvalsUpdate: &ApprovalsUpdate{Target: parentRef, ResourceVersion: "100",
					Old: `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5}]`, New: "",
					Consumed: approval.Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5}}},
		},
		{
			name: "delete by another actor is a new origin without annotations",
			in: func(in *Input) {
				alice(in)
				in.Operation, in.NewObject, in.Changes = Delete, nil, nil
			},
			want: want{result: Allow, category: NewOrigin, mode: annotations.ModeEnforce, modeSource: ModeFromDefault},
		},
		// --- dry-run ---------------------------------------------------------------
		{
			name: "dry-run: approval is used but not consumed, no side writes, no report",
			in: func(in *Input) {
				in.DryRun = true
				setAnn(annotations.Approvals, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"once"},`+stale+`]`)(in.Parent)
			},
			want: want{result: Allow, category: DriftApproved, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, drift: true,
				approval: &a5once, child: set(annotations.Trace, hopOnParent(ctrlHop))},
		},
		{
			name: "dry-run: drift denial is reported in the response only",
			in:   func(in *Input) { in.DryRun = true },
			want: want{result: Deny, category: DriftUnapproved, mode: annotations.ModeEnforce, modeSource: ModeFromDefault, drift: true},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base()
			if tt.in != nil {
				tt.in(&in)
			}
			check(t, Decide(in), tt.want)
		})
	}
}

func statusInput(ms ...mut) Input {
	in := base()
	in.StatusWrite = true
	in.DesiredChanged, in.Changes = false, nil
	in.Child = parentRef
	in.Parent = nil
	old := mkParent(ms...)
	in.OldObject = old
	in.NewObject = old.DeepCopy()
	return in
}

var (
	ctrlLong   = controllerid.LongHash(ctrlUser)
	otherLong  = controllerid.LongHash("system:serviceaccount:ops:other")
	fullRecord = strings.Join([]string{controllerid.LongHash("a"), controllerid.LongHash("b"), controllerid.LongHash("c"),
		controllerid.LongHash("d"), controllerid.LongHash("e")}, ",")
)

func recordReason(observed int64) string {
	return "record " + ctrlUser + " as controller: its status write advanced observedGeneration to " + itoa(observed) +
		" (only once the stored generation has reached it)"
}

func ctrlRecord(observed int64) *ControllerRecord {
	return &ControllerRecord{User: controllerid.UserOf(ctrlUser), ObservedGeneration: observed}
}

func TestDecideStatusWrite(t *testing.T) {
	tests := []struct {
		name     string
		in       func() Input
		writes   []SideWrite
		warnings []string
	}{
		{
			name: "observedGeneration owned in managedFields: nothing to record",
			in:   func() Input { return statusInput() },
		},
		{
			name: "no managedFields owner and no status.observedGeneration, a write naming its resourceVersion: record controller hash and observed generation",
			in: func() Input {
				in := statusInput(noManagedFields, noObsGen, setAnn(annotations.Controllers, otherLong))
				in.NamesResourceVersion = true
				return in
			},
			writes: []SideWrite{{Target: parentRef, TargetUID: parentUID,
				AnnotationChanges: *set(annotations.Controllers, ctrlLong+","+otherLong, annotations.ObservedGeneration, "5"),
				Reasons:           []string{recordReason(5), "record observed generation (no status.observedGeneration)"},
				Controller:        ctrlRecord(5)}},
		},
		{
			name: "the same status write naming no resourceVersion: the controller at once, the observed generation deferred and only on this object",
			in: func() Input {
				return statusInput(noManagedFields, noObsGen, setAnn(annotations.Controllers, otherLong))
			},
			writes: []SideWrite{
				{Target: parentRef, TargetUID: parentUID, AnnotationChanges: *set(annotations.Controllers, ctrlLong+","+otherLong),
					Reasons: []string{recordReason(5)}, Controller: ctrlRecord(5)},
				{Target: parentRef, AnnotationChanges: *set(annotations.ObservedGeneration, "5"), Deferred: true, TargetUID: parentUID, Writer: ctrlLong,
					Reasons: []string{"record observed generation (no status.observedGeneration), deferred: the status write names no resourceVersion, so its writer may not have seen generation 5 yet"}},
			},
		},
		{
			name: "first status write that sets observedGeneration: its user is the controller",
			in: func() Input {
				in := statusInput(noManagedFields, noObsGen)
				obsGen(5)(in.NewObject)
				return in
			},
			writes: []SideWrite{{Target: parentRef, TargetUID: parentUID, AnnotationChanges: *set(annotations.Controllers, ctrlLong),
				Reasons: []string{recordReason(5)}, Controller: ctrlRecord(5)}},
		},
		{
			name: "a status write advancing observedGeneration puts its user first",
			in: func() Input {
				in := statusInput(obsGen(4), setAnn(annotations.Controllers, otherLong+","+ctrlLong))
				obsGen(5)(in.NewObject)
				return in
			},
			writes: []SideWrite{{Target: parentRef, TargetUID: parentUID, AnnotationChanges: *set(annotations.Controllers, ctrlLong+","+otherLong),
				Reasons: []string{recordReason(5)}, Controller: ctrlRecord(5)}},
		},
		{
			name: "an observedGeneration beyond the generation is recorded only if kube-apiserver stores that generation (see RebaseOn)",
			in: func() Input {
				in := statusInput(obsGen(5))
				obsGen(9)(in.NewObject)
				return in
			},
			writes: []SideWrite{{Target: parentRef, TargetUID: parentUID, AnnotationChanges: *set(annotations.Controllers, ctrlLong),
				Reasons: []string{recordReason(9)}, Controller: ctrlRecord(9)}},
		},
		{
			name: "Kausality's short record naming the controller is upgraded to its long hash",
			in: func() Input {
				in := statusInput(obsGen(4), setAnn(annotations.Controllers, "aaaaa,"+ctrlHash))
				obsGen(5)(in.NewObject)
				return in
			},
			writes: []SideWrite{{Target: parentRef, TargetUID: parentUID, AnnotationChanges: *set(annotations.Controllers, ctrlLong),
				Reasons: []string{recordReason(5)}, Controller: ctrlRecord(5)}},
		},
		{
			name: "a newcomer never pushes a recorded controller out of a full record",
			in: func() Input {
				in := statusInput(obsGen(4), setAnn(annotations.Controllers, fullRecord))
				obsGen(5)(in.NewObject)
				return in
			},
			warnings: []string{"kausality: " + ctrlUser + " is not recorded in kausality.io/controllers of apps/v1 Deployment default/web: " +
				controllerid.RefusedFull + "; if it is the new controller, a person resets the record with `kubectl kausality reset-controllers`"},
		},
		{
			name: "a status write that does not advance observedGeneration records nothing (an autoscaler, a probe)",
			in: func() Input {
				in := statusInput(setAnn(annotations.Controllers, "aaaaa"))
				in.User = &user.DefaultInfo{Name: "hpa"}
				return in
			},
		},
		{
			name: "status write makes the object initialized: persist the high-water mark",
			in: func() Input {
				in := statusInput(delAnn(annotations.Phase), conditions("Ready", "False"))
				conditions("Ready", "True")(in.NewObject)
				return in
			},
			writes: []SideWrite{{Target: parentRef, TargetUID: parentUID, AnnotationChanges: *set(annotations.Phase, "initialized"),
				Reasons: []string{"persist lifecycle high-water mark (condition Ready=True)"}}},
		},
		{
			name: "controller hash already recorded and phase stored: nothing to do",
			in: func() Input {
				return statusInput(noManagedFields, noObsGen, setAnn(annotations.Controllers, ctrlHash), setAnn(annotations.ObservedGeneration, "5"))
			},
		},
		{
			name: "dry-run status write: no side writes",
			in: func() Input {
				in := statusInput(noManagedFields, noObsGen, delAnn(annotations.Phase))
				in.DryRun = true
				return in
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			check(t, Decide(tt.in()), want{result: Allow, category: StatusWrite, parentWrites: tt.writes, warnings: tt.warnings})
		})
	}
}

func TestMessages(t *testing.T) {
	t.Run("unapproved", func(t *testing.T) {
		d := Decide(base())
		wantMsg := `kausality: UPDATE of apps/v1 ReplicaSet default/web-1 denied: drift: the parent's controller, field manager "kube-controller-manager" (user system:serviceaccount:kube-system:deployment-controller), changes spec.replicas (1 → 3) while its parent apps/v1 Deployment default/web (generation 5, observedGeneration 5) is reconciled. No ApprovalPolicy applies to system:serviceaccount:kube-system:deployment-controller. To allow it once, add {"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"once"} to the parent's kausality.io/approvals annotation: kubectl annotate -n default deployment.apps/web --overwrite 'kausality.io/approvals=[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"once"}]'.`
		if d.Message != wantMsg {
			t.Errorf("message:\n got  %s\n want %s", d.Message, wantMsg)
		}
		wantCauses := `[{"reason":"KausalityParent","message":"apps/v1 Deployment default/web (generation 5, observedGeneration 5)","field":"metadata.ownerReferences"},` +
			`{"reason":"KausalityChild","message":"UPDATE apps/v1 ReplicaSet default/web-1"},` +
			`{"reason":"KausalityController","message":"field manager \"kube-controller-manager\" (user system:serviceaccount:kube-system:deployment-controller)"},` +
			`{"reason":"KausalityChangedField","message":"1 → 3","field":"spec.replicas"},` +
			`{"reason":"KausalityUnapproved","message":"no approval for this child at parent generation 5","field":"metadata.annotations[kausality.io/approvals]"},` +
			`{"reason":"KausalityPolicy","message":"no ApprovalPolicy applies to system:serviceaccount:kube-system:deployment-controller"},` +
			`{"reason":"KausalityUnblock","message":"[{\"apiVersion\":\"apps/v1\",\"kind\":\"ReplicaSet\",\"name\":\"web-1\",\"generation\":5,\"mode\":\"once\"}]","field":"metadata.annotations[kausality.io/approvals]"}]`
		if got, _ := json.Marshal(d.Causes); string(got) != wantCauses {
			t.Errorf("causes:\n got  %s\n want %s", got, wantCauses)
		}
		if want := (approval.Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5, Mode: approval.Once}); d.Suggested == nil || *d.Suggested != want {
			t.Errorf("suggested %+v", d.Suggested)
		}
	})

	t.Run("unapproved on a non-Deployment parent keeps existing approvals", func(t *testing.T) {
		in := base()
		in.Parent.SetAPIVersion("example.com/v1")
		in.Parent.SetKind("Cluster")
		setAnn(annotations.Approvals, `[{"apiVersion":"v1","kind":"Secret","name":"s","mode":"always"}]`)(in.Parent)
		in.Changes = []desired.Change{{Path: "spec.a", Old: "x", New: "y"}, {Path: "spec.b"}}
		d := Decide(in)
		wantMsg := `kausality: UPDATE of apps/v1 ReplicaSet default/web-1 denied: drift: the parent's controller, field manager "kube-controller-manager" (user system:serviceaccount:kube-system:deployment-controller), changes spec.a (x → y), spec.b while its parent example.com/v1 Cluster default/web (generation 5, observedGeneration 5) is reconciled. No ApprovalPolicy applies to system:serviceaccount:kube-system:deployment-controller. To allow it once, add {"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"once"} to the parent's kausality.io/approvals annotation: kubectl annotate -n default cluster.example.com/web --overwrite 'kausality.io/approvals=[{"apiVersion":"v1","kind":"Secret","name":"s","mode":"always"},{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"mode":"once"}]'.`
		if d.Message != wantMsg {
			t.Errorf("message:\n got  %s\n want %s", d.Message, wantMsg)
		}
	})

	t.Run("log mode keeps the would-be denial", func(t *testing.T) {
		in := base()
		in.Mode.Default = annotations.ModeLog
		d := Decide(in)
		if !strings.HasPrefix(d.Message, "kausality: UPDATE of apps/v1 ReplicaSet default/web-1 would be denied in enforce mode (mode log from default): drift:") {
			t.Errorf("message %s", d.Message)
		}
	})

	t.Run("frozen says who and why", func(t *testing.T) {
		in := base()
		alice(in2(&in))
		setAnn(annotations.Freeze, `{"user":"bob","reason":"incident 7","at":"2026-01-24T09:00:00Z"}`)(in.Parent)
		d := Decide(in)
		wantMsg := `kausality: UPDATE of apps/v1 ReplicaSet default/web-1 denied: its parent apps/v1 Deployment default/web (generation 5, observedGeneration 5) is frozen by bob at 2026-01-24T09:00:00Z: incident 7. The write by field manager "kubectl-edit" (user alice) changes spec.replicas (1 → 3). To unblock, remove the kausality.io/freeze annotation from the parent: kubectl annotate -n default deployment.apps/web kausality.io/freeze-`
		if d.Message != wantMsg {
			t.Errorf("message:\n got  %s\n want %s", d.Message, wantMsg)
		}
		if want := (annotations.FreezeInfo{User: "bob", Reason: "incident 7", At: "2026-01-24T09:00:00Z"}); d.Freeze == nil || *d.Freeze != want {
			t.Errorf("freeze %+v", d.Freeze)
		}
		last := d.Causes[len(d.Causes)-2:]
		if last[0].Type != CauseFrozen || last[0].Message != "frozen by bob at 2026-01-24T09:00:00Z: incident 7" || last[1].Type != CauseUnblock {
			t.Errorf("causes %+v", last)
		}
	})

	t.Run("rejected with generation", func(t *testing.T) {
		in := base()
		in.Operation, in.NewObject, in.Changes = Delete, nil, nil
		setAnn(annotations.Rejections, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"reason":"keep it"}]`)(in.Parent)
		d := Decide(in)
		wantMsg := `kausality: DELETE of apps/v1 ReplicaSet default/web-1 denied: drift rejected by its parent apps/v1 Deployment default/web (generation 5, observedGeneration 5): keep it. The write by the parent's controller, field manager "kube-controller-manager" (user system:serviceaccount:kube-system:deployment-controller), deletes it although the parent is reconciled. To unblock, remove the entry {"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5,"reason":"keep it"} from the parent's kausality.io/rejections annotation (it applies only while the parent is at generation 5).`
		if d.Message != wantMsg {
			t.Errorf("message:\n got  %s\n want %s", d.Message, wantMsg)
		}
	})

	t.Run("many changes are truncated in the message", func(t *testing.T) {
		in := base()
		in.Changes = nil
		for i := 0; i < 13; i++ {
			in.Changes = append(in.Changes, desired.Change{Path: "spec.f" + itoa(int64(i))})
		}
		d := Decide(in)
		if !strings.Contains(d.Message, "changes spec.f0, spec.f1, spec.f2, spec.f3, spec.f4, spec.f5, spec.f6, spec.f7, spec.f8, spec.f9, and 3 more while") {
			t.Errorf("message %s", d.Message)
		}
		if n := len(d.Causes); n != 3+13+3 {
			t.Errorf("%d causes", n)
		}
	})
}

func in2(in *Input) *Input { return in }

func TestDecideDetails(t *testing.T) {
	t.Run("parent and actor are described", func(t *testing.T) {
		d := Decide(base())
		wantParent := ParentInfo{Ref: parentRef, UID: "p-uid", ResourceVersion: "100", Generation: 5, ObservedGeneration: 5,
			ObservedGenerationSource: "status.observedGeneration", Phase: "Initialized", PhaseReason: "annotation kausality.io/phase=initialized"}
		if d.Parent == nil || *d.Parent != wantParent {
			t.Errorf("parent %+v", d.Parent)
		}
		wantActor := Actor{User: ctrlUser, UserHash: ctrlHash, FieldManager: kcm, IsController: true, Determined: true,
			Method: controllerid.MethodManagedFields, ControllerManagers: []string{kcm},
			Reason: `no recorded status writer; field manager "kube-controller-manager" owns the parent's status.observedGeneration`}
		if !reflect.DeepEqual(d.Actor, wantActor) {
			t.Errorf("actor %+v", d.Actor)
		}
		if d.Child != rsRef {
			t.Errorf("child %+v", d.Child)
		}
		if d.Reason != "drift without approval (parent generation 5 == observedGeneration 5; no ApprovalPolicy applies to system:serviceaccount:kube-system:deployment-controller), enforce mode (default)" {
			t.Errorf("reason %q", d.Reason)
		}
	})

	t.Run("create with generateName uses it as name", func(t *testing.T) {
		in := base()
		in.Operation, in.OldObject, in.Child.Name = Create, nil, ""
		in.NewObject.SetName("")
		in.NewObject.SetGenerateName("web-")
		setAnn(annotations.Approvals, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-","mode":"always"}]`)(in.Parent)
		d := Decide(in)
		if d.Child.Name != "web-" || d.Category != DriftApproved {
			t.Errorf("child %+v category %s", d.Child, d.Category)
		}
	})

	t.Run("snooze details", func(t *testing.T) {
		in := base()
		setAnn(annotations.SnoozeUntil, "2026-01-25T00:00:00Z")(in.Parent)
		d := Decide(in)
		if want := (SnoozeState{Snoozed: true, Until: time.Date(2026, 1, 25, 0, 0, 0, 0, time.UTC), Annotation: annotations.SnoozeUntil}); d.Snooze != want {
			t.Errorf("snooze %+v", d.Snooze)
		}
	})

	t.Run("input is not modified", func(t *testing.T) {
		in := base()
		setAnn(annotations.Approvals, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5}]`)(in.Parent)
		before := js(in.Parent.Object) + js(in.NewObject.Object) + js(in.OldObject.Object)
		_ = Decide(in)
		if after := js(in.Parent.Object) + js(in.NewObject.Object) + js(in.OldObject.Object); before != after {
			t.Error("Decide modified its input")
		}
	})
}

func TestWarningsAreSingleLine(t *testing.T) {
	in := base()
	in.Mode.Default = annotations.ModeLog
	in.Changes = []desired.Change{{Path: "data.script", Old: "a\nb", New: "c\r\nd"}}
	d := Decide(in)
	if len(d.Warnings) != 1 || strings.ContainsAny(d.Warnings[0], "\r\n") ||
		!strings.Contains(d.Warnings[0], `changes data.script (a\x0ab → c\x0d\x0ad) while`) {
		t.Errorf("warnings %q", d.Warnings)
	}
}

var sinkDecision Decision

func BenchmarkDecide(b *testing.B) {
	cases := map[string]func(in *Input){
		"NoDesiredChange": func(in *Input) { in.DesiredChanged = false; in.NewObject = mkChild(1) },
		"NoParent":        func(in *Input) { in.Parent = nil },
		"Expected":        func(in *Input) { obsGen(4)(in.Parent) },
		"DriftDenied":     nil,
		"DriftApprovedOnce": func(in *Input) {
			setAnn(annotations.Approvals, `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"web-1","generation":5}]`)(in.Parent)
		},
	}
	for name, f := range cases {
		b.Run(name, func(b *testing.B) {
			in := base()
			if f != nil {
				f(&in)
			}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				sinkDecision = Decide(in)
			}
		})
	}
}

// Which verdicts rest on the proxy's computation and must be confirmed with
// kube-apiserver before they are acted on.
func TestConfirmWithServer(t *testing.T) {
	noChange := func(in *Input) { in.DesiredChanged, in.Changes, in.NewObject = false, nil, mkChild(1) }
	tests := []struct {
		name string
		in   func(*Input)
		want bool
	}{
		{"drift", func(*Input) {}, true},
		{"drift, already confirmed", func(in *Input) { in.Confirmed = true }, false},
		{"no change by the controller under a settled parent: a stale cache could hide one", noChange, true},
		{"no change that a stale cache cannot hide", func(in *Input) { noChange(in); in.NoChangeIsCertain = true }, false},
		{"drift even when a no-change verdict would be certain", func(in *Input) { in.NoChangeIsCertain = true }, true},
		{"no change by another actor: never held", func(in *Input) { noChange(in); alice(in) }, false},
		{"no change under a frozen parent: a hidden change would be held", func(in *Input) {
			noChange(in)
			alice(in)
			setAnn(annotations.Freeze, "true")(in.Parent)
		}, true},
		{"expected", func(in *Input) { obsGen(4)(in.Parent) }, false},
		{"create", func(in *Input) { in.Operation, in.OldObject = Create, nil }, false},
		{"status write", func(in *Input) { in.StatusWrite = true }, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base()
			tt.in(&in)
			if got := Decide(in).ConfirmWithServer; got != tt.want {
				t.Errorf("ConfirmWithServer = %v, want %v", got, tt.want)
			}
		})
	}
}

// The deferred record names the object as stored: a status patch may
// leave its uid out ({"metadata":{"uid":null}}), which kube-apiserver fills
// in again, and the record must still wait, and land only on that object.
// Every side write names the uid of the object it is about, as stored:
// one deleted and created again under the same name before the write
// lands is another object, and a body may leave its uid out or name
// another.
func TestSideWritesNameTheStoredUID(t *testing.T) {
	for _, bodyUID := range []types.UID{"", "another-uid"} {
		in := statusInput(noManagedFields, noObsGen, delAnn(annotations.Phase), conditions("Ready", "False"),
			setAnn(annotations.ObservedGeneration, "4"))
		conditions("Ready", "True")(in.NewObject)
		in.NewObject.SetUID(bodyUID)
		d := Decide(in)
		deferred, immediate := 0, 0
		for _, sw := range d.ParentWrites {
			if sw.Deferred {
				deferred++
			} else {
				immediate++
			}
			if sw.TargetUID != parentUID {
				t.Errorf("body uid %q: side write %v names TargetUID %q, want the stored object's %s", bodyUID, sw.Reasons, sw.TargetUID, parentUID)
			}
		}
		// The controller record and the phase at once, the observed
		// generation deferred.
		if deferred != 1 || immediate != 1 {
			t.Errorf("body uid %q: %d deferred and %d immediate side writes, want 1 and 1: %+v", bodyUID, deferred, immediate, d.ParentWrites)
		}
	}
}

// A deferred record waits the delay of the written kind, which the input
// carries; the writes made at once wait nothing.
func TestADeferredRecordWaitsTheInputsDelay(t *testing.T) {
	in := statusInput(noManagedFields, noObsGen, setAnn(annotations.ObservedGeneration, "4"))
	in.UnboundStatusRecordDelay = 2 * time.Minute
	deferred := 0
	for _, sw := range Decide(in).ParentWrites {
		switch {
		case sw.Deferred:
			deferred++
			if sw.Delay != 2*time.Minute {
				t.Errorf("the deferred record waits %s, want 2m", sw.Delay)
			}
		case sw.Delay != 0:
			t.Errorf("side write %v made at once has a delay of %s", sw.Reasons, sw.Delay)
		}
	}
	if deferred != 1 {
		t.Errorf("%d deferred records, want 1", deferred)
	}
}

// While the record of a status write waits, a second status writer of the
// same generation observes nothing new: it is not recorded as controller,
// as it would not be once the record has landed.
func TestAStatusWriterWhileTheRecordWaitsIsNoNewController(t *testing.T) {
	recorded := func(in Input) bool {
		for _, sw := range Decide(in).ParentWrites {
			if _, ok := sw.Set[annotations.Controllers]; ok {
				return true
			}
		}
		return false
	}
	waiting := statusInput(noManagedFields, noObsGen, setAnn(annotations.Controllers, otherLong), setAnn(annotations.ObservedGeneration, "4"))
	waiting.ObservedGenerationPending = 5
	if recorded(waiting) {
		t.Error("the second status writer of generation 5, while its record waits, is recorded as controller")
	}
	landed := statusInput(noManagedFields, noObsGen, setAnn(annotations.Controllers, otherLong), setAnn(annotations.ObservedGeneration, "5"))
	if recorded(landed) {
		t.Error("the second status writer of generation 5, once its record landed, is recorded as controller")
	}
	first := statusInput(noManagedFields, noObsGen, setAnn(annotations.Controllers, otherLong), setAnn(annotations.ObservedGeneration, "4"))
	if !recorded(first) {
		t.Error("the first status writer of generation 5 is not recorded as controller")
	}
}

// modesBy is the kausality.io/modes-by of user setting kausality.io/mode.
func modesBy(user, mode string) string {
	return modesByHash(controllerid.LongHash(user), mode)
}
