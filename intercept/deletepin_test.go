package intercept_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	cbor "k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/intercept/body"
)

// kube-apiserver deletes by name. A DELETE decided on one object must not
// remove another created under its name since, undecided: the object's
// uid goes with the DELETE as its precondition, with the options the
// caller sent (from the body, or else the query). A failed pin is the
// proxy's own conflict: the DELETE is decided again on the object read
// live, and the caller hears only the answer to that.
func TestADeleteLandsOnlyOnTheObjectItWasDecidedOn(t *testing.T) {
	const uidConflict = `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Operation cannot be fulfilled on replicasets.apps \"stable-1\": Precondition failed: UID in precondition: stable-1-uid, UID in object meta: stable-1-new","reason":"Conflict","code":409}`
	grace := int64(30)
	uid := func(u string) *types.UID { id := types.UID(u); return &id }
	cases := []struct {
		name, query, body string
		// conflicts: how many forwards kube-apiserver answers 409 first.
		conflicts int
		wantCode  int
		// want: the options forwarded each time (nil: the body as sent).
		want []*metav1.DeleteOptions
	}{
		{name: "no options", wantCode: http.StatusOK,
			want: []*metav1.DeleteOptions{{Preconditions: &metav1.Preconditions{UID: uid("stable-1-uid")}}}},
		{name: "options in the query move into the body", query: "?gracePeriodSeconds=30", wantCode: http.StatusOK,
			want: []*metav1.DeleteOptions{{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: uid("stable-1-uid")}}}},
		{name: "options in the body are kept", body: `{"kind":"DeleteOptions","apiVersion":"v1","gracePeriodSeconds":30}`, wantCode: http.StatusOK,
			want: []*metav1.DeleteOptions{{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: uid("stable-1-uid")}}}},
		{name: "the caller's own uid precondition stands", body: `{"preconditions":{"uid":"stable-1-uid"}}`, wantCode: http.StatusOK,
			want: []*metav1.DeleteOptions{nil}},
		{name: "the caller's own resourceVersion precondition pins it already", body: `{"preconditions":{"resourceVersion":"200"}}`, wantCode: http.StatusOK,
			want: []*metav1.DeleteOptions{nil}},
		// kube-apiserver refuses ignoreStoreReadErrorWithClusterBreakingPotential
		// together with preconditions (ValidateIgnoreStoreReadError): a pin
		// turns the caller's unsafe delete of a corrupt object into a 422.
		{name: "an unsafe delete of a corrupt object carries no preconditions", body: `{"kind":"DeleteOptions","apiVersion":"v1","ignoreStoreReadErrorWithClusterBreakingPotential":true}`,
			wantCode: http.StatusOK, want: []*metav1.DeleteOptions{nil}},
		{name: "an unsafe delete asked for in the query carries no preconditions", query: "?ignoreStoreReadErrorWithClusterBreakingPotential=true",
			wantCode: http.StatusOK, want: []*metav1.DeleteOptions{nil}},
		{name: "the pin failed: decided again, the caller hears only that answer", conflicts: 1, wantCode: http.StatusOK,
			want: []*metav1.DeleteOptions{
				{Preconditions: &metav1.Preconditions{UID: uid("stable-1-uid")}},
				{Preconditions: &metav1.Preconditions{UID: uid("stable-1-uid")}},
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []forwardedRequest
			)
			env := newServeEnv(t, nil, allowEveryone, enforce, replacing(terminatingChild, "replicasets", terminatingChild))
			env.upstream = conflictsFirst(tc.conflicts, uidConflict, &sent, &mu)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, deleteBody(benchWrite{method: http.MethodDelete, path: rsPath + "/stable-1" + tc.query, user: kcmUser}, tc.body)))
			if rec.Code != tc.wantCode {
				t.Fatalf("code %d, want %d: %s (%v)", rec.Code, tc.wantCode, rec.Body, env.lastError)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(sent) != len(tc.want) {
				t.Fatalf("%d DELETEs forwarded, want %d: %v", len(sent), len(tc.want), sent)
			}
			for k, want := range tc.want {
				if want == nil {
					if sent[k].body != tc.body {
						t.Errorf("DELETE %d forwarded with %q, want the caller's body %q", k, sent[k].body, tc.body)
					}
					continue
				}
				var got metav1.DeleteOptions
				if err := json.Unmarshal([]byte(sent[k].body), &got); err != nil {
					t.Fatalf("DELETE %d forwarded with %q: %v", k, sent[k].body, err)
				}
				want.TypeMeta = metav1.TypeMeta{Kind: "DeleteOptions", APIVersion: "meta.k8s.io/v1"}
				if gotJSON, wantJSON := mustJSON(t, got), mustJSON(t, want); gotJSON != wantJSON {
					t.Errorf("DELETE %d forwarded with options %s, want %s", k, gotJSON, wantJSON)
				}
			}
		})
	}
}

// A DELETE of an object the proxy has no copy of is forwarded as sent:
// there is no object its decision rests on.
func TestADeleteOfAnObjectNotFoundIsForwardedAsSent(t *testing.T) {
	var (
		mu   sync.Mutex
		sent []forwardedRequest
	)
	env := newServeEnv(t, nil, allowEveryone, enforce)
	env.upstream = recording(http.StatusNotFound, &sent, &mu)
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodDelete, path: rsPath + "/no-such-rs", user: kcmUser}))
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 1 || sent[0].body != "" {
		t.Fatalf("forwarded %v, want the DELETE as sent", sent)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A DELETE that consumes a once approval is dry-run before the approval is
// reserved, pinned as the DELETE itself is. A failed pin in that dry run
// is the proxy's own conflict as much as in the DELETE: the caller, who
// named no uid, must not hear of it; the DELETE is decided again on the
// object read live.
func TestAPinThatFailsInThePreflightIsTheProxysOwn(t *testing.T) {
	const uidConflict = `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"Operation cannot be fulfilled on replicasets.apps \"approved-1\": Precondition failed: UID in precondition: approved-1-uid, UID in object meta: approved-1-new","reason":"Conflict","code":409}`
	cases := []struct {
		name string
		// conflicts: how many requests kube-apiserver answers 409 first.
		conflicts int
		wantCode  int
	}{
		{name: "control: the pin holds", wantCode: http.StatusOK},
		{name: "the pin fails in the dry run", conflicts: 1, wantCode: http.StatusOK},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []forwardedRequest
			)
			env := newServeEnv(t, nil, allowEveryone, enforce, withApprovedFamily)
			env.upstream = conflictsFirst(tc.conflicts, uidConflict, &sent, &mu)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodDelete, path: rsPath + "/approved-1", user: kcmUser}))
			if rec.Code != tc.wantCode {
				t.Fatalf("code %d, want %d: %s (%v)", rec.Code, tc.wantCode, rec.Body, env.lastError)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(sent) < 2 {
				t.Fatalf("%d requests forwarded, want a dry run and the DELETE: %v", len(sent), sent)
			}
			var first metav1.DeleteOptions
			if err := json.Unmarshal([]byte(sent[0].body), &first); err != nil || len(first.DryRun) == 0 || first.Preconditions == nil {
				t.Fatalf("the first request %q is no pinned dry run (%v)", sent[0].body, err)
			}
		})
	}
}

// kube-apiserver decodes a DELETE's options with its own codecs, which
// read CBOR only with CBORServingAndStorage (alpha, off by default): a
// CBOR body is refused there with 415. The pinned DELETE keeps the
// caller's format, so that kube-apiserver still answers the body as sent;
// in JSON it would delete what it would have refused.
func TestAPinnedDeleteKeepsTheFormatOfItsOptions(t *testing.T) {
	data, err := cbor.Marshal(map[string]any{"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": int64(5)})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu          sync.Mutex
		contentType string
	)
	env := newServeEnv(t, nil, allowEveryone, enforce, replacing(terminatingChild, "replicasets", terminatingChild))
	env.upstream = func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		contentType = r.Header.Get("Content-Type")
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","code":200}`))
	}
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodDelete, path: rsPath + "/stable-1", user: kcmUser,
		contentType: "application/cbor", body: data}))
	if rec.Code != http.StatusOK {
		t.Fatalf("code %d, want 200: %s (%v)", rec.Code, rec.Body, env.lastError)
	}
	mu.Lock()
	defer mu.Unlock()
	if contentType != "application/cbor" {
		t.Errorf("forwarded as %q, want the caller's application/cbor", contentType)
	}
}

// The same holds for the resourceVersion the proxy pins an update to when
// it puts back the system annotations the update changes: its failure in
// the dry run is the proxy's own, and the write is decided again.
func TestAVersionPinThatFailsInThePreflightIsTheProxysOwn(t *testing.T) {
	for _, conflicts := range []int{0, 1} {
		t.Run(fmt.Sprintf("%d conflicts", conflicts), func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []map[string]any
			)
			env := newServeEnv(t, nil, allowEveryone, enforce, withApprovedFamily)
			env.upstream = func(w http.ResponseWriter, r *http.Request) {
				data, _ := io.ReadAll(r.Body)
				var patch map[string]any
				_ = json.Unmarshal(data, &patch)
				mu.Lock()
				sent = append(sent, patch)
				n := len(sent)
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				// The drift is confirmed with a dry run of the caller's
				// write first; the preflight of the pinned write is next.
				if n == 2 && conflicts > 0 {
					w.WriteHeader(http.StatusConflict)
					_, _ = w.Write([]byte(preconditionConflict))
					return
				}
				_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","code":200}`))
			}
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch, path: rsPath + "/approved-1?fieldManager=" + benchKCM,
				contentType: "application/merge-patch+json", body: []byte(`{"metadata":{"annotations":{"kausality.io/updaters":"zzzzz"}},"spec":{"replicas":9}}`), user: kcmUser}))
			if rec.Code != http.StatusOK {
				t.Fatalf("code %d, want 200: %s (%v)", rec.Code, rec.Body, env.lastError)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(sent) < 3+conflicts {
				t.Fatalf("%d requests forwarded, want the confirmation, the preflight and the write (and the preflight again after a conflict): %v", len(sent), sent)
			}
			meta, _ := sent[1]["metadata"].(map[string]any)
			if meta["resourceVersion"] != "200" {
				t.Fatalf("the preflight %v is not pinned to the stored version", sent[1])
			}
		})
	}
}

// An eviction is forwarded as sent, never pinned to the pod's uid as a
// DELETE is: kube-apiserver runs the disruption budget's checks on the pod
// it finds under the name before the precondition, so a failed pin would
// use a disruption the budget allows for a pod not evicted, or come back
// as a 429 the proxy cannot tell from the budget's own.
func TestAnEvictionIsForwardedAsSent(t *testing.T) {
	const own = `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"free-pod","namespace":"apps"},"deleteOptions":{"preconditions":{"uid":"free-pod-uid"}}}`
	plain := &policyv1.Eviction{TypeMeta: metav1.TypeMeta{APIVersion: "policy/v1", Kind: "Eviction"},
		ObjectMeta: metav1.ObjectMeta{Name: "free-pod", Namespace: "apps"}, DeleteOptions: &metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](5)}}
	jsonBody, err := json.Marshal(plain)
	if err != nil {
		t.Fatal(err)
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(plain)
	if err != nil {
		t.Fatal(err)
	}
	protoBody, protoType, err := body.Encode(&unstructured.Unstructured{Object: u}, body.Protobuf)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, contentType string
		body              []byte
	}{
		{name: "JSON", contentType: "application/json", body: jsonBody},
		{name: "protobuf", contentType: protoType, body: protoBody},
		{name: "with the caller's own precondition", contentType: "application/json", body: []byte(own)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var (
				mu   sync.Mutex
				sent []forwardedRequest
			)
			env := newServeEnv(t, nil, allowEveryone, enforce, withPods)
			env.upstream = recording(http.StatusCreated, &sent, &mu)
			r := env.request(t, benchWrite{method: http.MethodPost, path: "/api/v1/namespaces/apps/pods/free-pod/eviction",
				contentType: tc.contentType, body: tc.body, user: "bob"})
			r.Header.Set("User-Agent", kubectlUA)
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, r)
			if rec.Code != http.StatusCreated {
				t.Fatalf("code %d, want 201: %s (%v)", rec.Code, rec.Body, env.lastError)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(sent) != 1 || sent[0].body != string(tc.body) {
				t.Errorf("forwarded %q, want the Eviction as sent", sent)
			}
		})
	}
}

// conflictsFirst is kube-apiserver answering the first conflicts requests
// with the 409 conflict, and the rest 200; every request is recorded.
func conflictsFirst(conflicts int, conflict string, into *[]forwardedRequest, mu *sync.Mutex) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		mu.Lock()
		*into = append(*into, forwardedRequest{query: r.URL.Query(), body: string(data)})
		n := len(*into)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if n <= conflicts {
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(conflict))
			return
		}
		_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","code":200}`))
	}
}
