package history

import (
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func deploymentAt(revision int64, limit *int64) *unstructured.Unstructured {
	d := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "spec": map[string]any{}}}
	d.SetName("web")
	d.SetAnnotations(map[string]string{RevisionAnnotation: strconv.FormatInt(revision, 10)})
	if limit != nil {
		_ = unstructured.SetNestedField(d.Object, *limit, "spec", "revisionHistoryLimit")
	}
	return d
}

func replicaSetAt(name string, revision, specReplicas, statusReplicas int64) *unstructured.Unstructured {
	rs := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apps/v1", "kind": "ReplicaSet",
		"spec":   map[string]any{"replicas": specReplicas},
		"status": map[string]any{"replicas": statusReplicas, "observedGeneration": int64(2)},
	}}
	rs.SetName(name)
	rs.SetGeneration(2)
	rs.SetCreationTimestamp(metav1.NewTime(time.Unix(revision*100, 0)))
	rs.SetAnnotations(map[string]string{RevisionAnnotation: strconv.FormatInt(revision, 10)})
	return rs
}

func revisionedParent(kind string, limit int64, current, update string) *unstructured.Unstructured {
	s := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": kind,
		"spec": map[string]any{"revisionHistoryLimit": limit}, "status": map[string]any{}}}
	s.SetName("db")
	if current != "" {
		_ = unstructured.SetNestedField(s.Object, current, "status", "currentRevision")
		_ = unstructured.SetNestedField(s.Object, update, "status", "updateRevision")
	}
	return s
}

func controllerRevisionAt(name string, revision int64) *unstructured.Unstructured {
	cr := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "apps/v1", "kind": "ControllerRevision", "revision": revision}}
	cr.SetName(name)
	cr.SetLabels(map[string]string{RevisionHashLabel: "hash-" + strconv.FormatInt(revision, 10)})
	cr.SetCreationTimestamp(metav1.NewTime(time.Unix(revision*100, 0)))
	return cr
}

func revisions(objs ...*unstructured.Unstructured) []Revision {
	out := make([]Revision, 0, len(objs))
	for _, o := range objs {
		r, ok := RevisionOf(o)
		if !ok {
			panic("no revision: " + o.GetName())
		}
		out = append(out, r)
	}
	return out
}

func TestPruning(t *testing.T) {
	one, zero := int64(1), int64(0)
	rs1, rs2, rs3, rs4 := replicaSetAt("web-1", 1, 0, 0), replicaSetAt("web-2", 2, 0, 0), replicaSetAt("web-3", 3, 0, 0), replicaSetAt("web-4", 4, 3, 3)
	fourRS := revisions(rs1, rs2, rs3, rs4)
	cr1, cr2, cr3, cr4 := controllerRevisionAt("db-1", 1), controllerRevisionAt("db-2", 2), controllerRevisionAt("db-3", 3), controllerRevisionAt("db-4", 4)
	fourCR := revisions(cr1, cr2, cr3, cr4)
	deleting := replicaSetAt("web-3", 3, 0, 0)
	deleting.SetDeletionTimestamp(&metav1.Time{Time: time.Unix(1, 0)})
	behind := replicaSetAt("web-1", 1, 0, 0)
	behind.SetGeneration(3)

	tests := []struct {
		name   string
		parent *unstructured.Unstructured
		child  *unstructured.Unstructured
		owned  []Revision
		want   bool
	}{
		{"the oldest of three retired ReplicaSets beyond limit 1", deploymentAt(4, &one), rs1, fourRS, true},
		{"the second oldest beyond limit 1", deploymentAt(4, &one), rs2, fourRS, true},
		{"the newest retired one is kept by limit 1", deploymentAt(4, &one), rs3, fourRS, false},
		{"limit 0 prunes every retired one", deploymentAt(4, &zero), rs3, fourRS, true},
		{"the current ReplicaSet is never pruned", deploymentAt(4, &zero), replicaSetAt("web-4", 4, 0, 0), fourRS, false},
		{"a ReplicaSet that still has replicas is not pruned", deploymentAt(4, &one), replicaSetAt("web-1", 1, 2, 0), fourRS, false},
		{"a ReplicaSet with running pods is not pruned", deploymentAt(4, &one), replicaSetAt("web-1", 1, 0, 1), fourRS, false},
		{"a ReplicaSet whose status is behind its spec is not pruned", deploymentAt(4, &one), behind, fourRS, false},
		{"within the default limit of 10 nothing is pruned", deploymentAt(4, nil), rs1, fourRS, false},
		{"a ReplicaSet already being deleted does not count", deploymentAt(4, &one), rs2, revisions(rs1, rs2, deleting, rs4), false},
		{"a child of another kind", deploymentAt(4, &zero), controllerRevisionAt("web-1", 1), fourRS, false},
		{"a ReplicaSet under a StatefulSet", revisionedParent("StatefulSet", 0, "db-4", "db-4"), rs1, fourRS, false},
		{"the oldest ControllerRevision beyond limit 1", revisionedParent("StatefulSet", 1, "db-4", "db-4"), cr1, fourCR, true},
		{"the newest retired ControllerRevision is kept", revisionedParent("StatefulSet", 1, "db-4", "db-4"), cr3, fourCR, false},
		{"a StatefulSet's current revision is live while an update is partitioned", revisionedParent("StatefulSet", 0, "db-2", "db-4"), cr2, fourCR, false},
		{"the newest ControllerRevision of a DaemonSet is live", revisionedParent("DaemonSet", 0, "", ""), cr4, fourCR, false},
		{"a DaemonSet's oldest beyond limit 2", revisionedParent("DaemonSet", 2, "", ""), cr1, fourCR, true},
		{"a revision a StatefulSet's pod still runs is kept (OnDelete)", revisionedParent("StatefulSet", 1, "db-4", "db-4"), cr1,
			running(fourCR, map[string]bool{"db-1": true}), false},
		{"a revision a DaemonSet's pod still runs, by its hash, is kept", revisionedParent("DaemonSet", 2, "", ""), cr1,
			running(fourCR, map[string]bool{"hash-1": true}), false},
		{"the revisions pods run are not counted as retired", revisionedParent("StatefulSet", 1, "db-4", "db-4"), cr2,
			running(fourCR, map[string]bool{"db-1": true}), true},
		{"no owned list: the child alone within the limit", deploymentAt(4, &one), rs1, nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := Pruning(tc.parent, tc.child, tc.owned)
			if got != tc.want {
				t.Fatalf("Pruning = %v (%q), want %v", got, reason, tc.want)
			}
			if got && reason == "" {
				t.Fatal("a pruning verdict must say why")
			}
		})
	}
}

func TestRevisionOf(t *testing.T) {
	noAnnotation := replicaSetAt("web-1", 1, 0, 0)
	noAnnotation.SetAnnotations(nil)
	if r, ok := RevisionOf(noAnnotation); !ok || r.Number != 0 {
		t.Fatalf("a ReplicaSet without a revision annotation is revision 0 to the deployment controller: %+v, %v", r, ok)
	}
	garbled := replicaSetAt("web-1", 1, 0, 0)
	garbled.SetAnnotations(map[string]string{RevisionAnnotation: "one"})
	if _, ok := RevisionOf(garbled); ok {
		t.Fatal("a ReplicaSet whose revision annotation is no number has no revision")
	}
	cr := controllerRevisionAt("db-7", 7)
	r, ok := RevisionOf(cr)
	if !ok || r.Number != 7 || r.Name != "db-7" {
		t.Fatalf("RevisionOf(ControllerRevision) = %+v, %v", r, ok)
	}
}

// running is revs with those the pods' hashes name marked as run.
func running(revs []Revision, podHashes map[string]bool) []Revision {
	out := append([]Revision(nil), revs...)
	MarkRunning(out, podHashes)
	return out
}
