package intercept_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// kube-apiserver decodes a built-in kind's object into its Go type, where
// a member sent twice is decoded into what the first left: the two are
// merged. The proxy decodes bodies into maps, where the last replaces the
// first. So a settled parent's controller could send its change in a
// first spec and the stored spec in a second: the proxy would see no
// change, and kube-apiserver would store it. An object carried as a value
// of a merge patch or a JSON patch is copied into the patched object as
// sent, with the same effect. Every such body is refused with 400, and
// nothing is sent upstream.
func TestABodyWithAMemberTwiceIsRefusedBeforeAnythingIsSent(t *testing.T) {
	allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
	stored := benchChild("stable-1", "stable", "stable-uid", 3)
	storedJSON, err := stored.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	storedSpec := string(storedJSON[strings.Index(string(storedJSON), `"spec":`):strings.LastIndex(string(storedJSON), "}")])
	// The stored object with a first spec holding the change, before the
	// stored spec.
	withFirstSpec := func(first string) []byte {
		return []byte(strings.Replace(string(storedJSON), storedSpec, `"spec":`+first+`,`+storedSpec, 1))
	}
	changed := benchChild("stable-1", "stable", "stable-uid", 3)
	changed.Object["spec"].(map[string]interface{})["minReadySeconds"] = int64(30)
	changedJSON, err := changed.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, method, path, contentType, user string
		body                                  []byte
		wantCode                              int
	}{
		{name: "control: the change alone is drift", method: http.MethodPut, path: rsPath + "/stable-1?fieldManager=" + benchKCM,
			contentType: "application/json", user: kcmUser, body: changedJSON, wantCode: http.StatusForbidden},
		{name: "an update with the change in a first spec", method: http.MethodPut, path: rsPath + "/stable-1?fieldManager=" + benchKCM,
			contentType: "application/json", user: kcmUser, body: withFirstSpec(`{"minReadySeconds":30,"template":{"spec":{"hostNetwork":true}}}`), wantCode: http.StatusBadRequest},
		{name: "a merge patch with an object twice", method: http.MethodPatch, path: rsPath + "/stable-1?fieldManager=" + benchKCM,
			contentType: "application/merge-patch+json", user: kcmUser,
			body: []byte(`{"spec":{"template":{"spec":{"securityContext":{"runAsUser":0},"securityContext":{}}}}}`), wantCode: http.StatusBadRequest},
		{name: "a strategic merge patch with a member twice", method: http.MethodPatch, path: rsPath + "/stable-1?fieldManager=" + benchKCM,
			contentType: "application/strategic-merge-patch+json", user: kcmUser,
			body: []byte(`{"spec":{"minReadySeconds":30},"spec":{}}`), wantCode: http.StatusBadRequest},
		{name: "a JSON patch whose value has a member twice", method: http.MethodPatch, path: rsPath + "/stable-1?fieldManager=" + benchKCM,
			contentType: "application/json-patch+json", user: kcmUser,
			body: []byte(`[{"op":"add","path":"/spec/template/spec/securityContext","value":{"seLinuxOptions":{"user":"x"},"seLinuxOptions":{}}}]`), wantCode: http.StatusBadRequest},
		{name: "a create by anyone", method: http.MethodPost, path: rsPath + "?fieldManager=kubectl",
			contentType: "application/json", user: "alice",
			body: []byte(`{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"new"},"metadata":{"name":"new","annotations":{}}}`), wantCode: http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := newServeEnv(t, nil, allowAll, enforce)
			env.dyn.ClearActions()
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: tc.method, path: tc.path, contentType: tc.contentType, body: tc.body, user: tc.user}))
			if rec.Code != tc.wantCode {
				t.Fatalf("answered %d (%v), want %d", rec.Code, env.lastError, tc.wantCode)
			}
			if tc.wantCode != http.StatusBadRequest {
				return
			}
			if n := env.forwarded.Load(); n != 0 {
				t.Fatalf("forwarded %d requests upstream, want none", n)
			}
			if actions := env.dyn.Actions(); len(actions) != 0 {
				t.Fatalf("the proxy read %d times for a body it refuses (first: %s %s), want none", len(actions), actions[0].GetVerb(), actions[0].GetResource().Resource)
			}
			var status apierrors.APIStatus
			if !errors.As(env.lastError, &status) || !strings.Contains(status.Status().Message, "has a member twice in one object") {
				t.Fatalf("answered %v, want the Status that names the repeated member", env.lastError)
			}
		})
	}
}
