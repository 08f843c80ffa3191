package authn

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/scheme"
	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
)

// The webhook constructors in k8s.io/apiserver
// (plugin/pkg/authenticator/token/webhook.NewFromInterface and
// plugin/pkg/authorizer/webhook.NewFromInterface) take a whole client-go
// group client, but only ever call its RESTClient() and issue a raw
// POST .../tokenreviews or .../subjectaccessreviews on it. A typed
// TokenReviewInterface / SubjectAccessReviewInterface (what Config accepts,
// and what client-go's fake clientset implements with reactors) has no
// RESTClient. reviewTransport bridges the two: it is an in-process
// http.RoundTripper behind a real *rest.RESTClient that decodes the review
// the webhook sends, calls the typed client, and encodes the answer (or the
// API error, with its HTTP status, so that the webhook's retry and backoff
// logic sees 429/5xx exactly as it would over the network).
//
// Nothing here verifies anything: the upstream's answer is relayed verbatim.

// maxReviewBody bounds what the bridge reads from the webhook's request; a
// review is a few kilobytes.
const maxReviewBody = 4 << 20

type reviewTransport struct {
	tokenReviews authenticationv1client.TokenReviewInterface
	sars         authorizationv1client.SubjectAccessReviewInterface
}

func (t *reviewTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		defer func() { _ = req.Body.Close() }()
	}
	if req.Method != http.MethodPost || req.Body == nil {
		return t.respondErr(req, apierrors.NewMethodNotSupported(schema.GroupResource{}, req.Method))
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxReviewBody))
	if err != nil {
		return nil, err
	}
	var (
		out         runtime.Object
		bad, create error
	)
	switch {
	case strings.HasSuffix(req.URL.Path, "/tokenreviews") && t.tokenReviews != nil:
		out, bad, create = createReview(req.Context(), body, t.tokenReviews.Create, authenticationv1.SchemeGroupVersion.WithKind("TokenReview"))
	case strings.HasSuffix(req.URL.Path, "/subjectaccessreviews") && t.sars != nil:
		out, bad, create = createReview(req.Context(), body, t.sars.Create, authorizationv1.SchemeGroupVersion.WithKind("SubjectAccessReview"))
	default:
		return t.respondErr(req, apierrors.NewNotFound(schema.GroupResource{}, req.URL.Path))
	}
	if bad != nil {
		return t.respondErr(req, bad)
	}
	if create != nil {
		var status apierrors.APIStatus
		if errors.As(create, &status) {
			return t.respondErr(req, create)
		}
		// Transport-level failure (connection refused, reset, timeout):
		// surface it as such, so the webhook's retry logic classifies it
		// like the network error it is.
		return nil, create
	}
	markReviewAnswered(req.Context())
	return respond(req, http.StatusCreated, out)
}

// createReview decodes a review of kind gvk from body and creates it. bad
// is the caller's malformed body; err is the client's failure, an answer
// missing included. The answer is a copy with its kind set.
func createReview[R any, P interface {
	*R
	runtime.Object
}](ctx context.Context, body []byte, create func(context.Context, P, metav1.CreateOptions) (P, error), gvk schema.GroupVersionKind) (out runtime.Object, bad, err error) {
	in := P(new(R))
	if err := json.Unmarshal(body, in); err != nil {
		return nil, apierrors.NewBadRequest(err.Error()), nil
	}
	res, err := create(ctx, in, metav1.CreateOptions{})
	if err != nil {
		return nil, nil, err
	}
	if res == nil {
		return nil, nil, fmt.Errorf("%s client returned no result", gvk.Kind)
	}
	out = res.DeepCopyObject()
	out.GetObjectKind().SetGroupVersionKind(gvk)
	return out, nil, nil
}

func (t *reviewTransport) respondErr(req *http.Request, err error) (*http.Response, error) {
	status := apierrors.APIStatus(nil)
	if !errors.As(err, &status) {
		status = apierrors.NewInternalError(err)
	}
	s := status.Status()
	s.Kind, s.APIVersion = "Status", "v1"
	code := int(s.Code)
	if code == 0 {
		code = http.StatusInternalServerError
	}
	return respond(req, code, &s)
}

func respond(req *http.Request, code int, obj any) (*http.Response, error) {
	data, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	return &http.Response{
		Status:        fmt.Sprintf("%d %s", code, http.StatusText(code)),
		StatusCode:    code,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(data)),
		ContentLength: int64(len(data)),
		Request:       req,
	}, nil
}

// bridgeRESTClient returns a *rest.RESTClient for gv whose requests are served
// in process by rt. It has no client-side rate limiter: the typed client
// behind the bridge brings its own.
func bridgeRESTClient(gv schema.GroupVersion, rt http.RoundTripper) (*rest.RESTClient, error) {
	return rest.RESTClientFor(&rest.Config{
		Host:    "http://in-process.invalid",
		APIPath: "/apis",
		ContentConfig: rest.ContentConfig{
			GroupVersion:         &gv,
			ContentType:          runtime.ContentTypeJSON,
			NegotiatedSerializer: scheme.Codecs.WithoutConversion(),
		},
		Transport: rt,
		QPS:       -1,
	})
}

// authenticationGroup satisfies AuthenticationV1Interface for
// webhook.NewFromInterface, which only calls RESTClient(). The embedded
// interface is nil: any other method panics, loudly, should a future
// k8s.io/apiserver start calling it.
type authenticationGroup struct {
	authenticationv1client.AuthenticationV1Interface
	client rest.Interface
}

func (g authenticationGroup) RESTClient() rest.Interface { return g.client }

// authorizationGroup is authenticationGroup for AuthorizationV1Interface.
type authorizationGroup struct {
	authorizationv1client.AuthorizationV1Interface
	client rest.Interface
}

func (g authorizationGroup) RESTClient() rest.Interface { return g.client }
