package objects

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/client-go/tools/cache"
)

// storedDeployment is a Deployment as kube-apiserver returns it, defaults
// filled in and its controller's status written.
const storedDeployment = `{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"annotations":{"kausality.io/phase":"initialized"},"creationTimestamp":"2026-11-26T02:00:00Z","generation":1,"managedFields":[{"apiVersion":"apps/v1","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:annotations":{".":{},"f:kausality.io/phase":{}}},"f:spec":{"f:progressDeadlineSeconds":{},"f:replicas":{},"f:revisionHistoryLimit":{},"f:selector":{},"f:strategy":{"f:rollingUpdate":{".":{},"f:maxSurge":{},"f:maxUnavailable":{}},"f:type":{}},"f:template":{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"app\"}":{".":{},"f:image":{},"f:name":{}}}}}}},"manager":"bench-user","operation":"Update","time":"2026-11-26T02:00:00Z"},{"apiVersion":"apps/v1","fieldsType":"FieldsV1","fieldsV1":{"f:status":{"f:conditions":{".":{},"k:{\"type\":\"Available\"}":{".":{},"f:status":{},"f:type":{}}},"f:observedGeneration":{}}},"manager":"kube-controller-manager","operation":"Update","subresource":"status","time":"2026-11-26T02:00:01Z"}],"name":"NAME","namespace":"bench-scale","resourceVersion":"123456","uid":"UID"},"spec":{"progressDeadlineSeconds":600,"replicas":0,"revisionHistoryLimit":10,"selector":{"matchLabels":{"app":"NAME"}},"strategy":{"rollingUpdate":{"maxSurge":"25%","maxUnavailable":"25%"},"type":"RollingUpdate"},"template":{"metadata":{"creationTimestamp":null,"labels":{"app":"NAME"}},"spec":{"containers":[{"env":[{"name":"MODE","value":"bench"}],"image":"registry.k8s.io/pause:3.10","imagePullPolicy":"IfNotPresent","name":"app","ports":[{"containerPort":8080,"name":"http","protocol":"TCP"}],"resources":{},"terminationMessagePath":"/dev/termination-log","terminationMessagePolicy":"File"}],"dnsPolicy":"ClusterFirst","restartPolicy":"Always","schedulerName":"default-scheduler","securityContext":{},"terminationGracePeriodSeconds":30}}},"status":{"conditions":[{"lastTransitionTime":"2026-11-26T02:00:01Z","lastUpdateTime":"2026-11-26T02:00:01Z","message":"Deployment has minimum availability.","reason":"MinimumReplicasAvailable","status":"True","type":"Available"},{"lastTransitionTime":"2026-11-26T02:00:01Z","lastUpdateTime":"2026-11-26T02:00:01Z","message":"ReplicaSet \"NAME-5d8f\" has successfully progressed.","reason":"NewReplicaSetAvailable","status":"True","type":"Progressing"}],"observedGeneration":1,"replicas":0}}`

// decodedDeployment is storedDeployment number i, decoded as a dynamic
// informer decodes it.
func decodedDeployment(t testing.TB, i int) *unstructured.Unstructured {
	t.Helper()
	name := fmt.Sprintf("p-%05d", i)
	data := strings.NewReplacer("NAME", name, "UID", fmt.Sprintf("0f6d1c3e-8a52-4c1e-9b3a-%012d", i)).Replace(storedDeployment)
	u := &unstructured.Unstructured{}
	if err := utiljson.Unmarshal([]byte(data), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// The compact form decodes to the very object the lean transform makes:
// every field a decision, a policy or a report reads of a parent is there,
// with the same types (integers stay int64).
func TestCompactParentDecodesToTheLeanObject(t *testing.T) {
	for name, u := range map[string]*unstructured.Unstructured{"stored Deployment": decodedDeployment(t, 1), "web": web()} {
		t.Run(name, func(t *testing.T) {
			want, _ := LeanParent(u.DeepCopy())
			out, err := compactParentOf(u)
			if err != nil {
				t.Fatal(err)
			}
			p, ok := out.(*compactParent)
			if !ok {
				t.Fatalf("transform gave %T", out)
			}
			m := p.GetObjectMeta()
			if m.GetName() != u.GetName() || m.GetNamespace() != u.GetNamespace() || m.GetUID() != u.GetUID() ||
				m.GetResourceVersion() != u.GetResourceVersion() || p.groupKind() != u.GroupVersionKind().GroupKind() ||
				p.GetObjectKind().GroupVersionKind() != u.GroupVersionKind() {
				t.Errorf("identity: %+v", p)
			}
			if key, err := cache.MetaNamespaceKeyFunc(p); err != nil || key != cacheKey(u.GetNamespace(), u.GetName()) {
				t.Errorf("key %q, %v", key, err)
			}
			got, err := p.object()
			if err != nil {
				t.Fatal(err)
			}
			if !equality.Semantic.DeepEqual(got.Object, want.(*unstructured.Unstructured).Object) {
				t.Errorf("decoded\n%v\nwant\n%v", got.Object, want.(*unstructured.Unstructured).Object)
			}
			if r, _, _ := unstructured.NestedFieldNoCopy(got.Object, "spec", "replicas"); fmt.Sprintf("%T", r) != "int64" {
				t.Errorf("spec.replicas decoded as %T", r)
			}
		})
	}
	if out, err := compactParentOf("tombstone"); err != nil || out != "tombstone" {
		t.Errorf("a non-object: %v %v", out, err)
	}
}

// retainedPerObject is the heap that n objects made by mk keep, per object.
func retainedPerObject(n int, mk func(i int) interface{}) float64 {
	keep := make([]interface{}, n)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range keep {
		keep[i] = mk(i)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(keep)
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
}

// A cached parent costs at most 4 KiB of heap: a Deployment as a tree of
// maps, even without its managedFields, is about 10 KiB.
func TestCompactParentRetainsAtMost4KiB(t *testing.T) {
	const n = 2000
	compact := retainedPerObject(n, func(i int) interface{} { out, _ := compactParentOf(decodedDeployment(t, i)); return out })
	tree := retainedPerObject(n, func(i int) interface{} { out, _ := LeanParent(decodedDeployment(t, i)); return out })
	t.Logf("retained per parent: compact %.0f B, lean tree %.0f B", compact, tree)
	if compact > 4096 {
		t.Errorf("a compact parent retains %.0f B, want at most 4096", compact)
	}
}

// BenchmarkParentTransform is the CPU of a parent's arrival in its cache
// (decoding included) and the heap the cache keeps of it.
func BenchmarkParentTransform(b *testing.B) {
	for _, tc := range []struct {
		name      string
		transform func(interface{}) (interface{}, error)
	}{{"lean-tree", LeanParent}, {"compact", compactParentOf}} {
		b.Run(tc.name, func(b *testing.B) {
			keep := make([]interface{}, 0, b.N)
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			for i := 0; i < b.N; i++ {
				out, err := tc.transform(decodedDeployment(b, i))
				if err != nil {
					b.Fatal(err)
				}
				keep = append(keep, out)
			}
			b.StopTimer()
			runtime.GC()
			runtime.ReadMemStats(&after)
			runtime.KeepAlive(keep)
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(b.N), "retained-B/parent")
		})
	}
}

func BenchmarkCompactParentDecode(b *testing.B) {
	out, _ := compactParentOf(decodedDeployment(b, 1))
	p := out.(*compactParent)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.object(); err != nil {
			b.Fatal(err)
		}
	}
}

// recorder is an Observer that records what it is given.
type recorder struct {
	mu       sync.Mutex
	learns   bool
	observed []*unstructured.Unstructured
	metadata []metav1.Object
	forgot   []types.UID
}

func (r *recorder) Observe(obj *unstructured.Unstructured) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.observed = append(r.observed, obj)
}

func (r *recorder) Forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgot = append(r.forgot, uid)
}

func (r *recorder) Learns(schema.GroupKind) bool { return r.learns }

// metadataRecorder is satisfied with metadata.
type metadataRecorder struct{ recorder }

func (r *metadataRecorder) ObserveMetadata(obj metav1.Object) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.metadata = append(r.metadata, obj)
}

// Observers of parents get them decoded when they learn from the kind,
// nothing when they do not, and only metadata when that is all they need;
// a read after a change of the parent gets the new version, not the one
// kept decoded.
func TestCachedParentsReachObserversAndReadersAsStored(t *testing.T) {
	u := web()
	u.SetUID("web-uid")
	s, _ := newStore(t, u)
	learner, ignorer, meta := &recorder{learns: true}, &recorder{}, &metadataRecorder{}
	s.AddObserver(learner)
	s.AddObserver(ignorer)
	s.AddObserver(meta)
	ctx := context.Background()
	waitCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := s.WaitForSync(waitCtx, deployments); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the observers to hear of the parent", func() bool {
		learner.mu.Lock()
		defer learner.mu.Unlock()
		meta.mu.Lock()
		defer meta.mu.Unlock()
		return len(learner.observed) == 1 && len(meta.metadata) == 1
	})
	if got := learner.observed[0]; got.GetAnnotations()["kausality.io/mode"] != "enforce" || got.Object["spec"] == nil {
		t.Errorf("the learner got %v", got.Object)
	}
	if len(ignorer.observed) != 0 || len(meta.observed) != 0 {
		t.Errorf("decoded for an observer that does not learn from the kind (%d) or needs metadata only (%d)", len(ignorer.observed), len(meta.observed))
	}
	if m := meta.metadata[0]; m.GetUID() != "web-uid" || m.GetName() != "web" {
		t.Errorf("metadata observer got %v/%v", m.GetName(), m.GetUID())
	}

	// An observer added once the cache runs hears of what it holds.
	late := &recorder{learns: true}
	s.AddObserver(late)
	if len(late.observed) != 1 || late.observed[0].GetName() != "web" {
		t.Errorf("a late observer got %d parents", len(late.observed))
	}

	first, src, err := s.GetShared(ctx, deployments, "prod", "web")
	if err != nil || src != FromCache || first.GetResourceVersion() != "42" {
		t.Fatalf("read: %v %s %v", first, src, err)
	}
	changed := first.DeepCopy()
	changed.SetResourceVersion("43")
	changed.SetAnnotations(map[string]string{"kausality.io/mode": "log"})
	if _, err := s.dynamic.Resource(deployments).Namespace("prod").Update(ctx, changed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the cache to take in the change", func() bool {
		u, _, _ := s.GetShared(ctx, deployments, "prod", "web")
		return u.GetAnnotations()["kausality.io/mode"] == "log"
	})
	if first.GetAnnotations()["kausality.io/mode"] != "enforce" {
		t.Error("a new version changed an object a reader holds")
	}

	if err := s.dynamic.Resource(deployments).Namespace("prod").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the observers to hear of the deletion", func() bool {
		learner.mu.Lock()
		defer learner.mu.Unlock()
		meta.mu.Lock()
		defer meta.mu.Unlock()
		return len(learner.forgot) == 1 && len(meta.forgot) == 1 && learner.forgot[0] == "web-uid"
	})
}

func BenchmarkCachedParentCopy(b *testing.B) {
	u := decodedDeployment(b, 1)
	b.ReportAllocs()
	for b.Loop() {
		_ = u.DeepCopy()
	}
}
