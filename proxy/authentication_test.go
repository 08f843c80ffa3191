package proxy

import (
	"crypto/x509"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	authenticationv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kausality-io/kausality-proxy/authn"
	"github.com/kausality-io/kausality-proxy/internal/testpki"
)

const filterToken = "alice-token"

// tokenReviewsFor answers TokenReviews: filterToken is alice, any other
// token is invalid, as a real kube-apiserver answers.
func tokenReviewsFor() *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "tokenreviews", func(action clienttesting.Action) (bool, runtime.Object, error) {
		tr := action.(clienttesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		if tr.Spec.Token == filterToken {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: authenticationv1.UserInfo{Username: "alice", Groups: []string{"devs"}}}
		} else {
			tr.Status = authenticationv1.TokenReviewStatus{Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	return c
}

func TestAuthentication(t *testing.T) {
	ca := testpki.NewCA(t, "client-ca")
	clientCA, err := dynamiccertificates.NewStaticCAContent("client-ca", ca.PEM)
	if err != nil {
		t.Fatal(err)
	}
	alice := ca.ClientCert(t, "alice", "devs").Leaf
	stranger := testpki.NewCA(t, "other-ca").ClientCert(t, "mallory", user.SystemPrivilegedGroup).Leaf

	tests := []struct {
		name      string
		anonymous bool
		headers   map[string]string
		peer      *x509.Certificate
		http2     bool

		wantCode   int // 0: passed on
		wantUser   string
		wantGroups []string
		wantMethod authn.Method
		wantClose  bool
	}{
		{name: "a client certificate from the client CA", peer: alice,
			wantUser: "alice", wantGroups: []string{"devs", user.AllAuthenticated}, wantMethod: authn.MethodX509},
		{name: "a valid bearer token", headers: map[string]string{"Authorization": "Bearer " + filterToken},
			wantUser: "alice", wantGroups: []string{"devs", user.AllAuthenticated}, wantMethod: authn.MethodToken},
		{name: "no credentials, anonymous allowed", anonymous: true,
			wantUser: user.Anonymous, wantGroups: []string{user.AllUnauthenticated}, wantMethod: authn.MethodAnonymous},
		{name: "no credentials over HTTP/2 ends the connection", anonymous: true, http2: true,
			wantUser: user.Anonymous, wantGroups: []string{user.AllUnauthenticated}, wantMethod: authn.MethodAnonymous, wantClose: true},
		{name: "spoofed X-Remote-* headers do not authenticate", anonymous: true,
			headers:  map[string]string{"X-Remote-User": "admin", "X-Remote-Group": user.SystemPrivilegedGroup},
			wantUser: user.Anonymous, wantGroups: []string{user.AllUnauthenticated}, wantMethod: authn.MethodAnonymous},
		{name: "spoofed Impersonate-* headers do not authenticate", anonymous: true,
			headers:  map[string]string{"Impersonate-User": "admin", "Impersonate-Group": user.SystemPrivilegedGroup},
			wantUser: user.Anonymous, wantGroups: []string{user.AllUnauthenticated}, wantMethod: authn.MethodAnonymous},
		{name: "spoofed X-Remote-* headers with a certificate keep the certificate's identity", peer: alice,
			headers:  map[string]string{"X-Remote-User": "admin", "X-Remote-Group": user.SystemPrivilegedGroup},
			wantUser: "alice", wantGroups: []string{"devs", user.AllAuthenticated}, wantMethod: authn.MethodX509},
		{name: "no credentials, anonymous not allowed", wantCode: http.StatusUnauthorized},
		{name: "spoofed X-Remote-* headers without credentials are refused", headers: map[string]string{"X-Remote-User": "admin"},
			wantCode: http.StatusUnauthorized},
		{name: "a certificate from another CA is refused, not downgraded to anonymous", anonymous: true, peer: stranger,
			wantCode: http.StatusUnauthorized},
		{name: "an invalid token is refused", anonymous: true, headers: map[string]string{"Authorization": "Bearer wrong"},
			wantCode: http.StatusUnauthorized},
		{name: "a refusal over HTTP/2 ends the connection", http2: true, wantCode: http.StatusUnauthorized, wantClose: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, err := authn.New(authn.Config{
				ClientCA:            clientCA,
				TokenReviews:        tokenReviewsFor().AuthenticationV1().TokenReviews(),
				AllowAnonymous:      tt.anonymous,
				WebhookRetryBackoff: &wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1},
			})
			if err != nil {
				t.Fatal(err)
			}
			m := newMetrics()
			next := &recordingNext{}
			body := newCountingBody(`{"kind":"ConfigMap"}`)
			r := filterRequest(tt.headers, tt.peer, body)
			if tt.http2 {
				r.Proto, r.ProtoMajor, r.ProtoMinor = "HTTP/2.0", 2, 0
			}
			rec := httptest.NewRecorder()
			withAuthentication(next, a, m, zap.NewNop()).ServeHTTP(rec, r)

			if got := rec.Header().Get("Connection") == "close"; got != tt.wantClose {
				t.Errorf("Connection: close %v, want %v", got, tt.wantClose)
			}
			failures := testutil.ToFloat64(m.authFailures)
			if tt.wantCode != 0 {
				wantDenial(t, rec, tt.wantCode, next, body)
				if failures != 1 {
					t.Errorf("authentication failures counted %v, want 1", failures)
				}
				return
			}
			if !next.called {
				t.Fatalf("not passed on: %d %s", rec.Code, rec.Body)
			}
			if failures != 0 {
				t.Errorf("authentication failures counted %v, want 0", failures)
			}
			caller, ok := callerFrom(next.req.Context())
			if !ok {
				t.Fatal("no caller in the context passed on")
			}
			if caller.Method != tt.wantMethod || caller.User.GetName() != tt.wantUser || !slices.Equal(caller.User.GetGroups(), tt.wantGroups) {
				t.Errorf("caller %s, want %s %s %v", caller, tt.wantMethod, tt.wantUser, tt.wantGroups)
			}
			if wantToken := tt.wantMethod == authn.MethodToken; (caller.Token == filterToken) != wantToken {
				t.Errorf("caller token kept: %v, want %v", caller.Token != "", wantToken)
			}
			u, ok := request.UserFrom(next.req.Context())
			if !ok || u != caller.User {
				t.Errorf("the effective user before impersonation is %v, want the caller %v", u, caller.User)
			}
		})
	}
}
