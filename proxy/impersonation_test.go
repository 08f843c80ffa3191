package proxy

import (
	"context"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kausality-io/kausality-proxy/authn"
)

// impersonationReviews lets alice impersonate anyone but "admin" and the
// group system:masters; nobody else may impersonate.
func impersonationReviews() *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "subjectaccessreviews", func(action clienttesting.Action) (bool, runtime.Object, error) {
		sar := action.(clienttesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		attrs := sar.Spec.ResourceAttributes
		sar.Status.Allowed = sar.Spec.User == "alice" && attrs != nil && attrs.Verb == "impersonate" &&
			attrs.Name != "admin" && attrs.Name != user.SystemPrivilegedGroup
		return true, sar, nil
	})
	return c
}

func TestImpersonation(t *testing.T) {
	alice := &authn.Caller{Method: authn.MethodX509, User: &user.DefaultInfo{Name: "alice", Groups: []string{"devs", user.AllAuthenticated}}}
	mallory := &authn.Caller{Method: authn.MethodToken, Token: "mallory-token", User: &user.DefaultInfo{Name: "mallory", Groups: []string{user.AllAuthenticated}}}

	tests := []struct {
		name    string
		caller  *authn.Caller // nil: no authenticated caller in the context
		headers map[string]string

		wantCode   int // 0: passed on
		wantUser   string
		wantGroups []string
		wantExtra  map[string][]string
	}{
		{name: "no Impersonate-* headers keeps the caller", caller: alice,
			wantUser: "alice", wantGroups: []string{"devs", user.AllAuthenticated}},
		{name: "an allowed user impersonation", caller: alice, headers: map[string]string{"Impersonate-User": "bob"},
			wantUser: "bob", wantGroups: []string{user.AllAuthenticated}},
		{name: "an allowed user, group and extra impersonation", caller: alice,
			headers:  map[string]string{"Impersonate-User": "bob", "Impersonate-Group": "team", "Impersonate-Extra-Scopes": "read"},
			wantUser: "bob", wantGroups: []string{"team", user.AllAuthenticated}, wantExtra: map[string][]string{"scopes": {"read"}}},
		{name: "spoofed X-Remote-* headers change nothing", caller: alice,
			headers:  map[string]string{"X-Remote-User": "admin", "X-Remote-Group": user.SystemPrivilegedGroup},
			wantUser: "alice", wantGroups: []string{"devs", user.AllAuthenticated}},
		{name: "a denied user impersonation", caller: alice, headers: map[string]string{"Impersonate-User": "admin"},
			wantCode: http.StatusForbidden},
		{name: "a denied group impersonation", caller: alice,
			headers:  map[string]string{"Impersonate-User": "bob", "Impersonate-Group": user.SystemPrivilegedGroup},
			wantCode: http.StatusForbidden},
		{name: "a caller without impersonate permission", caller: mallory, headers: map[string]string{"Impersonate-User": "bob"},
			wantCode: http.StatusForbidden},
		{name: "a non-canonical header name is resolved, not ignored", caller: mallory, headers: map[string]string{"impersonate-user": "bob"},
			wantCode: http.StatusForbidden},
		{name: "groups without a user", caller: alice, headers: map[string]string{"Impersonate-Group": "team"},
			wantCode: http.StatusBadRequest},
		{name: "an identity that does not survive the hop upstream", caller: alice,
			headers:  map[string]string{"Impersonate-User": "bob", "Impersonate-Group": " system:masters"},
			wantCode: http.StatusBadRequest},
		{name: "no authenticated caller", headers: map[string]string{"Impersonate-User": "bob"},
			wantCode: http.StatusInternalServerError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := authn.New(authn.Config{
				SubjectAccessReviews: impersonationReviews().AuthorizationV1().SubjectAccessReviews(),
				WebhookRetryBackoff:  &wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1},
			})
			if err != nil {
				t.Fatal(err)
			}
			m := newMetrics()
			next := &recordingNext{}
			body := newCountingBody(`{"kind":"ConfigMap"}`)
			r := filterRequest(tt.headers, nil, body)
			if tt.caller != nil {
				ctx := context.WithValue(r.Context(), callerKey{}, tt.caller)
				r = r.WithContext(request.WithUser(ctx, tt.caller.User))
			}
			rec := httptest.NewRecorder()
			withImpersonation(next, a, m).ServeHTTP(rec, r)

			denials := testutil.ToFloat64(m.impersonationDenials)
			if tt.wantCode != 0 {
				wantDenial(t, rec, tt.wantCode, next, body)
				if want := map[bool]float64{true: 1}[tt.caller != nil]; denials != want {
					t.Errorf("impersonation denials counted %v, want %v", denials, want)
				}
				return
			}
			if !next.called {
				t.Fatalf("not passed on: %d %s", rec.Code, rec.Body)
			}
			if denials != 0 {
				t.Errorf("impersonation denials counted %v, want 0", denials)
			}
			u, ok := request.UserFrom(next.req.Context())
			if !ok {
				t.Fatal("no effective user in the context passed on")
			}
			gotExtra := u.GetExtra()
			if len(gotExtra) == 0 {
				gotExtra = nil
			}
			if u.GetName() != tt.wantUser || !slices.Equal(u.GetGroups(), tt.wantGroups) || !equalHeaders(gotExtra, tt.wantExtra) {
				t.Errorf("effective user %s %v %v, want %s %v %v", u.GetName(), u.GetGroups(), gotExtra, tt.wantUser, tt.wantGroups, tt.wantExtra)
			}
			if caller, _ := callerFrom(next.req.Context()); caller != tt.caller {
				t.Errorf("the authenticated caller changed to %v", caller)
			}
		})
	}
}
