package proxy

import (
	"encoding/json"
	"errors"
	"net/http"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// WriteStatus writes err as a metav1.Status. Every error the proxy itself
// produces goes through here so that clients (client-go, kubectl) can decode
// it exactly like an error from kube-apiserver. Errors that are not API
// status errors become 500s: the caller should have classified them.
func WriteStatus(w http.ResponseWriter, err error) {
	status := StatusFor(err)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-cache, private")
	w.WriteHeader(int(status.Code))
	body, marshalErr := json.Marshal(status)
	if marshalErr != nil {
		return
	}
	_, _ = w.Write(body)
}

// StatusFor converts err into the metav1.Status the proxy would send.
func StatusFor(err error) *metav1.Status {
	var apiStatus apierrors.APIStatus
	var status metav1.Status
	if errors.As(err, &apiStatus) {
		status = apiStatus.Status()
	} else {
		status = apierrors.NewInternalError(err).Status()
	}
	status.TypeMeta = metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}
	if status.Status == "" {
		status.Status = metav1.StatusFailure
	}
	if status.Code == 0 {
		status.Code = http.StatusInternalServerError
	}
	return &status
}

// statusError builds a StatusError for codes apimachinery has no
// constructor for (502) or whose constructor message reads badly for a proxy.
func statusError(code int32, reason metav1.StatusReason, message string) *apierrors.StatusError {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    code,
		Reason:  reason,
		Message: message,
	}}
}
