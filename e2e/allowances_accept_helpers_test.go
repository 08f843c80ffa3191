//go:build !kind

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/report/drifts"
)

// deploymentControllerUser is the identity kube-controller-manager's
// deployment controller writes with.
const deploymentControllerUser = "system:serviceaccount:kube-system:deployment-controller"

// acceptPolicies creates the shipped AllowancePolicies, each passed
// through edit (nil: unchanged), plus extra ones, named with prefix so
// that other tests' copies do not collide, and waits until the proxy
// reports each compiled.
func acceptPolicies(t *testing.T, prefix string, edit func(*unstructured.Unstructured), extra ...string) {
	t.Helper()
	ctx := context.Background()
	dyn, err := dynamic.NewForConfig(cluster.Direct())
	mustf(t, err, "a dynamic client")
	policies := dyn.Resource(v1alpha1.AllowancePoliciesGVR)
	shipped, err := os.ReadFile("../manifests/allowances/kube-controller-manager.yaml")
	mustf(t, err, "reading the shipped policies")
	docs := bytes.Split(shipped, []byte("\n---\n"))
	for _, e := range extra {
		docs = append(docs, []byte(e))
	}
	for _, doc := range docs {
		u := policyObject(t, string(doc))
		if edit != nil {
			edit(u)
		}
		u.SetName(prefix + u.GetName())
		got, err := policies.Create(ctx, u, metav1.CreateOptions{})
		mustf(t, err, "creating the allowance policy "+u.GetName())
		t.Cleanup(func() { _ = policies.Delete(context.Background(), got.GetName(), metav1.DeleteOptions{}) })
		expectAllowancePolicyCondition(t, dyn, got.GetName(), got.GetGeneration(), metav1.ConditionTrue, "Compiled")
	}
}

// onlyUserInitiates narrows who may initiate under a shipped policy: the
// subjects that let every authenticated user initiate become one user.
func onlyUserInitiates(user string) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		subjects, _, _ := unstructured.NestedSlice(u.Object, "spec", "subjects")
		for i, s := range subjects {
			m, _ := s.(map[string]any)
			if m["kind"] == "Group" && m["name"] == "system:authenticated" {
				subjects[i] = map[string]any{"kind": "User", "name": user, "mayInitiate": true}
			}
		}
		_ = unstructured.SetNestedSlice(u.Object, subjects, "spec", "subjects")
	}
}

// withoutPolicy drops one shipped policy by turning it into a copy that
// speaks of a kind that never occurs, so the rest stay as shipped.
func withoutPolicy(name string) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		if u.GetName() == name {
			_ = unstructured.SetNestedField(u.Object, "NoSuchKindInThisCluster", "spec", "match", "kind")
		}
	}
}

// acceptDenials are the decision lines after mark denying user's writes
// of a ReplicaSet (subresources excluded).
func acceptDenials(t *testing.T, mark int, ns, rsName, user string) []framework.DecisionLine {
	t.Helper()
	var out []framework.DecisionLine
	for _, l := range wgDecisionsAfter(t, mark, "replicasets", ns, rsName) {
		// A refused dry run is kube-apiserver's answer (a conflict, say),
		// relayed: only "denied" is the proxy's refusal.
		if l.Str("user") == user && l.Str("subresource") == "" && l.Str("decision") == "Deny" && l.Str("outcome") == "denied" {
			out = append(out, l)
		}
	}
	return out
}

// acceptLineViolates reports whether a decision line names a violation
// of the mutation (a prefix of the violating field).
func acceptLineViolates(l framework.DecisionLine, mutation string) bool {
	vs, _ := l["allowanceViolations"].([]any)
	for _, v := range vs {
		if s, _ := v.(string); strings.Contains(s, mutation) {
			return true
		}
	}
	return false
}

// acceptWarnings is a client as the identity cfg names that keeps the
// Warning headers it is sent.
type acceptWarnings struct {
	mu   sync.Mutex
	seen []string
}

func (w *acceptWarnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.seen = append(w.seen, text)
}

func (w *acceptWarnings) all() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.seen...)
}

// acceptControllerWithWarnings is the deployment controller's identity,
// with the warnings its writes are answered with.
func acceptControllerWithWarnings(t *testing.T) (kubernetes.Interface, *acceptWarnings) {
	t.Helper()
	cfg, err := cluster.ServiceAccountThroughProxy(context.Background(), "kube-system", "deployment-controller")
	mustf(t, err, "the deployment controller's identity")
	w := &acceptWarnings{}
	cfg.WarningHandler = w
	return clientFor(t, cfg), w
}

// acceptDriftRecords are the proxy's drift records of a child.
func acceptDriftRecords(t *testing.T, ns, child string) []string {
	t.Helper()
	list, err := directClient(t).CoreV1().ConfigMaps(framework.DriftNamespace).List(context.Background(),
		metav1.ListOptions{LabelSelector: drifts.ComponentLabel + "=drift-record"})
	mustf(t, err, "listing drift records")
	var out []string
	for _, cm := range list.Items {
		r := cm.Data["report"]
		if strings.Contains(r, `"namespace":"`+ns+`"`) && strings.Contains(r, `"name":"`+child+`"`) {
			out = append(out, r)
		}
	}
	return out
}

// acceptWaitDenied waits for a denial of user's write of the ReplicaSet
// after mark that names the mutation as a violation.
func acceptWaitDenied(t *testing.T, mark int, ns, rsName, user, mutation string) framework.DecisionLine {
	t.Helper()
	var denied framework.DecisionLine
	eventually(t, 90*time.Second, fmt.Sprintf("a denial of %s's %s of %s", user, mutation, rsName), func() error {
		for _, l := range acceptDenials(t, mark, ns, rsName, user) {
			if acceptLineViolates(l, mutation) {
				denied = l
				return nil
			}
		}
		return fmt.Errorf("none; lines: %s", intentDescribe(wgDecisionsAfter(t, mark, "replicasets", ns, rsName)))
	})
	return denied
}
