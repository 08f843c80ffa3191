package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/internal/testenv"
)

// nsAllowances has allowances enforced and the shipped AllowancePolicies
// in force: the write rows there are checked against the allowances the
// parent carries.
const nsAllowances = "bench-allowances"

// shippedAllowancePolicies are the policies for kube-controller-manager's
// workload controllers, as a cluster applies them.
const shippedAllowancePolicies = "manifests/allowances/kube-controller-manager.yaml"

var scAllowance = scenario{"alw", "Intercepted writes: controller, parent reconciling, allowances enforced (Expected, allowance-checked)",
	nsAllowances, "reconciling", fmController, goalInterceptedWrite}

// allowanceRows are the rows of scAllowance: the writes of a rollout the
// shipped deployment-rollout policy allows (a new ReplicaSet, and its
// minReadySeconds).
var allowanceRows = map[string]string{
	"CREATE ReplicaSet": "the parent's allowance covers `create`: nothing stored is read",
	"PATCH merge-patch": "the parent's allowance covers `spec.minReadySeconds`; the fields the write changes are read from the patch itself: nothing stored is read",
}

// setupAllowances creates the namespace with allowances enforced, the
// shipped policies, and a reconciling Deployment whose template a person
// changed through kausality-proxy, so that it carries the allowances of a
// rollout. Nothing reconciles it: it stays reconciling, its allowances
// unconsumed.
func (h *Harness) setupAllowances(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: nsAllowances,
		Annotations: map[string]string{annotations.AllowanceMode: "enforce"}}}
	if _, err := h.admin.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
		return err
	}
	if err := h.applyShippedPolicies(ctx); err != nil {
		return err
	}
	deps := h.admin.AppsV1().Deployments(nsAllowances)
	d, err := deps.Create(ctx, deployment("reconciling"), metav1.CreateOptions{FieldManager: fmUser})
	if err != nil {
		return err
	}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation}
	if _, err = deps.UpdateStatus(ctx, d, metav1.UpdateOptions{FieldManager: fmController}); err != nil {
		return err
	}
	// A person's template change through the proxy initiates the
	// rollout's allowances; the proxy sees the policies once its informer
	// has them, so the change is repeated until they are there.
	k := h.targets[kausality]
	path := "/apis/apps/v1/namespaces/" + nsAllowances + "/deployments/reconciling?fieldManager=" + fmUser
	deadline := time.Now().Add(60 * time.Second)
	for i := 0; ; i++ {
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"bench/rollout":"%d"}}}}}`, i)
		if _, err := k.do(ctx, req{method: http.MethodPatch, path: path, contentType: "application/merge-patch+json", body: []byte(patch)}); err != nil {
			return err
		}
		if d, err = deps.Get(ctx, "reconciling", metav1.GetOptions{}); err != nil {
			return err
		}
		if d.Annotations[annotations.Allowances] != "" {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("a template change of Deployment %s/reconciling through kausality-proxy added no %s after 60s", nsAllowances, annotations.Allowances)
		}
		time.Sleep(200 * time.Millisecond)
	}
	h.parents[nsAllowances+"/reconciling"] = d
	logf("allowances: %s", d.Annotations[annotations.Allowances])
	return nil
}

// checkAllowancesEnforced makes sure the allowance rows measure what they
// say: a write of the pod template, which the rollout's allowance does not
// cover, is refused.
func (h *Harness) checkAllowancesEnforced(ctx context.Context, p *pools) error {
	k := h.targets[kausality]
	name := p.get(scAllowance, k, 0).Name
	r, err := k.do(ctx, req{method: http.MethodPatch,
		path:        "/apis/apps/v1/namespaces/" + nsAllowances + "/replicasets/" + name + "?dryRun=All&fieldManager=" + fmController,
		contentType: "application/merge-patch+json", body: []byte(`{"spec":{"template":{"metadata":{"annotations":{"bench/not-allowed":"x"}}}}}`),
		want: http.StatusForbidden})
	if err != nil {
		return fmt.Errorf("allowances are not enforced in %s: a pod template write the allowances do not cover: %w", nsAllowances, err)
	}
	if !bytes.Contains(r.body, []byte("spec.template")) {
		return fmt.Errorf("the refusal of a pod template write does not name spec.template: %s", r.body)
	}
	return nil
}

// applyShippedPolicies creates the AllowancePolicies of the shipped
// manifest, directly.
func (h *Harness) applyShippedPolicies(ctx context.Context) error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(root, shippedAllowancePolicies))
	if err != nil {
		return err
	}
	d := h.targets[direct]
	n := 0
	for _, doc := range bytes.Split(data, []byte("\n---")) {
		js, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return fmt.Errorf("%s: %w", shippedAllowancePolicies, err)
		}
		var obj map[string]any
		if err := json.Unmarshal(js, &obj); err != nil {
			return err
		}
		if obj["kind"] != "AllowancePolicy" {
			continue
		}
		if _, err := d.do(ctx, req{method: http.MethodPost, path: "/apis/kausal.io/v1alpha1/allowancepolicies",
			contentType: "application/json", body: js, want: http.StatusCreated}); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return fmt.Errorf("%s holds no AllowancePolicy", shippedAllowancePolicies)
	}
	return nil
}
