package drifts

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/internal/testutil"
	"github.com/kausality-io/kausality-proxy/report/escalation"
)

// hangingReceiver is a DriftReport receiver that never answers: its
// requests end with their client's timeout.
func hangingReceiver(t *testing.T) *httptest.Server {
	t.Helper()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() {
		close(release)
		srv.Close()
	})
	return srv
}

// countingEscalator is Slack that takes every message.
type countingEscalator struct {
	posts  atomic.Int32
	posted chan struct{}
}

func (c *countingEscalator) Post(context.Context, v1alpha1.DriftReport) (escalation.MessageRef, error) {
	if c.posts.Add(1) == 1 {
		close(c.posted)
	}
	return escalation.MessageRef{Channel: "C0DRIFT", Timestamp: "1.2"}, nil
}

func (*countingEscalator) Resolve(context.Context, escalation.MessageRef, v1alpha1.DriftReport) error {
	return nil
}

// A DriftReport receiver that hangs (a black-holed address, a stuck log
// pipeline) is a separate system from Slack. Its failure must not hold
// back the escalation of a drift to the person on call, on every record
// and every retry.
func TestAHangingReceiverDoesNotDelayTheSlackMessage(t *testing.T) {
	srv := hangingReceiver(t)

	clock := clocktesting.NewFakeClock(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	objs := &fixedObjects{parent: ledgerParent(2), child: ledgerChild()}
	client := fake.NewClientset()
	testutil.ConfigMapResourceVersions(client)
	esc := &countingEscalator{posted: make(chan struct{})}
	l, err := New(Options{Client: client, Objects: objs, Namespace: "kausality-system", Clock: clock,
		Receivers: []string{srv.URL}, Timeout: 5 * time.Second, Escalator: esc})
	if err != nil {
		t.Fatal(err)
	}
	rec := heldRecord(objs.parent, objs.child)
	l.create(context.Background(), rec, 0)
	syncRecord(t, l, client, rec.Name)

	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		_, _ = l.reconcile(context.Background(), rec.Name)
	}()
	select {
	case <-esc.posted:
	case <-time.After(time.Second):
		<-done
		t.Errorf("the Slack message of drift %s was posted only after the hanging receiver's timeout (%v after reconcile began; %d posts)",
			rec.ID(), time.Since(start).Round(100*time.Millisecond), esc.posts.Load())
	}
	<-done
}

// A receiver gets a phase twice only when the acknowledgement was lost in
// a crash. A Slack click on the drift's message records itself on the
// same record at any time (Clicks.Claim): when one lands while a report
// is on its way, the sender's write of what it delivered conflicts, and
// must be merged into the record as stored rather than dropped.
func TestAClickDuringDeliveryDoesNotDeliverThePhaseTwice(t *testing.T) {
	clock := clocktesting.NewFakeClock(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	objs := &fixedObjects{parent: ledgerParent(2), child: ledgerChild()}
	var posts atomic.Int32
	var l *Ledger
	var client *fake.Clientset
	var rec *Record
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if posts.Add(1) == 1 {
			// Someone clicks Snooze on the drift's message meanwhile.
			now := clock.Now()
			_, err := NewClicks(client, "kausality-system").Claim(r.Context(), rec.ID(),
				escalation.ClickClaim{Key: "k1", Now: now, Expires: now.Add(5 * time.Minute)}, func(escalation.OpenDrift) error { return nil })
			if err != nil {
				t.Errorf("claim: %v", err)
			}
		}
	}))
	defer srv.Close()
	l, client = ledgerWith(t, objs, clock, srv.URL)
	conflictsLikeKubeAPIServer(client)
	rec = heldRecord(objs.parent, objs.child)
	rec.State.Slack = &escalation.MessageRef{Channel: "C0DRIFT", Timestamp: "1.2"}
	l.create(context.Background(), rec, 0)
	syncRecord(t, l, client, rec.Name)

	_, err := l.reconcile(context.Background(), rec.Name)
	syncRecord(t, l, client, rec.Name)
	if err != nil {
		// Retried, as the work queue would.
		_, _ = l.reconcile(context.Background(), rec.Name)
		syncRecord(t, l, client, rec.Name)
	}
	if n := posts.Load(); n != 1 {
		t.Errorf("the receiver got the Detected report of drift %s %d times, without any crash (first write: %v)", rec.ID(), n, err)
	}
}

// conflictsLikeKubeAPIServer makes an update of a ConfigMap whose
// resourceVersion is not the stored one fail with a conflict, as
// kube-apiserver does (the fake tracker takes any).
func conflictsLikeKubeAPIServer(client *fake.Clientset) {
	client.PrependReactor("update", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		cm := a.(clienttesting.UpdateAction).GetObject().(*corev1.ConfigMap)
		stored, err := client.Tracker().Get(corev1.SchemeGroupVersion.WithResource("configmaps"), cm.Namespace, cm.Name)
		if err != nil || cm.ResourceVersion == "" {
			return false, nil, nil
		}
		if rv := stored.(*corev1.ConfigMap).ResourceVersion; rv != cm.ResourceVersion {
			return true, nil, apierrors.NewConflict(corev1.Resource("configmaps"), cm.Name, fmt.Errorf("stored %s, update of %s", rv, cm.ResourceVersion))
		}
		return false, nil, nil
	})
}

// Receivers are told side by side: one that hangs does not hold back the
// others, and what each took is recorded.
func TestAHangingReceiverDoesNotDelayTheOthers(t *testing.T) {
	hanging := hangingReceiver(t)
	got := make(chan struct{}, 1)
	answering := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case got <- struct{}{}:
		default:
		}
	}))
	defer answering.Close()

	clock := clocktesting.NewFakeClock(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	objs := &fixedObjects{parent: ledgerParent(2), child: ledgerChild()}
	client := fake.NewClientset()
	testutil.ConfigMapResourceVersions(client)
	l, err := New(Options{Client: client, Objects: objs, Namespace: "kausality-system", Clock: clock,
		Receivers: []string{hanging.URL, answering.URL}, Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rec := heldRecord(objs.parent, objs.child)
	l.create(context.Background(), rec, 0)
	syncRecord(t, l, client, rec.Name)

	done := make(chan error, 1)
	go func() {
		_, err := l.reconcile(context.Background(), rec.Name)
		done <- err
	}()
	select {
	case <-got:
	case <-time.After(time.Second):
		t.Errorf("the second receiver was told only after the first one's timeout")
	}
	if err := <-done; err == nil {
		t.Errorf("the hanging receiver's delivery did not fail: it is not retried")
	}
	cm, err := client.CoreV1().ConfigMaps("kausality-system").Get(context.Background(), rec.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored, err := decode(cm)
	if err != nil {
		t.Fatal(err)
	}
	if stored.State.Delivered[receiverKey(answering.URL)] != v1alpha1.PhaseDetected || stored.State.Delivered[receiverKey(hanging.URL)] != "" {
		t.Errorf("delivered %v, want Detected for the answering receiver only", stored.State.Delivered)
	}
}
