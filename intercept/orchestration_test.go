package intercept_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kausality-io/kausality-proxy/intercept"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

const onceApproval = `[{"apiVersion":"apps/v1","kind":"ReplicaSet","name":"approved-1","generation":5,"mode":"once"}]`

// withApprovedFamily adds a settled Deployment "approved" whose once
// approval admits one drifting write of its ReplicaSet "approved-1".
func withApprovedFamily(s *serveSetup) {
	p := benchParent("approved", "approved-uid", 5, 5)
	ann := p.GetAnnotations()
	ann[annotations.Approvals] = onceApproval
	p.SetAnnotations(ann)
	s.objects = append(s.objects, p, benchChild("approved-1", "approved", "approved-uid", 1))
}

func enforce(s *serveSetup) { s.config.DefaultMode = annotations.ModeEnforce }

func ignoreFailures(s *serveSetup) { s.config.FailurePolicy = intercept.FailurePolicyIgnore }

// failing makes the proxy's own calls of verb on resource fail with err,
// the first times calls (0: always).
func failing(verb, resource string, times int, err error) serveOption {
	return func(s *serveSetup) {
		n := 0
		s.reactors = append(s.reactors, reactor{verb: verb, resource: resource, fn: func(clienttesting.Action) (bool, runtime.Object, error) {
			n++
			if times > 0 && n > times {
				return false, nil, nil
			}
			return true, nil, err
		}})
	}
}

// answering makes kube-apiserver answer the real write with code; dry runs
// are accepted.
func answering(code int) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Get("dryRun") != "" {
			echoDryRun(w, r)
			return
		}
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","code":` + strconv.Itoa(code) + `}`))
	}
}

func driftWrite(child, parent, uid string) benchWrite {
	c := benchChild(child, parent, uid, 3)
	data, _ := c.MarshalJSON()
	return benchWrite{name: "drift", method: http.MethodPut, path: "/apis/apps/v1/namespaces/apps/replicasets/" + child,
		contentType: "application/json", body: data, user: "system:serviceaccount:kube-system:deployment-controller"}
}

// The orchestration of one write, against a fake upstream: what happens to
// a once approval around the forwarded write, how a drift verdict from the
// cache is confirmed, and what the failure policy does when that
// confirmation cannot be read.
func TestOrchestration(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	unavailable := apierrors.NewServiceUnavailable("etcd is down")
	cases := []struct {
		name     string
		opts     []serveOption
		upstream http.HandlerFunc
		write    benchWrite
		wantCode int
		// wantForwarded counts what reached kube-apiserver as the caller:
		// the dry run confirming a drift verdict, the dry run before a once
		// approval is reserved, and the write.
		// wantApproval: the once approval is on the parent afterwards.
		wantApproval  bool
		wantForwarded int64
		// wantLiveParentReads counts the proxy's GETs of the parent.
		wantLiveParentReads int
		wantWarning         string
	}{
		{
			name: "approved: the once approval is taken, the write forwarded",
			opts: []serveOption{withApprovedFamily, enforce}, upstream: answering(http.StatusOK),
			write: driftWrite("approved-1", "approved", "approved-uid"), wantCode: http.StatusOK,
			wantForwarded: 3, wantLiveParentReads: 1,
		},
		{
			name: "a conflict from kube-apiserver left the object unwritten: the approval is put back",
			opts: []serveOption{withApprovedFamily, enforce}, upstream: answering(http.StatusConflict),
			write: driftWrite("approved-1", "approved", "approved-uid"), wantCode: http.StatusConflict,
			wantApproval: true, wantForwarded: 3, wantLiveParentReads: 2,
		},
		{
			name: "an admission refusal left the object unwritten: the approval is put back",
			opts: []serveOption{withApprovedFamily, enforce}, upstream: answering(http.StatusUnprocessableEntity),
			write: driftWrite("approved-1", "approved", "approved-uid"), wantCode: http.StatusUnprocessableEntity,
			wantApproval: true, wantForwarded: 3, wantLiveParentReads: 2,
		},
		{
			name: "an answer that does not say, and the object is stored as it was: the approval stays reserved while the write may still land",
			opts: []serveOption{withApprovedFamily, enforce, withClock(clocktesting.NewFakePassiveClock(time.Now()))}, upstream: answering(http.StatusInternalServerError),
			write: driftWrite("approved-1", "approved", "approved-uid"), wantCode: http.StatusInternalServerError,
			wantApproval: false, wantForwarded: 3, wantLiveParentReads: 1,
		},
		{
			name: "somebody changed the parent while the approval was reserved: decided again from a fresh read",
			opts: []serveOption{withApprovedFamily, enforce,
				failing("patch", "deployments", 1, apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "deployments"}, "approved", nil))},
			upstream: answering(http.StatusOK),
			write:    driftWrite("approved-1", "approved", "approved-uid"), wantCode: http.StatusOK,
			wantForwarded: 3, wantLiveParentReads: 2,
		},
		{
			name: "the proxy may not write the parent: no conflict to retry, the failure policy answers",
			opts: []serveOption{withApprovedFamily, enforce,
				failing("patch", "deployments", 0, apierrors.NewForbidden(schema.GroupResource{Group: "apps", Resource: "deployments"}, "approved", nil))},
			upstream: answering(http.StatusOK),
			write:    driftWrite("approved-1", "approved", "approved-uid"), wantCode: http.StatusInternalServerError,
			wantApproval: true, wantForwarded: 2, wantLiveParentReads: 1,
		},
		{
			name:  "drift seen in the cache is confirmed with one live read, then denied",
			opts:  []serveOption{enforce},
			write: driftWrite("stable-1", "stable", "stable-uid"), wantCode: http.StatusForbidden,
			wantForwarded: 1, wantLiveParentReads: 1,
		},
		{
			name:  "--failure-policy=Fail: the confirmation cannot be read, the write is refused as retryable",
			opts:  []serveOption{enforce, failing("get", "deployments", 0, unavailable)},
			write: driftWrite("stable-1", "stable", "stable-uid"), wantCode: http.StatusServiceUnavailable,
			wantForwarded: 1, wantLiveParentReads: 1,
		},
		{
			name:  "--failure-policy=Ignore: the confirmation cannot be read, the write goes through with a warning",
			opts:  []serveOption{enforce, ignoreFailures, failing("get", "deployments", 0, unavailable)},
			write: driftWrite("stable-1", "stable", "stable-uid"), wantCode: http.StatusOK,
			wantForwarded: 2, wantLiveParentReads: 1, wantWarning: "no drift decision was made (--failure-policy=Ignore)",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, tc.opts...)
			env.upstream = tc.upstream
			env.dyn.ClearActions()
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, tc.write))
			if rec.Code != tc.wantCode {
				t.Fatalf("code %d, want %d (error: %v)", rec.Code, tc.wantCode, env.lastError)
			}
			if got := env.forwarded.Load(); got != tc.wantForwarded {
				t.Errorf("forwarded %d requests, want %d", got, tc.wantForwarded)
			}
			if reads := env.liveReads("deployments"); reads != tc.wantLiveParentReads {
				t.Errorf("%d live reads of the parent, want %d", reads, tc.wantLiveParentReads)
			}
			if tc.wantWarning != "" && !strings.Contains(strings.Join(rec.Header().Values("Warning"), "\n"), tc.wantWarning) {
				t.Errorf("warnings %q lack %q", rec.Header().Values("Warning"), tc.wantWarning)
			}
			if tc.write.path != driftWrite("approved-1", "approved", "approved-uid").path {
				return
			}
			parent, err := env.dyn.Resource(deploymentsGVR).Namespace("apps").Get(context.Background(), "approved", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			has := parent.GetAnnotations()[annotations.Approvals] == onceApproval
			if has != tc.wantApproval {
				t.Errorf("approval on the parent afterwards: %v, want %v (annotations %v)", has, tc.wantApproval, parent.GetAnnotations())
			}
		})
	}
}

// A once approval whose write got an answer that does not say whether it
// was applied is settled by what kube-apiserver stores: spent when the
// object changed, put back when it did not, and when kube-apiserver cannot
// be read at once, in the background as soon as it can.
func TestReservedApprovalWithoutAClearAnswer(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	write := driftWrite("approved-1", "approved", "approved-uid")
	approvalOnParent := func(t *testing.T, env *benchEnv) bool {
		t.Helper()
		parent, err := env.dyn.Resource(deploymentsGVR).Namespace("apps").Get(context.Background(), "approved", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return parent.GetAnnotations()[annotations.Approvals] == onceApproval
	}
	// landing stores the write (a new resourceVersion) before the answer
	// is lost.
	landing := func(env *benchEnv, code int) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("dryRun") == "" {
				rs := env.dyn.Resource(replicasetsGVR).Namespace("apps")
				child, err := rs.Get(r.Context(), "approved-1", metav1.GetOptions{})
				if err == nil {
					child.SetResourceVersion("201")
					_, err = rs.Update(r.Context(), child, metav1.UpdateOptions{})
				}
				if err != nil {
					t.Errorf("storing the write: %v", err)
				}
			}
			answering(code)(w, r)
		}
	}

	t.Run("the object changed: the write may have landed, the approval stays spent", func(t *testing.T) {
		env := newServeEnv(t, nil, allowAll, withApprovedFamily, enforce)
		env.upstream = landing(env, http.StatusGatewayTimeout)
		rec := httptest.NewRecorder()
		env.handler.ServeHTTP(rec, env.request(t, write))
		if rec.Code != http.StatusGatewayTimeout {
			t.Fatalf("code %d, want 504 (error: %v)", rec.Code, env.lastError)
		}
		if approvalOnParent(t, env) {
			t.Errorf("the approval is back on the parent, though its write may have been applied")
		}
	})

	t.Run("the object is stored as it was: the approval goes back once the write can no longer land", func(t *testing.T) {
		clock := clocktesting.NewFakePassiveClock(time.Now())
		env := newServeEnv(t, nil, allowAll, withApprovedFamily, enforce, withClock(clock), func(s *serveSetup) { s.config.RequestTimeout = 30 * time.Second })
		var timeout atomic.Value
		env.upstream = func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("dryRun") == "" {
				timeout.Store(r.URL.Query().Get("timeout"))
			}
			// kube-apiserver's timeout filter: the write goes on.
			answering(http.StatusGatewayTimeout)(w, r)
		}
		rec := httptest.NewRecorder()
		env.handler.ServeHTTP(rec, env.request(t, write))
		if rec.Code != http.StatusGatewayTimeout {
			t.Fatalf("code %d, want 504 (error: %v)", rec.Code, env.lastError)
		}
		if got := timeout.Load(); got != "30s" {
			t.Errorf("the write was forwarded with timeout %q, want the proxy's own 30s: kube-apiserver must not process it longer", got)
		}
		// The object was read before the answer went out, and is stored
		// as it was: the write may still land.
		if approvalOnParent(t, env) {
			t.Fatal("the approval is back while the write may still land: it could admit the retry as well")
		}
		clock.SetTime(clock.Now().Add(30*time.Second + 10*time.Second))
		deadline := time.Now().Add(time.Minute)
		for !approvalOnParent(t, env) {
			if time.Now().After(deadline) {
				t.Fatalf("the approval was not put back once the write could no longer land, though it never was stored")
			}
			time.Sleep(50 * time.Millisecond)
		}
	})

	t.Run("kube-apiserver cannot be read at once: the approval is put back once it can", func(t *testing.T) {
		var down atomic.Int32
		failWhileDown := func(s *serveSetup) {
			s.reactors = append(s.reactors, reactor{verb: "get", resource: "replicasets", fn: func(clienttesting.Action) (bool, runtime.Object, error) {
				if down.Load() > 0 {
					down.Add(-1)
					return true, nil, apierrors.NewServiceUnavailable("kube-apiserver is restarting")
				}
				return false, nil, nil
			}})
		}
		clock := clocktesting.NewFakePassiveClock(time.Now())
		env := newServeEnv(t, nil, allowAll, withApprovedFamily, enforce, failWhileDown, withClock(clock))
		env.upstream = func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("dryRun") == "" {
				// The write is lost with kube-apiserver, which stays
				// unreadable for the next two reads.
				down.Store(2)
			}
			answering(http.StatusServiceUnavailable)(w, r)
		}
		rec := httptest.NewRecorder()
		env.handler.ServeHTTP(rec, env.request(t, write))
		if rec.Code != http.StatusServiceUnavailable {
			t.Fatalf("code %d, want 503 (error: %v)", rec.Code, env.lastError)
		}
		// The write's deadline passes before kube-apiserver can be read.
		clock.SetTime(clock.Now().Add(time.Hour))
		deadline := time.Now().Add(time.Minute)
		for !approvalOnParent(t, env) {
			if time.Now().After(deadline) {
				t.Fatalf("the approval was not put back in a minute, though the write was never stored")
			}
			time.Sleep(50 * time.Millisecond)
		}
		if n := down.Load(); n != 0 {
			t.Errorf("put back before kube-apiserver could be read (%d failing reads left)", n)
		}
	})
}

// Verdicts that rest on the proxy's computation are decided again on what
// kube-apiserver stores and would store.
func TestVerdictsAreConfirmedWithTheServer(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	revert := driftWrite("stable-1", "stable", "stable-uid") // the controller writes replicas 3

	t.Run("a stale cache hides a change: the controller's revert is held", func(t *testing.T) {
		// A person scaled the ReplicaSet to 5; the cache still says 3, as
		// the controller's revert does. The revert is an unconditional
		// update (no resourceVersion): kube-apiserver would apply it to
		// whatever is stored.
		revert := revert
		unconditional := benchChild("stable-1", "stable", "stable-uid", 3)
		unstructured.RemoveNestedField(unconditional.Object, "metadata", "resourceVersion")
		revert.body, _ = unconditional.MarshalJSON()
		cached := benchChild("stable-1", "stable", "stable-uid", 3)
		edited := benchChild("stable-1", "stable", "stable-uid", 5)
		edited.SetResourceVersion("200")
		env := newServeEnv(t, nil, allowAll, enforce, func(s *serveSetup) {
			s.objects[4] = cached
			s.reactors = append(s.reactors, reactor{verb: "get", resource: "replicasets", fn: func(clienttesting.Action) (bool, runtime.Object, error) {
				return true, edited.DeepCopy(), nil
			}})
		})
		env.upstream = echoDryRun
		rec := httptest.NewRecorder()
		env.handler.ServeHTTP(rec, env.request(t, revert))
		if rec.Code != http.StatusForbidden {
			t.Fatalf("code %d, want 403: the revert of a person's edit is drift (error %v)", rec.Code, env.lastError)
		}
		if got := env.forwarded.Load(); got != 1 {
			t.Errorf("forwarded %d, want only the confirming dry run", got)
		}
	})

	t.Run("a false change (the server stores what is stored): no drift, forwarded with a precondition", func(t *testing.T) {
		env := newServeEnv(t, nil, allowAll, enforce)
		stored, err := env.dyn.Resource(replicasetsGVR).Namespace("apps").Get(context.Background(), "stable-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var forwardedBody []byte
		env.upstream = func(w http.ResponseWriter, r *http.Request) {
			data, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Query().Get("dryRun") != "" {
				// Defaulting and canonicalization turn the write into
				// what is already stored.
				answer, _ := stored.MarshalJSON()
				_, _ = w.Write(answer)
				return
			}
			forwardedBody = data
			_, _ = w.Write([]byte(`{}`))
		}
		rec := httptest.NewRecorder()
		env.handler.ServeHTTP(rec, env.request(t, revert))
		if rec.Code != http.StatusOK {
			t.Fatalf("code %d, want 200 (error %v)", rec.Code, env.lastError)
		}
		if w := rec.Header().Values("Warning"); len(w) > 0 {
			t.Errorf("no drift, no warning; got %q", w)
		}
		if !strings.Contains(string(forwardedBody), `"resourceVersion":"`+stored.GetResourceVersion()+`"`) {
			t.Errorf("the forwarded write carries no precondition on resourceVersion %s: %s", stored.GetResourceVersion(), forwardedBody)
		}
		if !strings.Contains(string(forwardedBody), `"replicas":3`) {
			t.Errorf("the forwarded write is not the client's object: %s", forwardedBody)
		}
	})

	t.Run("a person's edit between the decision and the write: the write cannot land on it", func(t *testing.T) {
		env := newServeEnv(t, nil, allowAll, enforce)
		stored, err := env.dyn.Resource(replicasetsGVR).Namespace("apps").Get(context.Background(), "stable-1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		current := stored.GetResourceVersion()
		env.upstream = func(w http.ResponseWriter, r *http.Request) {
			data, _ := io.ReadAll(r.Body)
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Query().Get("dryRun") != "" {
				answer, _ := stored.MarshalJSON()
				_, _ = w.Write(answer)
				// A person's edit lands right after the decision's facts
				// were read.
				current = "edited"
				return
			}
			// kube-apiserver's optimistic concurrency.
			if !strings.Contains(string(data), `"resourceVersion":"`+current+`"`) {
				w.WriteHeader(http.StatusConflict)
				_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","code":409,"reason":"Conflict"}`))
				return
			}
			_, _ = w.Write([]byte(`{}`))
		}
		rec := httptest.NewRecorder()
		env.handler.ServeHTTP(rec, env.request(t, revert))
		if rec.Code != http.StatusConflict {
			t.Fatalf("code %d, want kube-apiserver's 409: the write must not land on a state it was not decided on", rec.Code)
		}
	})
}

// A denial names the fields a write would change; their stored values only
// to a caller who may read the object: a caller allowed to write but not to
// read learns nothing stored from a frozen parent's refusal.
func TestDenialsShowStoredValuesOnlyToReaders(t *testing.T) {
	frozen := func(s *serveSetup) {
		p := s.objects[2].(interface {
			GetAnnotations() map[string]string
			SetAnnotations(map[string]string)
		})
		ann := p.GetAnnotations()
		ann[annotations.Freeze] = "true"
		p.SetAnnotations(ann)
	}
	for _, tc := range []struct {
		name       string
		mayRead    bool
		wantValues bool
	}{
		{"a caller who may read the object sees old and new values", true, true},
		{"a caller who may only write sees the paths", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			allow := func(s authorizationv1.SubjectAccessReviewSpec) (bool, error) {
				return s.ResourceAttributes.Verb != "get" || tc.mayRead, nil
			}
			env := newServeEnv(t, nil, allow, frozen)
			write := driftWrite("stable-1", "stable", "stable-uid")
			write.user = "alice"
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, write))
			if rec.Code != http.StatusForbidden {
				t.Fatalf("code %d, want 403 (frozen)", rec.Code)
			}
			msg := env.lastError.Error()
			if !strings.Contains(msg, "spec.replicas") {
				t.Errorf("the denial does not name the field: %s", msg)
			}
			if got := strings.Contains(msg, "1 → 3"); got != tc.wantValues {
				t.Errorf("stored values shown: %v, want %v: %s", got, tc.wantValues, msg)
			}
		})
	}
}

// A verdict of "no desired change" that a stale cache cannot have got
// wrong costs nothing extra: a PUT bound by its resourceVersion, or a patch
// of metadata only.
func TestCertainVerdictsAreNotConfirmed(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	labels := benchWrite{name: "labels", method: http.MethodPatch, path: "/apis/apps/v1/namespaces/apps/replicasets/stable-1",
		contentType: "application/merge-patch+json", body: []byte(`{"metadata":{"labels":{"seen":"yes"}}}`),
		user: "system:serviceaccount:kube-system:deployment-controller"}
	bound := benchChild("stable-1", "stable", "stable-uid", 1) // what is stored, with its resourceVersion
	bound.SetLabels(map[string]string{"seen": "yes"})
	data, _ := bound.MarshalJSON()
	put := benchWrite{name: "put", method: http.MethodPut, path: "/apis/apps/v1/namespaces/apps/replicasets/stable-1",
		contentType: "application/json", body: data, user: "system:serviceaccount:kube-system:deployment-controller"}
	for _, w := range []benchWrite{labels, put} {
		t.Run(w.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, enforce)
			env.dyn.ClearActions()
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, w))
			if rec.Code != http.StatusOK {
				t.Fatalf("code %d (error %v)", rec.Code, env.lastError)
			}
			if n := env.forwarded.Load(); n != 1 {
				t.Errorf("forwarded %d, want the write alone", n)
			}
			for _, a := range env.dyn.Actions() {
				if a.GetVerb() == "get" {
					t.Errorf("a live read of %s for a verdict a stale cache cannot get wrong", a.GetResource().Resource)
				}
			}
		})
	}
}

// Who may read the child and its parent decides only what a drift
// verdict's message shows, so it is asked while kube-apiserver confirms
// the verdict, not after: the drift path waits on one round of reads. The
// dry run here is answered only once both reviews have arrived (or after
// a long deadline that only a sequential path reaches).
func TestDriftMessageAccessIsAskedWhileTheVerdictIsConfirmed(t *testing.T) {
	for _, mode := range []annotations.DriftMode{annotations.ModeEnforce, annotations.ModeLog} {
		t.Run(string(mode), func(t *testing.T) {
			var childAsked, parentAsked atomic.Bool
			asked := make(chan struct{}, 2)
			allow := func(spec authorizationv1.SubjectAccessReviewSpec) (bool, error) {
				if a := spec.ResourceAttributes; a != nil && a.Verb == "get" {
					switch {
					case a.Resource == "replicasets" && a.Name == "stable-1" && !childAsked.Swap(true):
						asked <- struct{}{}
					case a.Resource == "deployments" && a.Name == "stable" && !parentAsked.Swap(true):
						asked <- struct{}{}
					}
				}
				return true, nil
			}
			env := newServeEnv(t, nil, allow, func(s *serveSetup) { s.config.DefaultMode = mode })
			var together atomic.Bool
			env.upstream = func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Query().Get("dryRun") != "" {
					deadline := time.After(20 * time.Second)
					got := 0
					for got < 2 {
						select {
						case <-asked:
							got++
						case <-deadline:
							got = 3
						}
					}
					together.Store(got == 2)
				}
				echoDryRun(w, r)
			}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, driftWrite("stable-1", "stable", "stable-uid")))
			if want := map[annotations.DriftMode]int{annotations.ModeEnforce: http.StatusForbidden, annotations.ModeLog: http.StatusOK}[mode]; rec.Code != want {
				t.Fatalf("code %d, want %d (error: %v)", rec.Code, want, env.lastError)
			}
			if !childAsked.Load() || !parentAsked.Load() {
				t.Fatalf("asked about the child %v, the parent %v: the message needs both", childAsked.Load(), parentAsked.Load())
			}
			if !together.Load() {
				t.Error("the dry run was answered before the caller's access to the child and the parent was asked: the drift path waits on a round of its own")
			}
		})
	}
}
