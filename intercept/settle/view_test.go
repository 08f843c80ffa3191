package settle

import (
	"strconv"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// realisticDeployment is a Deployment at generation 4 with the spec of a
// typical workload, settled or still rolling out.
func realisticDeployment(settled bool) *unstructured.Unstructured {
	updated := int64(3)
	if !settled {
		updated = 2
	}
	return &unstructured.Unstructured{Object: map[string]interface{}{
		"apiVersion": "apps/v1", "kind": "Deployment",
		"metadata": map[string]interface{}{
			"name": "web", "namespace": "shop", "uid": "2c6e1d0a-7a43-4f0e-9a57-1d8f4b9e2c11",
			"generation": int64(4), "resourceVersion": "1000",
			"labels":      map[string]interface{}{"app": "web", "tier": "frontend"},
			"annotations": map[string]interface{}{"deployment.kubernetes.io/revision": "4"},
		},
		"spec": map[string]interface{}{
			"replicas":                int64(3),
			"revisionHistoryLimit":    int64(10),
			"progressDeadlineSeconds": int64(600),
			"selector":                map[string]interface{}{"matchLabels": map[string]interface{}{"app": "web"}},
			"strategy": map[string]interface{}{"type": "RollingUpdate",
				"rollingUpdate": map[string]interface{}{"maxSurge": "25%", "maxUnavailable": "25%"}},
			"template": map[string]interface{}{
				"metadata": map[string]interface{}{"labels": map[string]interface{}{"app": "web", "tier": "frontend"}},
				"spec": map[string]interface{}{
					"restartPolicy":                 "Always",
					"terminationGracePeriodSeconds": int64(30),
					"dnsPolicy":                     "ClusterFirst",
					"schedulerName":                 "default-scheduler",
					"securityContext":               map[string]interface{}{},
					"containers": []interface{}{map[string]interface{}{
						"name": "app", "image": "registry.example.com/shop/web:1.42.0", "imagePullPolicy": "IfNotPresent",
						"ports": []interface{}{
							map[string]interface{}{"name": "http", "containerPort": int64(8080), "protocol": "TCP"},
							map[string]interface{}{"name": "metrics", "containerPort": int64(9090), "protocol": "TCP"},
						},
						"env": []interface{}{
							map[string]interface{}{"name": "LOG_LEVEL", "value": "info"},
							map[string]interface{}{"name": "DATABASE_URL", "value": "postgres://db.shop.svc:5432/shop"},
							map[string]interface{}{"name": "POD_NAME", "valueFrom": map[string]interface{}{
								"fieldRef": map[string]interface{}{"apiVersion": "v1", "fieldPath": "metadata.name"}}},
						},
						"resources": map[string]interface{}{
							"requests": map[string]interface{}{"cpu": "250m", "memory": "256Mi"},
							"limits":   map[string]interface{}{"cpu": "1", "memory": "512Mi"},
						},
						"readinessProbe": map[string]interface{}{
							"httpGet":       map[string]interface{}{"path": "/healthz", "port": "http", "scheme": "HTTP"},
							"periodSeconds": int64(10), "timeoutSeconds": int64(1), "successThreshold": int64(1), "failureThreshold": int64(3),
						},
						"terminationMessagePath":   "/dev/termination-log",
						"terminationMessagePolicy": "File",
					}},
				},
			},
		},
		"status": map[string]interface{}{
			"observedGeneration": int64(4), "replicas": int64(3), "updatedReplicas": updated,
			"readyReplicas": updated, "availableReplicas": updated,
			"conditions": []interface{}{
				map[string]interface{}{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
				map[string]interface{}{"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
			},
		},
	}}
}

// A parent's watch event is mostly a status change: a new resourceVersion
// at the same generation.
func BenchmarkMemoryObserveStatusChange(b *testing.B) {
	m := parentMemory()
	obj := realisticDeployment(true)
	statuses := [2]interface{}{realisticDeployment(true).Object["status"], realisticDeployment(false).Object["status"]}
	rvs := [2]string{"1001", "1002"}
	m.Observe(obj)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		obj.Object["status"] = statuses[i%2]
		obj.SetResourceVersion(rvs[i%2])
		m.Observe(obj)
	}
}

// A version at a generation already hashed takes that hash: kube-apiserver
// changes no spec without bumping generation. The second sightings below
// change the spec at the same generation, which kube-apiserver never does,
// to show which hash the memory took.
func TestViewReusesTheHashOfAGeneration(t *testing.T) {
	withRV := func(obj *unstructured.Unstructured, rv string) *unstructured.Unstructured {
		obj.SetResourceVersion(rv)
		return obj
	}
	v1, v2 := SpecHash(deployment("v1", 1, 1, 3, 3)), SpecHash(deployment("v2", 1, 1, 3, 3))
	tests := []struct {
		name          string
		first, second *unstructured.Unstructured
		wantCurrent   string
		wantAtSpec    bool
	}{
		{"a new version at the same generation keeps its hash",
			withRV(deployment("v1", 2, 2, 3, 3), "10"), withRV(deployment("v2", 2, 2, 3, 1), "11"), v1, true},
		{"a bumped generation is hashed",
			withRV(deployment("v1", 2, 2, 3, 3), "10"), withRV(deployment("v2", 3, 3, 3, 1), "11"), v2, false},
		{"generation 0 is always hashed",
			withRV(deployment("v1", 0, 0, 3, 3), "10"), withRV(deployment("v2", 0, 0, 3, 1), "11"), v2, false},
		{"a first sighting without a resourceVersion leaves nothing to reuse",
			deployment("v1", 2, 2, 3, 3), withRV(deployment("v2", 2, 2, 3, 1), "11"), v2, false},
		{"a second sighting without a resourceVersion is hashed",
			withRV(deployment("v1", 2, 2, 3, 3), "10"), deployment("v2", 2, 2, 3, 1), v2, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m := parentMemory()
			m.Observe(tc.first)
			m.Observe(tc.second)
			f := m.Assess(tc.second)
			if f.AtCurrentSpec != tc.wantAtSpec {
				t.Fatalf("AtCurrentSpec %v, want %v (%s)", f.AtCurrentSpec, tc.wantAtSpec, f.Reason)
			}
			_, r, ok := m.Record(tc.second.GetUID())
			if !ok {
				t.Fatal("no record")
			}
			if r.Settled != v1 {
				t.Fatalf("settled at %s, want v1's %s", r.Settled, v1)
			}
			if r.Current != tc.wantCurrent {
				t.Fatalf("current spec %s, want %s (v1 %s, v2 %s)", r.Current, tc.wantCurrent, v1, v2)
			}
		})
	}
}

// ObserveStatus asks for the whole parent only when it has not hashed the
// spec of the parent's generation, and learns what Observe of the whole
// parent learns.
func TestObserveStatusAsksForTheWholeOnlyForANewGeneration(t *testing.T) {
	withRV := func(obj *unstructured.Unstructured, rv string) *unstructured.Unstructured {
		obj.SetResourceVersion(rv)
		return obj
	}
	withoutSpec := func(obj *unstructured.Unstructured) *unstructured.Unstructured {
		status := obj.DeepCopy()
		unstructured.RemoveNestedField(status.Object, "spec", "template")
		return status
	}
	steps := []struct {
		whole     *unstructured.Unstructured
		wantAsked bool
	}{
		{withRV(deployment("v1", 2, 1, 3, 1), "10"), true},
		{withRV(deployment("v1", 2, 2, 3, 3), "11"), false},
		{withRV(deployment("v2", 3, 2, 3, 3), "12"), true},
		{withRV(deployment("v2", 3, 3, 3, 3), "13"), false},
	}
	viaStatus, viaWhole := parentMemory(), parentMemory()
	for i, step := range steps {
		asked := false
		status := withoutSpec(step.whole)
		viaStatus.ObserveStatus(status, status.GroupVersionKind().GroupKind(), "",
			func() *unstructured.Unstructured { return status },
			func() *unstructured.Unstructured { asked = true; return step.whole })
		viaWhole.Observe(step.whole)
		if asked != step.wantAsked {
			t.Errorf("step %d: asked for the whole parent %v, want %v", i, asked, step.wantAsked)
		}
		learnedAlike(t, i, viaStatus, viaWhole, step.whole.GetUID())
	}
	if f := viaStatus.Assess(steps[3].whole); !f.AtCurrentSpec {
		t.Errorf("not at its current spec: %s", f.Reason)
	}
}

// A version whose status key is the last one's is not decoded: it says
// what the last one said, learned under its own resourceVersion. A new
// key, a new generation or an empty key is decoded.
func TestObserveStatusSkipsAVersionAlikeInStatus(t *testing.T) {
	gk := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	steps := []struct {
		key        string
		obj        *unstructured.Unstructured
		wantStatus bool
	}{
		{"k1", deployment("v1", 2, 2, 3, 3), true},
		{"k1", deployment("v1", 2, 2, 3, 3), false},
		{"k2", deployment("v1", 2, 1, 3, 3), true},
		{"k2", deployment("v1", 2, 1, 3, 3), false},
		{"", deployment("v1", 2, 1, 3, 3), true},
		{"k2", deployment("v1", 2, 1, 3, 3), true},
		{"k2", deployment("v1", 3, 1, 3, 3), true},
	}
	m, whole := parentMemory(), parentMemory()
	for i, step := range steps {
		step.obj.SetResourceVersion(strconv.Itoa(10 + i))
		asked := false
		m.ObserveStatus(step.obj, gk, step.key,
			func() *unstructured.Unstructured { asked = true; return step.obj },
			func() *unstructured.Unstructured { return step.obj })
		whole.Observe(step.obj)
		if asked != step.wantStatus {
			t.Errorf("step %d: decoded %v, want %v", i, asked, step.wantStatus)
		}
		learnedAlike(t, i, m, whole, step.obj.GetUID())
		if f, wantFacts := m.Assess(step.obj), whole.Assess(step.obj); f != wantFacts {
			t.Errorf("step %d: facts %+v, want %+v", i, f, wantFacts)
		}
	}
}

// learnedAlike fails unless got and want record the same of uid after
// step.
func learnedAlike(t *testing.T, step int, got, want *Memory, uid types.UID) {
	t.Helper()
	_, g, _ := got.Record(uid)
	_, w, _ := want.Record(uid)
	if g != w {
		t.Errorf("step %d: learned %+v, Observe learns %+v", step, g, w)
	}
}
