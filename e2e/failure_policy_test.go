package e2e

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// A parent the proxy cannot read (here: its kind is not served at all)
// follows --failure-policy, Fail by default: the write is refused with a
// Status that says why, and nothing is written.
func TestUnreadableParentFollowsFailurePolicy(t *testing.T) {
	ctx := context.Background()
	ns := namespaceWithMode(t, "failpolicy", "enforce")
	cfg, err := cluster.UserThroughProxy("failpolicy-user", "system:masters")
	mustf(t, err, "user")
	c := clientFor(t, cfg)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "orphan", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "ghosts.example.com/v1", Kind: "Ghost", Name: "casper", UID: "0000", Controller: ptr.To(true),
	}}}, Data: map[string]string{"k": "v"}}
	_, err = c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	var status apierrors.APIStatus
	if err == nil || !apierrors.IsInternalError(err) {
		t.Fatalf("create under an unreadable parent: %v, want a 500 Status", err)
	}
	if s, ok := err.(apierrors.APIStatus); ok {
		status = s
	}
	if msg := status.Status().Message; !strings.Contains(msg, "--failure-policy=Fail") || !strings.Contains(msg, "Ghost") {
		t.Fatalf("message does not say what happened: %q", msg)
	}
	if _, err := clientFor(t, cluster.Direct()).CoreV1().ConfigMaps(ns).Get(ctx, "orphan", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the refused write reached kube-apiserver: %v", err)
	}
}
