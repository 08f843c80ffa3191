package testutil

import (
	"errors"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Ptr returns a pointer to a copy of v, for optional fields in fixtures.
func Ptr[T any](v T) *T { return &v }

// ToUnstructured converts a typed object as the proxy sees it on the wire.
func ToUnstructured(t testing.TB, obj runtime.Object) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

// WantStatusError fails t unless err is a metav1.Status error with this
// code, reason and exact message: the proxy's errors are read by people,
// so their wording is part of the behaviour.
func WantStatusError(t testing.TB, err error, code int32, reason metav1.StatusReason, msg string) {
	t.Helper()
	var se *apierrors.StatusError
	if !errors.As(err, &se) {
		t.Fatalf("error %v (%T) is not an *apierrors.StatusError", err, err)
	}
	if se.ErrStatus.Code != code || se.ErrStatus.Reason != reason {
		t.Errorf("got code %d reason %q, want %d %q (message %q)", se.ErrStatus.Code, se.ErrStatus.Reason, code, reason, se.ErrStatus.Message)
	}
	if se.ErrStatus.Message != msg {
		t.Errorf("message:\n got: %s\nwant: %s", se.ErrStatus.Message, msg)
	}
}
