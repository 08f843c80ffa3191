package upstream

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
)

// Only a 409 for the resourceVersion precondition is the proxy's own to
// answer by deciding again; any other 409 answers the caller's write and
// reaches the client whole, headers included.
func TestConflictCatcherHoldsOnlyAPreconditionFailure(t *testing.T) {
	const lock = "the object has been modified; please apply your changes to the latest version and try again"
	cases := []struct {
		name string
		hold bool
		// uid: the delete's uid precondition the proxy added.
		uid      string
		code     int
		body     string
		wantHeld bool
	}{
		{name: "the precondition failed, JSON", hold: true, code: http.StatusConflict,
			body: `{"kind":"Status","message":"Operation cannot be fulfilled on replicasets.apps \"a\": ` + lock + `","reason":"Conflict","code":409}`, wantHeld: true},
		{name: "the precondition failed, protobuf", hold: true, code: http.StatusConflict,
			body: "k8s\x00\n\x0c\n\x02v1\x12\x06Status\x12\x9a\x01\n\x00\x12\x07Failure\x1a\x83\x01Operation cannot be fulfilled: " + lock, wantHeld: true},
		{name: "a uid precondition", hold: true, code: http.StatusConflict,
			body: `{"kind":"Status","message":"Precondition failed: UID in precondition: x, UID in object meta: y","reason":"Conflict","code":409}`},
		{name: "an admission webhook's 409", hold: true, code: http.StatusConflict,
			body: `{"kind":"Status","message":"admission webhook \"q.example.com\" denied the request","reason":"Conflict","code":409}`},
		{name: "a field manager conflict of server-side apply", hold: true, code: http.StatusConflict,
			body: `{"kind":"Status","message":"Apply failed with 1 conflict: conflict with \"other\": .spec.replicas","reason":"Conflict","code":409}`},
		{name: "larger than any precondition failure", hold: true, code: http.StatusConflict,
			body: `{"message":"` + lock + strings.Repeat("x", maxHeldConflict) + `"}`},
		{name: "not held when not asked", code: http.StatusConflict, body: `{"message":"` + lock + `"}`},
		{name: "a success", hold: true, code: http.StatusOK, body: `{}`},
		{name: "the uid precondition the proxy added failed in storage", uid: "u-1", code: http.StatusConflict,
			body: `{"kind":"Status","message":"Operation cannot be fulfilled on pods \"a\": Precondition failed: UID in precondition: u-1, UID in object meta: u-2","reason":"Conflict","code":409}`, wantHeld: true},
		{name: "the uid precondition the proxy added failed in graceful deletion", uid: "u-1", code: http.StatusConflict,
			body: `{"kind":"Status","message":"Operation cannot be fulfilled on Pod \"a\": the UID in the precondition (u-1) does not match the UID in record (u-2). The object might have been deleted and then recreated","reason":"Conflict","code":409}`, wantHeld: true},
		{name: "another uid's precondition", uid: "u-1", code: http.StatusConflict,
			body: `{"kind":"Status","message":"Precondition failed: UID in precondition: u-10, UID in object meta: u-2","reason":"Conflict","code":409}`},
		{name: "a resourceVersion precondition is not the uid's", uid: "u-1", code: http.StatusConflict,
			body: `{"kind":"Status","message":"Operation cannot be fulfilled on replicasets.apps \"a\": ` + lock + `","reason":"Conflict","code":409}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			c := NewConflictCatcher(rec, tc.hold)
			if tc.uid != "" {
				c = NewUIDConflictCatcher(rec, types.UID(tc.uid))
			}
			c.Header().Add("Warning", `299 - "kausality: a warning"`)
			c.Header().Set("Content-Type", "application/json")
			c.WriteHeader(tc.code)
			// In pieces, as a reverse proxy copies a body.
			for body := tc.body; body != ""; {
				n := min(len(body), 4096)
				if _, err := c.Write([]byte(body[:n])); err != nil {
					t.Fatal(err)
				}
				body = body[n:]
			}
			if held := c.Done(); held != tc.wantHeld {
				t.Fatalf("held %v, want %v", held, tc.wantHeld)
			}
			if tc.wantHeld {
				if rec.Body.Len() != 0 || len(rec.Header()) != 0 {
					t.Errorf("a held answer reached the client: %d %v %q", rec.Code, rec.Header(), rec.Body)
				}
				return
			}
			if rec.Code != tc.code || rec.Body.String() != tc.body || rec.Header().Get("Warning") == "" {
				t.Errorf("the client got %d %v %.80q, want %d and the body and headers whole", rec.Code, rec.Header(), rec.Body, tc.code)
			}
		})
	}
}
