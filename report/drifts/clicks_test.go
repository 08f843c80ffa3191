package drifts

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/report/escalation"
)

func clickRecord(t *testing.T, mutate func(*Record)) *corev1.ConfigMap {
	t.Helper()
	r := &Record{Name: RecordName("0123456789abcdef"), Report: v1alpha1.DriftReport{Spec: v1alpha1.DriftReportSpec{
		ID: "0123456789abcdef", Phase: v1alpha1.PhaseDetected,
		Parent: v1alpha1.ParentRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "shop", Name: "web", UID: "u1", Generation: 4},
		Child:  v1alpha1.ChildRef{APIVersion: "apps/v1", Kind: "ReplicaSet", Namespace: "shop", Name: "web-1"},
	}}, State: State{ParentSpecHash: "abc", Slack: &escalation.MessageRef{Channel: "C0DRIFT", Timestamp: "1.2"}}}
	if mutate != nil {
		mutate(r)
	}
	cm, err := encode(r, DefaultNamespace)
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

func TestClicksClaim(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	claim := escalation.ClickClaim{Key: "k1", Now: now, Expires: now.Add(5 * time.Minute)}
	accept := func(escalation.OpenDrift) error { return nil }
	tests := []struct {
		name    string
		objects []runtime.Object
		id      string
		claim   escalation.ClickClaim
		check   func(escalation.OpenDrift) error
		want    error
		wrote   bool
	}{
		{name: "an open drift", objects: []runtime.Object{clickRecord(t, nil)}, wrote: true},
		{name: "no record", want: escalation.ErrNoOpenDrift},
		{name: "a resolved record", objects: []runtime.Object{clickRecord(t, func(r *Record) {
			r.State.Resolved = &Resolution{Reason: v1alpha1.ReasonApproved}
		})}, want: escalation.ErrNoOpenDrift},
		{name: "a ConfigMap without the record labels", objects: []runtime.Object{func() runtime.Object {
			cm := clickRecord(t, nil)
			cm.Labels = nil
			return cm
		}()}, want: escalation.ErrNoOpenDrift},
		{name: "a record holding another drift", objects: []runtime.Object{func() runtime.Object {
			cm := clickRecord(t, nil)
			cm.Name = RecordName("fedcba9876543210")
			return cm
		}()}, id: "fedcba9876543210", want: escalation.ErrNoOpenDrift},
		{name: "the same click again", objects: []runtime.Object{clickRecord(t, func(r *Record) {
			r.State.SlackClicks = map[string]metav1.Time{"k1": metav1.NewTime(now.Add(time.Minute))}
		})}, want: escalation.ErrClickReplayed},
		{name: "an expired click is forgotten", objects: []runtime.Object{clickRecord(t, func(r *Record) {
			r.State.SlackClicks = map[string]metav1.Time{"old": metav1.NewTime(now.Add(-time.Second))}
		})}, claim: escalation.ClickClaim{Key: "old", Now: now, Expires: now.Add(5 * time.Minute)}, wrote: true},
		{name: "a refusal of check records nothing", objects: []runtime.Object{clickRecord(t, nil)},
			check: func(escalation.OpenDrift) error { return errNotHere }, want: errNotHere},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			client := fake.NewClientset(tt.objects...)
			id, c, check := tt.id, tt.claim, tt.check
			if id == "" {
				id = "0123456789abcdef"
			}
			if c.Key == "" {
				c = claim
			}
			if check == nil {
				check = accept
			}
			d, err := NewClicks(client, "").Claim(context.Background(), id, c, check)
			if !errors.Is(err, tt.want) || (tt.want == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, tt.want)
			}
			updates := 0
			for _, a := range client.Actions() {
				if a.GetVerb() == "update" {
					updates++
				}
			}
			if (updates == 1) != tt.wrote {
				t.Errorf("%d updates, want a write: %v", updates, tt.wrote)
			}
			if !tt.wrote {
				return
			}
			if d.Parent.Name != "web" || d.Child.Name != "web-1" || d.Generation != 4 || d.ParentSpecHash != "abc" ||
				d.Message == nil || d.Message.Channel != "C0DRIFT" {
				t.Errorf("open drift %+v", d)
			}
			cm, err := client.CoreV1().ConfigMaps(DefaultNamespace).Get(context.Background(), RecordName(id), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rec, err := decode(cm)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := rec.State.SlackClicks[c.Key]; !ok || len(rec.State.SlackClicks) != 1 {
				t.Errorf("clicks recorded %v", rec.State.SlackClicks)
			}
			if rec.State.ParentSpecHash != "abc" || rec.State.Slack == nil {
				t.Errorf("the claim lost the state: %+v", rec.State)
			}
		})
	}
}

var errNotHere = errors.New("not here")

// TestClicksClaimRetriesOnConflict: a record another replica changed in
// between is read again, and the click recorded on the fresh version.
func TestClicksClaimRetriesOnConflict(t *testing.T) {
	client := fake.NewClientset(clickRecord(t, nil))
	conflicts := 1
	client.PrependReactor("update", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(corev1.Resource("configmaps"), "x", errors.New("changed"))
		}
		return false, nil, nil
	})
	now := time.Now()
	_, err := NewClicks(client, DefaultNamespace).Claim(context.Background(), "0123456789abcdef",
		escalation.ClickClaim{Key: "k", Now: now, Expires: now.Add(time.Minute)}, func(escalation.OpenDrift) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	if conflicts != 0 {
		t.Error("no conflict was met")
	}
}

func TestRecordClickIsBounded(t *testing.T) {
	now := time.Now()
	st := &State{}
	for i := range maxClaimedClicks {
		if err := recordClick(st, escalation.ClickClaim{Key: string(rune('a' + i)), Now: now, Expires: now.Add(time.Minute)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := recordClick(st, escalation.ClickClaim{Key: "one more", Now: now, Expires: now.Add(time.Minute)}); !errors.Is(err, escalation.ErrTooManyClicks) {
		t.Errorf("a full record took one more click: %v", err)
	}
	later := now.Add(2 * time.Minute)
	if err := recordClick(st, escalation.ClickClaim{Key: "one more", Now: later, Expires: later.Add(time.Minute)}); err != nil {
		t.Errorf("after the window: %v", err)
	}
}

// suppressingEscalator is Slack past its message limits.
type suppressingEscalator struct{ posts int }

func (s *suppressingEscalator) Post(context.Context, v1alpha1.DriftReport) (escalation.MessageRef, error) {
	s.posts++
	return escalation.MessageRef{}, escalation.ErrSuppressed
}

func (*suppressingEscalator) Resolve(context.Context, escalation.MessageRef, v1alpha1.DriftReport) error {
	return errors.New("nothing was posted")
}

// TestSuppressedMessageIsNotRetried: a drift whose message the rate limit
// suppressed is marked so, counted in the summary, and not posted on each
// later pass (which would post it after all, or count it again).
func TestSuppressedMessageIsNotRetried(t *testing.T) {
	esc := &suppressingEscalator{}
	l := &Ledger{o: Options{Escalator: esc}, m: newMetrics(), log: zap.NewNop()}
	rec := &Record{Name: RecordName("0123456789abcdef")}
	if !l.escalate(context.Background(), rec) || !rec.State.SlackSuppressed {
		t.Fatalf("the suppression is not recorded: %+v", rec.State)
	}
	if l.escalate(context.Background(), rec) || esc.posts != 1 {
		t.Errorf("posted %d times", esc.posts)
	}
	rec.State.Resolved = &Resolution{Reason: v1alpha1.ReasonApproved}
	if l.escalate(context.Background(), rec) || !l.everythingOut(rec) {
		t.Error("a resolved drift whose message was suppressed waits for a message update")
	}
}
