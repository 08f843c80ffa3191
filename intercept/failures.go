// What the proxy answers when a fact cannot be read: the failure policy
// carried out, kube-apiserver's own not-found, and reservation errors
// classified for the decision.

package intercept

import (
	"errors"
	"fmt"
	"net"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// ignoredWarning is the warning of a write let through undecided, when
// err is a failure --failure-policy=Ignore covers.
func ignoredWarning(err error) (string, bool) {
	var ignored *ignoredError
	if !errors.As(err, &ignored) {
		return "", false
	}
	return formatWarning("kausality: no drift decision was made (--failure-policy=Ignore): " + ignored.Error()), true
}

// stillMoving is the answer to a write whose object or parent kept
// changing for decision.MaxRounds decisions. It is retryable (client-go
// retries a 429 with Retry-After by itself), and never a 409: a client
// that sent no resourceVersion asked for its write to be applied to the
// latest object, and a conflict would tell it that it had asked otherwise.
func stillMoving(wr *write, what string) error {
	e := apierrors.NewTooManyRequests(fmt.Sprintf(
		"kausality-proxy: %s kept changing while this write to %s %s was decided (%d decisions on fresh state); nothing was written, retry the write",
		what, wr.gvr.GroupResource(), wr.info.Name, decision.MaxRounds), 1)
	return e
}

// reservationError classifies a failed reservation for the decision.
func reservationError(err error) decision.ReservationError {
	switch {
	case apierrors.IsConflict(err):
		return decision.ReservationConflict
	case apierrors.IsNotFound(err):
		return decision.ReservationParentGone
	}
	return decision.ReservationFailed
}

// unresolvable carries out the failure policy for a fact that could not
// be read: an ignoredError the caller forwards, or the refusal.
func (i *Interceptor) unresolvable(err error) error {
	kind := decision.Unreadable
	var status apierrors.APIStatus
	var netErr net.Error
	if (errors.As(err, &status) && status.Status().Code == http.StatusServiceUnavailable) || errors.As(err, &netErr) {
		kind = decision.Unreachable
	}
	action := decision.OnFailure(i.cfg.FailurePolicy, kind)
	switch {
	case meta.IsNoMatchError(err):
		// Not an outage: the write names a kind nobody serves, which its
		// caller can do on purpose to have it forwarded undecided under
		// --failure-policy=Ignore.
		return unservedParentKind(err, i.cfg.FailurePolicy)
	case action.Forward:
		return &ignoredError{err}
	case action.Code == http.StatusServiceUnavailable:
		e := apierrors.NewServiceUnavailable(fmt.Sprintf("kausality-proxy cannot decide about this write (--failure-policy=Fail): %v", err))
		e.ErrStatus.Details = &metav1.StatusDetails{RetryAfterSeconds: 1}
		return e
	}
	return apierrors.NewInternalError(fmt.Errorf("kausality-proxy cannot decide about this write (--failure-policy=Fail): %w", err))
}

// unservedParentKind refuses a write whose parent is of a kind that
// kube-apiserver does not serve (discovery was refreshed for the lookup, or
// moments before), whatever the failure policy: 500 as for any unreadable
// parent, but the message says what the caller can fix: the
// ownerReference is misspelled, or the kind's CustomResourceDefinition is
// gone. It is no outage, which is all --failure-policy=Ignore lets a write
// through for: a caller could name such an owner on purpose.
func unservedParentKind(err error, policy decision.FailurePolicy) error {
	why := "(--failure-policy=Fail)"
	if policy == decision.FailurePolicyIgnore {
		why = "and refuses it although --failure-policy=Ignore, which covers outages only"
	}
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status: metav1.StatusFailure,
		Code:   http.StatusInternalServerError,
		Reason: metav1.StatusReasonInternalError,
		Message: fmt.Sprintf("kausality-proxy cannot decide about this write %s: %v. "+
			"The controller ownerReference names a kind that kube-apiserver does not serve: correct its apiVersion and kind, or, "+
			"if the kind's CustomResourceDefinition was removed, remove the ownerReference; if the kind was installed moments ago, retry", why, err),
		Details: &metav1.StatusDetails{Causes: []metav1.StatusCause{{
			Type:    metav1.CauseTypeFieldValueNotSupported,
			Field:   "metadata.ownerReferences",
			Message: "the controller owner's kind is not served by kube-apiserver",
		}}},
	}}
}

// resourceNotFound is kube-apiserver's answer for a path that names no
// resource it serves.
func resourceNotFound() error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusNotFound,
		Reason:  metav1.StatusReasonNotFound,
		Message: "the server could not find the requested resource",
		Details: &metav1.StatusDetails{},
	}}
}

// ignoredError marks a failure that --failure-policy=Ignore lets through.
type ignoredError struct{ err error }

func (e *ignoredError) Error() string { return e.err.Error() }

// fail answers err, or lets the write through undecided when the failure
// policy says so.
func (i *Interceptor) fail(x exchange, f *facts, err error) {
	if warning, ok := ignoredWarning(err); ok {
		i.logError(f, "ignored-failure", err)
		x.w.Header().Add("Warning", warning)
		x.up.Send(x.w, x.r)
		return
	}
	i.logError(f, "error", err)
	if apierrors.IsTooManyRequests(err) {
		// client-go retries a 429 that says when, by itself.
		x.w.Header().Set("Retry-After", "1")
	}
	x.writeError(x.w, err)
}
