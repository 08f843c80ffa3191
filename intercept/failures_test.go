package intercept

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// A parent whose kind kube-apiserver does not serve cannot be read: with
// --failure-policy=Fail the write gets the 500 of any unreadable parent,
// with a message that says what to fix in the ownerReference.
// --failure-policy=Ignore still forwards the write.
func TestUnservedParentKindIsTheCallersToFix(t *testing.T) {
	noMatch := fmt.Errorf("reading the parent Nothing x: %w", &meta.NoKindMatchError{
		GroupKind: schema.GroupKind{Group: "nothing.example.com", Kind: "Nothing"}, SearchedVersions: []string{"v1"},
	})
	err := New(Config{FailurePolicy: FailurePolicyFail}).unresolvable(noMatch)
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		t.Fatalf("%v is not a Status", err)
	}
	s := status.Status()
	if s.Code != http.StatusInternalServerError || !strings.Contains(s.Message, "ownerReference") || !strings.Contains(s.Message, "nothing.example.com") {
		t.Fatalf("status %d %q", s.Code, s.Message)
	}
	if s.Details == nil || len(s.Details.Causes) != 1 || s.Details.Causes[0].Field != "metadata.ownerReferences" {
		t.Fatalf("causes %+v", s.Details)
	}
	// No outage: a caller could name such an owner on purpose to have its
	// write forwarded undecided.
	err = New(Config{FailurePolicy: FailurePolicyIgnore}).unresolvable(noMatch)
	if !errors.As(err, &status) || status.Status().Code != http.StatusInternalServerError ||
		!strings.Contains(status.Status().Message, "although --failure-policy=Ignore") {
		t.Fatalf("--failure-policy=Ignore: %v, want the refusal", err)
	}
}
