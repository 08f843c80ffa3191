package drifts

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/objects"
	"github.com/kausality-io/kausality-proxy/intercept/settle"
	"github.com/kausality-io/kausality-proxy/internal/testutil"
	"github.com/kausality-io/kausality-proxy/report/notify"
)

// fixedObjects holds one parent and one child, both unchanged.
type fixedObjects struct{ parent, child *unstructured.Unstructured }

func (o *fixedObjects) GetKindShared(context.Context, schema.GroupKind, string, string) (*unstructured.Unstructured, objects.Source, error) {
	return o.parent, objects.FromCache, nil
}
func (o *fixedObjects) GetMetadata(context.Context, schema.GroupVersionResource, string, string) (*unstructured.Unstructured, objects.Source, error) {
	return o.child, objects.FromCache, nil
}
func (*fixedObjects) WaitForMetadataSync(context.Context, schema.GroupVersionResource) error {
	return nil
}
func (*fixedObjects) Mapping(gvk schema.GroupVersionKind) (*meta.RESTMapping, error) {
	return &meta.RESTMapping{Resource: schema.GroupVersionResource{Group: gvk.Group, Version: gvk.Version, Resource: "things"}, GroupVersionKind: gvk, Scope: meta.RESTScopeNamespace}, nil
}
func (*fixedObjects) WaitForSync(context.Context, schema.GroupVersionResource) error { return nil }
func (*fixedObjects) CachesParentsOf(schema.GroupVersionResource) bool               { return false }
func (*fixedObjects) AddObserver(objects.Observer)                                   {}

func ledgerParent(replicas int64) *unstructured.Unstructured {
	p := &unstructured.Unstructured{}
	p.SetAPIVersion("apps/v1")
	p.SetKind("Deployment")
	p.SetNamespace("ns")
	p.SetName("web")
	p.SetUID("uid-web")
	p.SetGeneration(3)
	_ = unstructured.SetNestedField(p.Object, replicas, "spec", "replicas")
	return p
}

func ledgerChild() *unstructured.Unstructured {
	c := &unstructured.Unstructured{}
	c.SetAPIVersion("v1")
	c.SetKind("ConfigMap")
	c.SetNamespace("ns")
	c.SetName("cm")
	c.SetUID("uid-cm")
	return c
}

func ledgerWith(t *testing.T, objs Objects, clock *clocktesting.FakeClock, receivers ...string) (*Ledger, *fake.Clientset) {
	t.Helper()
	client := fake.NewClientset()
	testutil.ConfigMapResourceVersions(client)
	l, err := New(Options{Client: client, Objects: objs, Namespace: "kausality-system", Clock: clock, Receivers: receivers})
	if err != nil {
		t.Fatal(err)
	}
	return l, client
}

// sync copies the record as stored into the informer's store, as the watch would.
func syncRecord(t *testing.T, l *Ledger, client *fake.Clientset, name string) bool {
	t.Helper()
	cm, err := client.CoreV1().ConfigMaps("kausality-system").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		if old, ok, _ := l.records.GetStore().GetByKey("kausality-system/" + name); ok {
			_ = l.records.GetStore().Delete(old)
		}
		return false
	}
	if err := l.records.GetStore().Update(cm); err != nil {
		t.Fatal(err)
	}
	return true
}

func heldRecord(parent *unstructured.Unstructured, child *unstructured.Unstructured) *Record {
	d := &decision.Decision{
		Child:  decision.ObjectRef{APIVersion: "v1", Kind: "ConfigMap", Namespace: "ns", Name: "cm"},
		Parent: &decision.ParentInfo{Ref: decision.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "ns", Name: "web"}, UID: "uid-web", Generation: parent.GetGeneration()},
		Report: decision.ReportDetected, Result: decision.Deny,
	}
	r := notify.FromDecision(d, notify.Write{Operation: decision.Update, User: &user.DefaultInfo{Name: "controller"}, OldObject: child, NewObject: child})
	return &Record{Name: RecordName(r.Spec.ID), Report: summarize(r), State: State{ParentSpecHash: settle.SpecHash(parent), Held: true}}
}

// A drift that is still open, whose Detected report every receiver has
// taken, keeps its record: the record is what Slack clicks and kubectl
// kausality drifts read, and the Resolved report is still to be sent.
func TestAnOpenDeliveredDriftOutlivesMaxAge(t *testing.T) {
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { posts.Add(1) }))
	defer srv.Close()
	clock := clocktesting.NewFakeClock(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	objs := &fixedObjects{parent: ledgerParent(2), child: ledgerChild()}
	l, client := ledgerWith(t, objs, clock, srv.URL)
	rec := heldRecord(objs.parent, objs.child)
	l.create(context.Background(), rec, 0)
	syncRecord(t, l, client, rec.Name)
	if _, err := l.reconcile(context.Background(), rec.Name); err != nil {
		t.Fatal(err)
	}
	syncRecord(t, l, client, rec.Name)
	if posts.Load() != 1 {
		t.Fatalf("%d posts, want the Detected report", posts.Load())
	}
	// A day later the controller is still held, nobody has acted.
	clock.Step(25 * time.Hour)
	if _, err := l.reconcile(context.Background(), rec.Name); err != nil {
		t.Fatal(err)
	}
	if !syncRecord(t, l, client, rec.Name) {
		t.Errorf("the record of an open drift whose Detected report was delivered was deleted after MaxAge; " +
			"its Resolved report will never be sent and Slack clicks on it answer 404")
	}
}

// A drift resolved because the parent's spec changed comes back (same
// child, same change) under the parent's new spec before its Resolved
// report is out. The reopened record must describe the new detection.
func TestAReopenedDriftIsJudgedOnTheNewSpec(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	objs := &fixedObjects{parent: ledgerParent(2), child: ledgerChild()}
	l, client := ledgerWith(t, objs, clock)
	first := heldRecord(objs.parent, objs.child)
	l.create(context.Background(), first, 0)
	syncRecord(t, l, client, first.Name)

	// The parent's spec changes: the drift ends. (A receiver is down, so the
	// resolved record stays.)
	objs.parent = ledgerParent(5)
	cm, _ := client.CoreV1().ConfigMaps("kausality-system").Get(context.Background(), first.Name, metav1.GetOptions{})
	stored, _ := decode(cm)
	if reason, ended := Resolve(stored, Observed{Parent: objs.parent, Child: objs.child, Now: clock.Now()}); !ended {
		t.Fatal("no resolution")
	} else {
		stored.State.Resolved = &Resolution{Reason: reason, At: metav1.NewTime(clock.Now())}
	}
	if err := l.update(context.Background(), stored); err != nil {
		t.Fatal(err)
	}
	syncRecord(t, l, client, first.Name)

	// The parent settles at its new spec; the controller makes the same
	// change again and is held again: the same drift id, detected under
	// the new spec.
	clock.Step(time.Minute)
	again := heldRecord(objs.parent, objs.child)
	if again.Name != first.Name {
		t.Fatalf("ids differ: %s %s", again.Name, first.Name)
	}
	l.create(context.Background(), again, 0)
	cm, _ = client.CoreV1().ConfigMaps("kausality-system").Get(context.Background(), first.Name, metav1.GetOptions{})
	reopened, _ := decode(cm)
	if reopened.State.Resolved != nil {
		t.Fatal("not reopened")
	}
	if reason, ended := Resolve(reopened, Observed{Parent: objs.parent, Child: objs.child, Now: clock.Now()}); ended {
		t.Errorf("the reopened drift, detected a moment ago under the parent's current spec, is resolved at once as %s "+
			"(record keeps parentSpecHash %s of the old spec, detectedAt %v)", reason, reopened.State.ParentSpecHash, reopened.State.DetectedAt)
	}
}

// A drift whose Detected report no receiver has taken within MaxAge is
// given up: its record goes, as the option says.
func TestAnUndeliveredDriftIsGivenUpAfterMaxAge(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusServiceUnavailable) }))
	defer srv.Close()
	clock := clocktesting.NewFakeClock(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	objs := &fixedObjects{parent: ledgerParent(2), child: ledgerChild()}
	l, client := ledgerWith(t, objs, clock, srv.URL)
	rec := heldRecord(objs.parent, objs.child)
	l.create(context.Background(), rec, 0)
	syncRecord(t, l, client, rec.Name)
	if _, err := l.reconcile(context.Background(), rec.Name); err == nil {
		t.Fatal("a delivery to a receiver that is down succeeded")
	}
	syncRecord(t, l, client, rec.Name)
	clock.Step(23 * time.Hour)
	_, _ = l.reconcile(context.Background(), rec.Name)
	if !syncRecord(t, l, client, rec.Name) {
		t.Fatal("given up before MaxAge")
	}
	clock.Step(2 * time.Hour)
	if _, err := l.reconcile(context.Background(), rec.Name); err != nil {
		t.Fatal(err)
	}
	if syncRecord(t, l, client, rec.Name) {
		t.Error("a drift no receiver took in 25 hours is still recorded")
	}
}
