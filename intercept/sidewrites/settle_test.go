package sidewrites

import (
	"context"
	"errors"
	"net/http"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Only a refusal says the reservation was not taken: whatever else fails
// may come after kube-apiserver took it.
func TestRefused(t *testing.T) {
	gr := schema.GroupResource{Group: "apps", Resource: "deployments"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{apierrors.NewConflict(gr, "web", errors.New("the object moved")), true},
		{apierrors.NewNotFound(gr, "web"), true},
		{apierrors.NewForbidden(gr, "web", errors.New("no")), true},
		{apierrors.NewTooManyRequests("busy", 1), true},
		{apierrors.NewTimeoutError("the write may have been applied", 1), false},
		{apierrors.NewGenericServerResponse(http.StatusRequestTimeout, "patch", gr, "web", "", 0, false), false},
		{apierrors.NewInternalError(errors.New("etcd")), false},
		{apierrors.NewServiceUnavailable("restarting"), false},
		{errors.New("read: connection reset by peer"), false},
		{context.DeadlineExceeded, false},
	} {
		if got := refused(tc.err); got != tc.want {
			t.Errorf("refused(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
