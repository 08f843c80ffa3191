package intercept_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
)

// The Deployment's own controller patches away kausality.io/freeze and
// kausality.io/rejections, which the proxy's copy does not hold yet (a
// person set them a moment ago; the cache lags). The patch changes nothing
// of that copy, so it is decided again on the Deployment read live rather
// than forwarded on the copy alone.
func TestAControllersPatchOfItsControlsIsDecidedOnTheObjectReadLive(t *testing.T) {
	for _, sub := range []string{"", "/status"} {
		t.Run("deployments"+sub, func(t *testing.T) {
			allowAll := func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil }
			env := newServeEnv(t, nil, allowAll)
			got := answeringEmpty(env)
			env.dyn.ClearActions()
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPatch,
				path:        "/apis/apps/v1/namespaces/apps/deployments/stable" + sub + "?fieldManager=kube-controller-manager",
				contentType: "application/merge-patch+json",
				body:        []byte(`{"metadata":{"annotations":{"kausality.io/freeze":null,"kausality.io/rejections":null}}}`),
				user:        "system:serviceaccount:kube-system:deployment-controller"}))
			if n := env.liveReads("deployments"); n == 0 {
				t.Errorf("answered %d after %d forwarded requests (%q) without reading the Deployment live", rec.Code, len(*got), strings.Join(*got, " "))
			}
		})
	}
}

// answeringEmpty answers every request env forwards with an empty object,
// and keeps the bodies it was sent.
func answeringEmpty(env *benchEnv) *[]string {
	var got []string
	env.upstream = func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		got = append(got, string(data))
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}
	return &got
}
