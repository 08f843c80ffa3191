package settle

import (
	"strconv"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// deployment is a Deployment at generation gen whose status says
// observedGeneration og, with updated of replicas updated and available.
func deployment(image string, gen, og, replicas, updated int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]interface{}{"name": "web", "namespace": "ns", "uid": "u-1", "generation": gen},
		"spec": map[string]interface{}{"replicas": replicas, "template": map[string]interface{}{
			"spec": map[string]interface{}{"containers": []interface{}{map[string]interface{}{"name": "app", "image": image}}}}},
		"status": map[string]interface{}{
			"observedGeneration": og, "replicas": replicas, "updatedReplicas": updated,
			"readyReplicas": updated, "availableReplicas": updated,
			"conditions": []interface{}{map[string]interface{}{"type": "Available", "status": "True"}},
		},
	}}
}

// The proxy decides on intent: a controller writing while its parent
// carries out a spec change is expected, for as long as the rollout takes,
// although observedGeneration caught up long ago.
func TestAssessFollowsARollout(t *testing.T) {
	m := newDeploymentMemory(0, time.Now)
	steps := []struct {
		name   string
		parent *unstructured.Unstructured
		atSpec bool
	}{
		{"after a restart, mid-rollout: lenient", deployment("v1", 1, 1, 3, 1), false},
		{"settled at v1", deployment("v1", 1, 1, 3, 3), true},
		{"a person scales the new ReplicaSet: still settled at v1", deployment("v1", 1, 1, 3, 2), true},
		{"an annotation edit bumps generation: no spec change", deployment("v1", 2, 1, 3, 3), true},
		{"image update, not yet observed", deployment("v2", 3, 2, 3, 3), false},
		{"observed, 1 of 3 updated: the rollout goes on", deployment("v2", 3, 3, 3, 1), false},
		{"settled at v2", deployment("v2", 3, 3, 3, 3), true},
		{"the controller's revert of a person's scale: drift", deployment("v2", 3, 3, 3, 2), true},
	}
	for _, s := range steps {
		f := m.Assess(s.parent)
		if f.AtCurrentSpec != s.atSpec {
			t.Fatalf("%s: AtCurrentSpec %v, want %v (%s)", s.name, f.AtCurrentSpec, s.atSpec, f.Reason)
		}
	}

	// With resourceVersions, each version's view is computed once and
	// reused for every write under it, never for another version.
	m = newDeploymentMemory(0, time.Now)
	for i, s := range steps {
		s.parent.SetResourceVersion(strconv.Itoa(i + 1))
		for range 2 {
			f := m.Assess(s.parent)
			if f.AtCurrentSpec != s.atSpec {
				t.Fatalf("%s (resourceVersion %d): AtCurrentSpec %v, want %v (%s)", s.name, i+1, f.AtCurrentSpec, s.atSpec, f.Reason)
			}
		}
	}
}

// The caches teach the memory: a parent that settled while no child was
// written is known to be settled when its controller drifts later.
func TestObserveAndForget(t *testing.T) {
	m := newDeploymentMemory(0, time.Now)
	other := deployment("v1", 1, 1, 3, 3)
	other.SetUID("u-other")
	m.Assess(other) // a write under a Deployment makes Deployments parents
	m.Observe(deployment("v1", 1, 1, 3, 3))
	if f := m.Assess(deployment("v1", 1, 1, 3, 2)); !f.AtCurrentSpec || !f.Known {
		t.Fatalf("observed settle not remembered: %+v", f)
	}
	m.Forget("u-1")
	if f := m.Assess(deployment("v1", 1, 1, 3, 2)); f.AtCurrentSpec || f.Known {
		t.Fatalf("forgotten parent still known: %+v", f)
	}
}

// Only parent kinds teach the memory, and a parent no cache delivers for
// longer than the memory's age is dropped, whoever else is seen.
func TestMemoryLearnsFromParentKindsAndAgesOut(t *testing.T) {
	now := time.Unix(1000, 0)
	m := NewMemory(time.Hour, func() time.Time { return now })
	deployments := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	pod := &unstructured.Unstructured{Object: map[string]interface{}{"apiVersion": "v1", "kind": "Pod",
		"metadata": map[string]interface{}{"name": "p", "namespace": "ns", "uid": "pod-1"}}}
	m.Observe(pod)
	m.Observe(deployment("v1", 1, 1, 3, 3))
	if len(m.m) != 0 {
		t.Fatalf("learned from %d objects of kinds that are no parent, want 0", len(m.m))
	}
	m.Assess(deployment("v1", 1, 1, 3, 3))
	if len(m.m) != 0 || m.Learns(deployments) {
		t.Fatalf("assessing a parent of a kind it does not learn from kept %d entries", len(m.m))
	}
	m.AddParentKind(deployments)
	m.Assess(deployment("v1", 1, 1, 3, 3))
	other := deployment("v1", 1, 1, 3, 3)
	other.SetUID("u-2")
	m.Observe(other)
	m.Observe(pod)
	if _, ok := m.m["u-2"]; !ok || len(m.m) != 2 {
		t.Fatalf("entries %v, want the two Deployments", m.m)
	}
	now = now.Add(50 * time.Minute)
	m.Observe(other)
	now = now.Add(20 * time.Minute)
	m.Observe(other)
	if _, ok := m.m["u-1"]; ok {
		t.Fatal("a parent not seen for longer than the age is still held")
	}
	if _, ok := m.m["u-2"]; !ok {
		t.Fatal("a parent seen within the age was dropped")
	}
}

// A parent a cache delivered is kept however long it stays unchanged:
// caches deliver an unchanged object no more, and one dropped would be
// decided on the cluster's record alone, which may have given way to
// others' in a full namespace. Only its deletion forgets it. A parent only
// read live (assessed) still ages out.
func TestMemoryKeepsACachedParentUntilItIsDeleted(t *testing.T) {
	now := time.Unix(1000, 0)
	m := NewMemory(time.Hour, func() time.Time { return now })
	m.AddParentKind(schema.GroupKind{Group: "apps", Kind: "Deployment"})
	cached := deployment("v1", 1, 1, 3, 3)
	m.ObserveStatus(cached, cached.GroupVersionKind().GroupKind(), "",
		func() *unstructured.Unstructured { return cached }, func() *unstructured.Unstructured { return cached })
	live := deployment("v1", 1, 1, 3, 3)
	live.SetUID("u-live")
	m.Assess(live)
	now = now.Add(30 * 24 * time.Hour)
	other := deployment("v1", 1, 1, 3, 3)
	other.SetUID("u-other")
	m.Assess(other) // a sighting, which sweeps
	if _, ok := m.m[cached.GetUID()]; !ok {
		t.Fatal("a quiet parent a cache delivered was dropped")
	}
	if f := m.Assess(cached); !f.AtCurrentSpec {
		t.Fatalf("the quiet parent is no longer known settled at its spec: %+v", f)
	}
	if _, ok := m.m["u-live"]; ok {
		t.Fatal("a parent only read live, not seen for longer than the age, is still held")
	}
	m.Forget(cached.GetUID())
	if _, ok := m.m[cached.GetUID()]; ok {
		t.Fatal("a deleted parent is still held")
	}
}

func TestSpecHashIgnoresMetadataAndStatus(t *testing.T) {
	a, b := deployment("v1", 1, 1, 3, 3), deployment("v1", 7, 6, 3, 1)
	b.SetAnnotations(map[string]string{"x": "y"})
	if SpecHash(a) != SpecHash(b) {
		t.Fatal("metadata or status changed the spec hash")
	}
	if SpecHash(a) == SpecHash(deployment("v2", 1, 1, 3, 3)) {
		t.Fatal("a spec change kept the hash")
	}
}

// parentMemory is a Memory that learns from Deployments and Widgets as a
// cache delivers them.
func parentMemory() *Memory {
	m := newDeploymentMemory(0, time.Now)
	m.AddParentKind(schema.GroupKind{Group: "apps", Kind: "Deployment"})
	m.AddParentKind(schema.GroupKind{Group: "example.io", Kind: "Widget"})
	return m
}

// A rollback to the spec the parent settled at before, started while a
// newer spec was still rolling out, is a change being carried out.
func TestAssessRollbackMidRollout(t *testing.T) {
	m := newDeploymentMemory(0, time.Now)
	steps := []struct {
		name   string
		parent *unstructured.Unstructured
		atSpec bool
	}{
		{"settled at v1", deployment("v1", 1, 1, 3, 3), true},
		{"v2 rolling out", deployment("v2", 2, 2, 3, 1), false},
		{"rolled back to v1 before v2 settled", deployment("v1", 3, 3, 3, 2), false},
		{"settled at v1 again", deployment("v1", 3, 3, 3, 3), true},
		{"a person's edit of a child: the controller's revert is drift", deployment("v1", 3, 3, 3, 2), true},
	}
	for _, s := range steps {
		if f := m.Assess(s.parent); f.AtCurrentSpec != s.atSpec {
			t.Fatalf("%s: AtCurrentSpec %v, want %v (%s)", s.name, f.AtCurrentSpec, s.atSpec, f.Reason)
		}
	}
}

// Annotation-only generation bumps keep the generation the spec was first
// seen at: an approval written for that generation still names this spec.
func TestSpecSinceSurvivesAnnotationBumps(t *testing.T) {
	m := parentMemory()
	m.Observe(deployment("v1", 4, 4, 3, 3))
	if f := m.Assess(deployment("v1", 6, 4, 3, 3)); f.SpecSince != 4 || !f.AtCurrentSpec {
		t.Fatalf("after two annotation bumps: %+v, want SpecSince 4 at the current spec", f)
	}
	if f := m.Assess(deployment("v2", 7, 6, 3, 3)); f.SpecSince != 7 || f.AtCurrentSpec {
		t.Fatalf("after a spec change: %+v, want SpecSince 7, not settled", f)
	}
}

// A cache that trails delivers the parent as it was before its last spec
// change after the proxy has learned (from a status write it forwarded)
// that the parent settled at the new spec. The late sighting must not make
// the memory believe the parent is carrying out a change again: the
// controller's next write under the stale cached parent would pass as
// expected when it is drift.
func TestLateSightingOfAnOlderSpecKeepsTheSettlement(t *testing.T) {
	m := parentMemory()
	before := deployment("v1", 1, 1, 3, 3)
	m.Observe(before)
	bumped := deployment("v2", 2, 1, 3, 3)
	m.Observe(bumped)
	m.Observe(deployment("v2", 2, 2, 3, 3)) // the status write the proxy forwarded
	m.Observe(before)                       // the informer's backlog
	if f := m.Assess(bumped); !f.AtCurrentSpec || f.SpecSince != 2 {
		t.Fatalf("the stale cached parent after a late sighting of v1: %+v, want settled at v2 since generation 2", f)
	}
	// A late sighting of the current spec still teaches when it was first
	// seen.
	m2 := parentMemory()
	m2.Observe(deployment("v1", 5, 5, 3, 3))
	m2.Observe(deployment("v1", 3, 3, 3, 3))
	if f := m2.Assess(deployment("v1", 5, 5, 3, 3)); f.SpecSince != 3 {
		t.Fatalf("SpecSince %d after a late sighting of the same spec, want 3", f.SpecSince)
	}
}

// customResource is a kind kstatus judges by its conditions alone.
func customResource(generation int64, conditions ...map[string]interface{}) *unstructured.Unstructured {
	conds := make([]interface{}, 0, len(conditions))
	for _, c := range conditions {
		conds = append(conds, c)
	}
	u := &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "example.io/v1", "kind": "Widget",
		"spec":   map[string]interface{}{"size": int64(generation)},
		"status": map[string]interface{}{"conditions": conds},
	}}
	u.SetGeneration(generation)
	return u
}

func TestCurrentReadsTheObservedGenerationOfConditions(t *testing.T) {
	ready := func(og int64) map[string]interface{} {
		return map[string]interface{}{"type": "Ready", "status": "True", "observedGeneration": og}
	}
	tests := []struct {
		name string
		obj  *unstructured.Unstructured
		want bool
	}{
		{"Ready at the current generation", customResource(3, ready(3)), true},
		{"Ready for the previous spec", customResource(3, ready(2)), false},
		{"Synced behind while Ready is current", customResource(3, ready(3), map[string]interface{}{"type": "Synced", "status": "True", "observedGeneration": int64(2)}), false},
		{"Ready without an observed generation", customResource(3, map[string]interface{}{"type": "Ready", "status": "True"}), true},
		{"another condition's observed generation does not count", customResource(3, ready(3), map[string]interface{}{"type": "Available", "status": "True", "observedGeneration": int64(1)}), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, why := Current(tc.obj); got != tc.want {
				t.Fatalf("Current = %v (%s), want %v", got, why, tc.want)
			}
		})
	}
}

func TestCurrentReadsTheGenerationRecordedFromStatusWrites(t *testing.T) {
	available := map[string]interface{}{"type": "Available", "status": "True"}
	recorded := func(obj *unstructured.Unstructured, g string) *unstructured.Unstructured {
		obj.SetAnnotations(map[string]string{"kausality.io/observedGeneration": g})
		return obj
	}
	tests := []struct {
		name string
		obj  *unstructured.Unstructured
		want bool
	}{
		{"status written at the current generation", recorded(customResource(2, available), "2"), true},
		{"a spec change since the last status write", recorded(customResource(3, available), "2"), false},
		{"no status write recorded", customResource(3, available), true},
		{"a record that is no number", recorded(customResource(3, available), "two"), true},
		{"the kind reports its own observed generation, which wins", recorded(customResource(3, map[string]interface{}{"type": "Ready", "status": "True", "observedGeneration": int64(3)}), "2"), true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got, why := Current(tc.obj); got != tc.want {
				t.Fatalf("Current = %v (%s), want %v", got, why, tc.want)
			}
		})
	}
}

// newDeploymentMemory is a Memory that learns from Deployments, as the
// write path makes it once their controller's writes are decided.
func newDeploymentMemory(maxAge time.Duration, now func() time.Time) *Memory {
	m := NewMemory(maxAge, now)
	m.AddParentKind(schema.GroupKind{Group: "apps", Kind: "Deployment"})
	return m
}
