package intercept_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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
			env.upstream = func(w http.ResponseWriter, r *http.Request) {
				data, _ := io.ReadAll(r.Body)
				mu.Lock()
				sent = append(sent, forwardedRequest{query: r.URL.Query(), body: string(data)})
				n := len(sent)
				mu.Unlock()
				w.Header().Set("Content-Type", "application/json")
				if n <= tc.conflicts {
					w.WriteHeader(http.StatusConflict)
					_, _ = w.Write([]byte(uidConflict))
					return
				}
				_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","code":200}`))
			}
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
