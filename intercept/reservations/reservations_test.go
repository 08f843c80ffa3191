package reservations

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kausality-io/kausality-proxy/intercept/approval"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/internal/testutil"
)

func reservation() Reservation {
	return Reservation{
		Parent:    decision.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "apps", Name: "web"},
		Approval:  approval.Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-1", Generation: 5, Mode: approval.Once},
		Operation: decision.Update, Group: "apps", Version: "v1", Resource: "replicasets", Namespace: "apps", Name: "web-1",
		Before: decision.StoredState{Exists: true, UID: "rs-uid", ResourceVersion: "200"},
	}
}

// newClient is a fake clientset that names objects created with a
// generateName, as kube-apiserver does.
func newClient() *fake.Clientset {
	client := fake.NewClientset()
	n := 0
	client.PrependReactor("create", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		cm := a.(clienttesting.CreateAction).GetObject().(*corev1.ConfigMap)
		if cm.Name == "" && cm.GenerateName != "" {
			n++
			cm.Name = fmt.Sprintf("%s%05d", cm.GenerateName, n)
		}
		return false, nil, nil
	})
	return client
}

func TestOpenClaim(t *testing.T) {
	ctx := context.Background()
	client := newClient()
	clock := clocktesting.NewFakePassiveClock(time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC))
	s := New(client, "kausality-system", "replica-a", clock)

	rec, err := s.Open(ctx, reservation())
	if err != nil {
		t.Fatal(err)
	}
	list, err := client.CoreV1().ConfigMaps("kausality-system").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=approval-reservation"})
	if err != nil || len(list.Items) != 1 {
		t.Fatalf("records after Open: %v %v", list, err)
	}
	if rec.Replica != "replica-a" || !rec.Reserved.Equal(clock.Now()) {
		t.Errorf("the record does not say who reserved when: %+v", rec.Reservation)
	}
	if got := rec.Update(); got.Target != rec.Parent || got.Consumed != rec.Approval {
		t.Errorf("Update() = %+v, does not put back the reserved approval", got)
	}

	claim, err := s.Claim(ctx, rec)
	if err != nil || claim != Claimed {
		t.Fatalf("first claim: %v %v", claim, err)
	}
	claim, err = s.Claim(ctx, rec)
	if err != nil || claim != Lost {
		t.Fatalf("second claim of the same record: %v %v, want Lost (settled already)", claim, err)
	}
}

// A claim that loses its precondition reads the record again from the
// cluster: the proxy never updates a record, so one whose content changed
// was forged, and is removed so that nobody settles it.
func TestClaimRereadsTheRecord(t *testing.T) {
	forged := reservation()
	forged.Approval.Mode = approval.Always
	forgedData, err := json.Marshal(forged)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name string
		// change is what happens to the record between its read and the
		// claim.
		change    func(t *testing.T, configMaps corev1client.ConfigMapInterface, cm *corev1.ConfigMap)
		want      Claim
		wantGone  bool
		wantError bool
	}{
		{"unchanged", func(*testing.T, corev1client.ConfigMapInterface, *corev1.ConfigMap) {}, Claimed, true, false},
		{"settled by somebody else", func(t *testing.T, configMaps corev1client.ConfigMapInterface, cm *corev1.ConfigMap) {
			if err := configMaps.Delete(context.Background(), cm.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, Lost, true, false},
		{"only labelled: same content", func(t *testing.T, configMaps corev1client.ConfigMapInterface, cm *corev1.ConfigMap) {
			cm.Labels["touched"] = "yes"
			update(t, configMaps, cm)
		}, Claimed, true, false},
		{"rewritten", func(t *testing.T, configMaps corev1client.ConfigMapInterface, cm *corev1.ConfigMap) {
			cm.Data[dataKey] = string(forgedData)
			update(t, configMaps, cm)
		}, Rewritten, true, false},
		{"deleted and forged again under its name", func(t *testing.T, configMaps corev1client.ConfigMapInterface, cm *corev1.ConfigMap) {
			if err := configMaps.Delete(context.Background(), cm.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			cm.ResourceVersion = ""
			cm.Data[dataKey] = string(forgedData)
			if _, err := configMaps.Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, Rewritten, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			client := newClient()
			testutil.ConfigMapResourceVersions(client)
			s := New(client, "kausality-system", "replica-a", clocktesting.NewFakePassiveClock(time.Now()))
			rec, err := s.Open(ctx, reservation())
			if err != nil {
				t.Fatal(err)
			}
			configMaps := client.CoreV1().ConfigMaps("kausality-system")
			cm, err := configMaps.Get(ctx, rec.ID(), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			tc.change(t, configMaps, cm)
			claim, err := s.Claim(ctx, rec)
			if claim != tc.want || (err != nil) != tc.wantError {
				t.Errorf("claim: %v %v, want %v", claim, err, tc.want)
			}
			if _, err := configMaps.Get(ctx, rec.ID(), metav1.GetOptions{}); tc.wantGone && !apierrors.IsNotFound(err) {
				t.Errorf("the record is still there after the claim: %v", err)
			}
		})
	}
}

func update(t *testing.T, configMaps corev1client.ConfigMapInterface, cm *corev1.ConfigMap) {
	t.Helper()
	if _, err := configMaps.Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func TestOrphans(t *testing.T) {
	ctx := context.Background()
	client := newClient()
	start := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	clock := clocktesting.NewFakePassiveClock(start)
	s := New(client, "kausality-system", "replica-a", clock)
	if orphans, broken := s.Orphans(0); orphans != nil || broken != nil {
		t.Fatalf("orphans before the watch listed the records: %v %v", orphans, broken)
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.Run(runCtx)
	if !cache.WaitForCacheSync(runCtx.Done(), s.HasSynced) {
		t.Fatal("the watch of the records did not sync")
	}

	old, err := s.Open(ctx, reservation())
	if err != nil {
		t.Fatal(err)
	}
	clock.SetTime(start.Add(5 * time.Minute))
	if _, err := s.Open(ctx, reservation()); err != nil {
		t.Fatal(err)
	}
	brokenCM := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kausality-reservation-broken",
		Labels:            map[string]string{managedByLabel: managedBy, componentLabel: component},
		CreationTimestamp: metav1.NewTime(start)}, Data: map[string]string{dataKey: "{not json"}}
	if _, err := client.CoreV1().ConfigMaps("kausality-system").Create(ctx, brokenCM, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Someone else's ConfigMap is never touched.
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "unrelated", CreationTimestamp: metav1.NewTime(start)}}
	if _, err := client.CoreV1().ConfigMaps("kausality-system").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	clock.SetTime(start.Add(7 * time.Minute))
	var orphans, broken []*Record
	for deadline := time.Now().Add(10 * time.Second); len(orphans)+len(broken) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the watch never showed the old and the broken record: %v %v", orphans, broken)
		}
		orphans, broken = s.Orphans(6 * time.Minute)
	}
	if len(orphans) != 1 || orphans[0].ID() != old.ID() || orphans[0].Before != old.Before {
		t.Errorf("orphans older than 6m: %+v, want only the first record", orphans)
	}
	if len(broken) != 1 || broken[0].ID() != "kausality-reservation-broken" {
		t.Errorf("broken records: %+v", broken)
	}
	if orphans[0].Digest() != old.Digest() {
		t.Errorf("the orphan's digest %q is not the one of the record as written, %q", orphans[0].Digest(), old.Digest())
	}
	if claim, err := s.Claim(ctx, orphans[0]); err != nil || claim != Claimed {
		t.Errorf("claiming the orphan: %v %v", claim, err)
	}
}
