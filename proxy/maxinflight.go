package proxy

import (
	"fmt"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"
)

// readOnlyVerbs are the verbs that do not count against the mutating limit.
var readOnlyVerbs = sets.New("get", "list", "watch")

// withMaxMutatingInFlight bounds how many mutating requests are served at
// once; beyond limit they get 429 with Retry-After, which client-go retries.
// An intercepted write holds its body and decodes it, so without a bound
// many concurrent large writes hold memory without end. Long-running
// requests (exec, attach, port-forward) are not counted, as in
// kube-apiserver. k8s.io/apiserver's WithMaxInFlightLimit does the same
// accounting, but answers in plain text and keeps process-wide state; the
// proxy answers every error with a metav1.Status.
func withMaxMutatingInFlight(next http.Handler, limit int, longRunning request.LongRunningRequestCheck, m *metrics) http.Handler {
	if limit <= 0 {
		return next
	}
	slots := make(chan struct{}, limit)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		info, ok := request.RequestInfoFrom(r.Context())
		if !ok || readOnlyVerbs.Has(info.Verb) || longRunning(r, info) {
			next.ServeHTTP(w, r)
			return
		}
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
			next.ServeHTTP(w, r)
		default:
			m.throttled.Inc()
			w.Header().Set("Retry-After", "1")
			WriteStatus(w, tooManyMutatingRequests(limit))
		}
	})
}

func tooManyMutatingRequests(limit int) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure,
		Code:   http.StatusTooManyRequests,
		Reason: metav1.StatusReasonTooManyRequests,
		Message: fmt.Sprintf("too many mutating requests in flight at kausality-proxy (limit %d, --max-mutating-requests-inflight); retry after the time in Retry-After",
			limit),
		Details: &metav1.StatusDetails{RetryAfterSeconds: 1},
	}}
}
