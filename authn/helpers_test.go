package authn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/kausality-io/kausality-proxy/internal/testpki"
)

// testCA is a throwaway certificate authority.
type testCA struct{ *testpki.CA }

func newTestCA(t *testing.T, cn string) *testCA { return &testCA{testpki.NewCA(t, cn)} }

type certOpts struct {
	cn        string
	orgs      []string
	notBefore time.Time
	notAfter  time.Time
	usage     []x509.ExtKeyUsage
}

func (ca *testCA) issue(t *testing.T, o certOpts) *x509.Certificate {
	t.Helper()
	cert, _ := ca.Issue(t, testpki.Options{CN: o.cn, Orgs: o.orgs, NotBefore: o.notBefore, NotAfter: o.notAfter, Usage: o.usage})
	return cert
}

func (ca *testCA) provider(t *testing.T) dynamiccertificates.CAContentProvider {
	t.Helper()
	p, err := dynamiccertificates.NewStaticCAContent("test-client-ca", ca.PEM)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// request builds an inbound request with an optional client cert and headers.
func request(cert *x509.Certificate, headers map[string]string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "https://proxy.example/api/v1/namespaces/default/pods", nil)
	if cert != nil {
		r.TLS = &tls.ConnectionState{PeerCertificates: []*x509.Certificate{cert}}
	} else {
		r.TLS = &tls.ConnectionState{}
	}
	for k, v := range headers {
		r.Header.Set(k, v)
	}
	return r
}

// noRetry makes webhook failures fail fast.
var noRetry = &wait.Backoff{Duration: time.Millisecond, Factor: 1, Steps: 1}

// fakeTokenReviews is a client-go fake clientset whose TokenReview reactor
// answers from a table and counts calls.
type fakeTokenReviews struct {
	*fake.Clientset
	mu    sync.Mutex
	calls []authenticationv1.TokenReviewSpec
	// users maps a valid token to its user.
	users map[string]authenticationv1.UserInfo
	// audiences, when set, is returned in status.audiences for valid tokens.
	audiences []string
	// fail, when set, is returned as the Create error.
	fail error
}

func newFakeTokenReviews(users map[string]authenticationv1.UserInfo) *fakeTokenReviews {
	f := &fakeTokenReviews{Clientset: fake.NewClientset(), users: users}
	f.PrependReactor("create", "tokenreviews", func(action clienttesting.Action) (bool, runtime.Object, error) {
		tr := action.(clienttesting.CreateAction).GetObject().(*authenticationv1.TokenReview).DeepCopy()
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls = append(f.calls, tr.Spec)
		if f.fail != nil {
			return true, nil, f.fail
		}
		if u, ok := f.users[tr.Spec.Token]; ok {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true, User: u, Audiences: f.audiences}
		} else {
			// What a real kube-apiserver answers for a token it does not know.
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: false, Error: "invalid bearer token"}
		}
		return true, tr, nil
	})
	return f
}

func (f *fakeTokenReviews) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeTokenReviews) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

// sarPolicy decides a SubjectAccessReview: allowed, denied, reason.
type sarPolicy func(spec authorizationv1.SubjectAccessReviewSpec) (allowed bool, reason string)

// fakeSARs is a client-go fake clientset whose SubjectAccessReview reactor
// answers from a policy and records every review.
type fakeSARs struct {
	*fake.Clientset
	mu     sync.Mutex
	calls  []authorizationv1.SubjectAccessReviewSpec
	policy sarPolicy
	fail   error
}

func newFakeSARs(policy sarPolicy) *fakeSARs {
	f := &fakeSARs{Clientset: fake.NewClientset(), policy: policy}
	f.PrependReactor("create", "subjectaccessreviews", func(action clienttesting.Action) (bool, runtime.Object, error) {
		sar := action.(clienttesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview).DeepCopy()
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls = append(f.calls, sar.Spec)
		if f.fail != nil {
			return true, nil, f.fail
		}
		allowed, reason := f.policy(sar.Spec)
		sar.Status = authorizationv1.SubjectAccessReviewStatus{Allowed: allowed, Reason: reason}
		return true, sar, nil
	})
	return f
}

func (f *fakeSARs) recorded() []authorizationv1.SubjectAccessReviewSpec {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]authorizationv1.SubjectAccessReviewSpec(nil), f.calls...)
}

// statusCode returns the HTTP code of an *apierrors.StatusError, failing the
// test for any other kind of error.
func statusCode(t *testing.T, err error) int32 {
	t.Helper()
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T) is not an *apierrors.StatusError", err, err)
	}
	return se.ErrStatus.Code
}
