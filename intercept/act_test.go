package intercept_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kausality-io/kausality-proxy/intercept"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/approval"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/reservations"
	"github.com/kausality-io/kausality-proxy/internal/testutil"
)

const recordNamespace = "kausality-system"

// recordsClient is a fake clientset for reservation records that names
// objects created with a generateName, as kube-apiserver does.
func recordsClient() *kubefake.Clientset {
	client := kubefake.NewClientset()
	n := 0
	client.PrependReactor("create", "configmaps", func(a clienttesting.Action) (bool, runtime.Object, error) {
		cm := a.(clienttesting.CreateAction).GetObject().(*corev1.ConfigMap)
		if cm.Name == "" {
			n++
			cm.Name = fmt.Sprintf("%s%05d", cm.GenerateName, n)
		}
		return false, nil, nil
	})
	return client
}

// withRecords gives the interceptor a store of reservation records in
// client, watching them.
// withClock gives the interceptor its clock.
func withClock(clk clock.PassiveClock) serveOption {
	return func(s *serveSetup) { s.config.Clock = clk }
}

func withRecords(t *testing.T, client *kubefake.Clientset, clock *clocktesting.FakePassiveClock) serveOption {
	return func(s *serveSetup) {
		store := reservations.New(client, recordNamespace, "this-replica", clock)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		store.Run(ctx)
		if !cache.WaitForCacheSync(ctx.Done(), store.HasSynced) {
			t.Fatal("the watch of the records did not sync")
		}
		s.config.Reservations = store
	}
}

func recordCount(t *testing.T, client *kubefake.Clientset) int {
	t.Helper()
	list, err := client.CoreV1().ConfigMaps(recordNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return len(list.Items)
}

// Each reserved once approval is recorded in the cluster until its write
// is settled, so that another replica settles the reservation of one that
// died mid-write from what kube-apiserver stores.
func TestReservationRecords(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	start := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	// seen waits until the watch of the records shows one as older than
	// a second.
	seen := func(t *testing.T, env *benchEnv) {
		t.Helper()
		store := env.interceptor.Reservations()
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if orphans, _ := store.Orphans(time.Second); len(orphans) > 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("the watch of the records never showed the record")
			}
		}
	}
	approvalOnParent := func(t *testing.T, env *benchEnv) bool {
		t.Helper()
		parent, err := env.dyn.Resource(deploymentsGVR).Namespace("apps").Get(context.Background(), "approved", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		entries, _, _ := annotations.ParseApprovalEntries(parent.GetAnnotations()[annotations.Approvals])
		return len(entries) == 1 && entries[0].Valid && entries[0].Approval.Name == "approved-1"
	}

	t.Run("an applied write leaves no record", func(t *testing.T) {
		client := recordsClient()
		env := newServeEnv(t, nil, allowAll, withApprovedFamily, enforce, withRecords(t, client, clocktesting.NewFakePassiveClock(start)))
		creates := 0
		client.PrependReactor("create", "configmaps", func(clienttesting.Action) (bool, runtime.Object, error) {
			creates++
			return false, nil, nil
		})
		rec := httptest.NewRecorder()
		env.handler.ServeHTTP(rec, env.request(t, driftWrite("approved-1", "approved", "approved-uid")))
		if rec.Code != http.StatusOK {
			t.Fatalf("code %d (error %v)", rec.Code, env.lastError)
		}
		if creates != 1 {
			t.Errorf("%d records created, want 1 before the approval was reserved", creates)
		}
		stamped := false
		for _, a := range env.dyn.Actions() {
			if p, ok := a.(clienttesting.PatchAction); ok && a.GetResource() == deploymentsGVR &&
				strings.Contains(string(p.GetPatch()), `"kausality.io/reservations":"kausality-reservation-`) {
				stamped = true
			}
		}
		if !stamped {
			t.Errorf("the reservation did not name its record on the parent")
		}
		for deadline := time.Now().Add(30 * time.Second); recordCount(t, client) != 0 || reservationStamps(t, env) != ""; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the settled reservation is still recorded (%d records, the parent names %q)", recordCount(t, client), reservationStamps(t, env))
			}
		}
	})

	// A replica died after it took the approval off the parent for a write
	// of approved-1, whose object was then stored at resourceVersion 200.
	// stamped: the parent names the record, as the proxy's reservation
	// does; a record it does not name was not written with it. forged:
	// somebody rewrote the record after the parent vouched for it, to an
	// approval of every write.
	orphan := func(t *testing.T, client *kubefake.Clientset, clock *clocktesting.FakePassiveClock, env *benchEnv, stamped, forged bool) {
		t.Helper()
		dead := reservations.New(client, recordNamespace, "dead-replica", clock)
		rec, err := dead.Open(context.Background(), reservations.Reservation{
			Parent:    decision.ObjectRef{APIVersion: "apps/v1", Kind: "Deployment", Namespace: "apps", Name: "approved"},
			Approval:  approval.Approval{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "approved-1", Generation: 5, Mode: approval.Once},
			Operation: decision.Update, Group: "apps", Version: "v1", Resource: "replicasets", Namespace: "apps", Name: "approved-1",
			Before: decision.StoredState{Exists: true, UID: "approved-1-uid", ResourceVersion: "200"},
		})
		if err != nil {
			t.Fatal(err)
		}
		stamp := "null"
		if stamped {
			stamp = `"` + annotations.AddReservation("", rec.ID(), rec.Digest()) + `"`
		}
		if forged {
			cm, err := client.CoreV1().ConfigMaps(recordNamespace).Get(context.Background(), rec.ID(), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cm.Data["reservation"] = strings.Replace(cm.Data["reservation"], `"mode":"once"`, `"mode":"always"`, 1)
			if !strings.Contains(cm.Data["reservation"], `"mode":"always"`) {
				t.Fatalf("the forgery did not take: %s", cm.Data["reservation"])
			}
			if _, err := client.CoreV1().ConfigMaps(recordNamespace).Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		_, err = env.dyn.Resource(deploymentsGVR).Namespace("apps").Patch(context.Background(), "approved", types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"kausality.io/approvals":null,"kausality.io/reservations":`+stamp+`}}}`), metav1.PatchOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}

	orphans := []struct {
		name string
		// stamped: the parent names the record; changed: the object was
		// written after the record was made; forged: the record was
		// rewritten after the parent vouched for it.
		stamped, changed, forged bool
		wantApproval             bool
	}{
		{"its write did not land: another replica puts the approval back, once it is an orphan", true, false, false, true},
		{"the object changed: the approval stays spent", true, true, false, false},
		// Whoever may create ConfigMaps in the proxy's namespace, but not
		// write the parent, cannot approve drift with a record.
		{"a record its parent does not name puts nothing back", false, false, false, false},
		{"a record rewritten after its parent vouched for it puts nothing back", true, false, true, false},
	}
	for _, tc := range orphans {
		t.Run(tc.name, func(t *testing.T) {
			client := recordsClient()
			clock := clocktesting.NewFakePassiveClock(start)
			env := newServeEnv(t, nil, allowAll, withApprovedFamily, enforce, withRecords(t, client, clock))
			orphan(t, client, clock, env, tc.stamped, tc.forged)
			if tc.changed {
				rs := env.dyn.Resource(replicasetsGVR).Namespace("apps")
				child, err := rs.Get(context.Background(), "approved-1", metav1.GetOptions{})
				if err != nil {
					t.Fatal(err)
				}
				child.SetResourceVersion("201")
				if _, err := rs.Update(context.Background(), child, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}

			// Not yet an orphan: its replica may still be settling it.
			clock.SetTime(start.Add(time.Minute))
			seen(t, env)
			for deadline := time.Now().Add(10 * time.Second); tc.forged; time.Sleep(10 * time.Millisecond) {
				if orphans, _ := env.interceptor.Reservations().Orphans(time.Second); len(orphans) == 1 && orphans[0].Approval.Mode == approval.Always {
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the watch of the records never showed the forgery")
				}
			}
			intercept.SettleOrphans(context.Background(), env.interceptor)
			if approvalOnParent(t, env) || recordCount(t, client) != 1 {
				t.Fatalf("a reservation one minute old was settled")
			}

			clock.SetTime(start.Add(intercept.DefaultReservationOrphanAge + time.Second))
			intercept.SettleOrphans(context.Background(), env.interceptor)
			if got := approvalOnParent(t, env); got != tc.wantApproval {
				t.Errorf("approval on the parent after the settlement: %v, want %v", got, tc.wantApproval)
			}
			if n := recordCount(t, client); n != 0 {
				t.Errorf("%d records left after the settlement", n)
			}
			if stamps := reservationStamps(t, env); stamps != "" {
				t.Errorf("the parent still names settled reservations: %q", stamps)
			}
		})
	}
}

func reservationStamps(t *testing.T, env *benchEnv) string {
	t.Helper()
	parent, err := env.dyn.Resource(deploymentsGVR).Namespace("apps").Get(context.Background(), "approved", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return parent.GetAnnotations()[annotations.Reservations]
}

// Somebody who may write ConfigMaps in the proxy's namespace rewrites the
// record of a reservation while its write is in flight, to an approval of
// every write, and the write is refused. The replica that reserved the
// approval reads the record again when its claim loses the precondition,
// removes the forgery and puts back the approval it took: never the
// forged one, and nothing is left for another replica to settle.
func TestReservationRecordRewrittenInFlight(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	client := recordsClient()
	testutil.ConfigMapResourceVersions(client)
	var store *reservations.Store
	env := newServeEnv(t, nil, allowAll, withApprovedFamily, enforce, func(s *serveSetup) {
		store = reservations.New(client, recordNamespace, "this-replica", nil)
		s.config.Reservations = store
	})
	configMaps := client.CoreV1().ConfigMaps(recordNamespace)
	env.upstream = func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("dryRun") != "" {
			echoDryRun(w, r)
			return
		}
		list, err := configMaps.List(r.Context(), metav1.ListOptions{})
		if err != nil || len(list.Items) != 1 {
			t.Errorf("records while the write is in flight: %v %v", list, err)
		} else {
			cm := list.Items[0]
			cm.Data["reservation"] = strings.ReplaceAll(cm.Data["reservation"], `"mode":"once"`, `"mode":"always"`)
			if _, err := configMaps.Update(r.Context(), &cm, metav1.UpdateOptions{}); err != nil {
				t.Errorf("rewriting the record: %v", err)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","code":403}`))
	}
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, driftWrite("approved-1", "approved", "approved-uid")))
	if rec.Code != http.StatusForbidden {
		t.Fatalf("code %d (error %v), want the upstream's 403", rec.Code, env.lastError)
	}
	parent, err := env.dyn.Resource(deploymentsGVR).Namespace("apps").Get(context.Background(), "approved", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	entries, _, _ := annotations.ParseApprovalEntries(parent.GetAnnotations()[annotations.Approvals])
	if len(entries) != 1 || !entries[0].Valid || entries[0].Approval.Name != "approved-1" || entries[0].Approval.Mode != approval.Once {
		t.Errorf("approvals after the refused write: %+v, want the once approval that was taken", entries)
	}
	if n := recordCount(t, client); n != 0 {
		t.Errorf("%d records left: a forged record waits for another replica to settle it", n)
	}
	if stamps := reservationStamps(t, env); stamps != "" {
		t.Errorf("the parent still names settled reservations: %q", stamps)
	}
}

// A parent's status write the proxy forwarded teaches the settledness
// memory at once, even when the memory has already seen the stored
// version the write replaced: the next write of the parent's controller is
// judged by the status kube-apiserver accepted, not by the one the cache
// still holds.
func TestStatusWriteSettlesTheParentBeforeTheCacheSeesIt(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	// The upstream stores nothing: the cache never sees the status write.
	env := newServeEnv(t, nil, allowAll, enforce)
	write := driftWrite("web-1", "web", "web-uid")

	// web is still rolling out (observedGeneration 5 at generation 6): its
	// controller's write is expected, and the memory has now seen the
	// stored web.
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, write))
	if rec.Code != http.StatusOK {
		t.Fatalf("the controller's write under a parent rolling out: code %d (error %v), want 200", rec.Code, env.lastError)
	}
	// The controller is told from managedFields and may write the
	// Deployment's status: Deployments are watched once the authorizer
	// has said so, beside the write.
	deployments := schema.GroupKind{Group: "apps", Kind: "Deployment"}
	testutil.Eventually(t, 10*time.Second, "Deployments are watched", func() error {
		if env.interceptor.KindChecksPending() || !env.interceptor.LearnsParentKind(deployments) {
			return errors.New("not yet")
		}
		return nil
	})

	// The deployment controller reports it has caught up.
	rec = httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch,
		path:        "/apis/apps/v1/namespaces/apps/deployments/web/status?fieldManager=" + benchKCM,
		contentType: "application/merge-patch+json", body: []byte(`{"status":{"observedGeneration":6}}`),
		user: "system:serviceaccount:kube-system:deployment-controller"}))
	if rec.Code != http.StatusOK {
		t.Fatalf("the status write: code %d (error %v), want 200", rec.Code, env.lastError)
	}

	// web has settled at its spec: the same write is drift now, though the
	// cache (and a live read) still show the status before the write.
	rec = httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, write))
	if rec.Code != http.StatusForbidden {
		t.Fatalf("the controller's write after its parent settled: code %d (error %v), want 403 (drift)", rec.Code, env.lastError)
	}
	if env.lastError == nil || !strings.Contains(env.lastError.Error(), "has settled at its current spec") {
		t.Errorf("the refusal %v is not for drift under a parent settled at its spec", env.lastError)
	}
}
