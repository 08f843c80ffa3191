package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
)

// TestAllowancesAnnotationProtected: kausal.io/allowances is the proxy's
// alone. A cluster-admin writing through the proxy can neither put a
// value on an object nor change or remove the stored one, through a
// create, every patch type, server-side apply, PUT or the status
// subresource.
func TestAllowancesAnnotationProtected(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "allowances-protected")
	cfg, err := cluster.UserThroughProxy("allowance-forger", "system:masters")
	if err != nil {
		t.Fatal(err)
	}
	admin := clientFor(t, cfg)
	const forged = `[{"kind":"ReplicaSet","mutation":"spec","generation":999,"initiator":"forger","policy":"any","trace":[{"kind":"Deployment","name":"web","generation":999,"field":"spec"}]}]`
	stored := func() (string, bool) {
		d, err := directClient(t).AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("reading the Deployment: %v", err)
		}
		v, ok := d.Annotations[annotations.Allowances]
		return v, ok
	}

	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{annotations.Allowances: forged}},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](0),
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "web"}},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
			},
		},
	}
	if _, err := admin.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the Deployment through the proxy: %v", err)
	}
	if v, ok := stored(); ok {
		t.Fatalf("a create put kausal.io/allowances on the Deployment: %q", v)
	}

	// What the proxy would have written, set past it.
	const proxys = `[{"kind":"ReplicaSet","mutation":"spec.replicas","generation":1,"initiator":"alice","policy":"deployment-replicas","trace":[{"kind":"Deployment","name":"web","generation":1,"field":"spec.replicas"}]}]`
	setDirectly(t, ns, proxys)

	writes := allowanceWrites(ctx, admin, ns, forged)
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			err := w.write()
			v, ok := stored()
			if !ok || v != proxys {
				t.Fatalf("after %s (error %v) kausal.io/allowances is %q (present %v), want the stored value kept", w.name, err, v, ok)
			}
		})
	}
}

type allowanceWrite struct {
	name  string
	write func() error
}

func allowanceWrites(ctx context.Context, admin kubernetes.Interface, ns, forged string) []allowanceWrite {
	deps := admin.AppsV1().Deployments(ns)
	key, _ := json.Marshal(annotations.Allowances)
	value, _ := json.Marshal(forged)
	merge := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%s:%s}}}`, key, value))
	remove := []byte(fmt.Sprintf(`{"metadata":{"annotations":{%s:null}}}`, key))
	jsonPatch := []byte(fmt.Sprintf(`[{"op":"add","path":"/metadata/annotations/kausal.io~1allowances","value":%s}]`, value))
	jsonRemove := []byte(`[{"op":"remove","path":"/metadata/annotations/kausal.io~1allowances"}]`)
	apply := []byte(fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"web","annotations":{%s:%s}}}`, key, value))
	patch := func(pt types.PatchType, body []byte, opts metav1.PatchOptions, sub ...string) func() error {
		return func() error {
			_, err := deps.Patch(ctx, "web", pt, body, opts, sub...)
			return err
		}
	}
	put := func(status bool, edit func(map[string]string) map[string]string) func() error {
		return func() error {
			d, err := deps.Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			d.Annotations = edit(d.Annotations)
			if status {
				_, err = deps.UpdateStatus(ctx, d, metav1.UpdateOptions{})
			} else {
				_, err = deps.Update(ctx, d, metav1.UpdateOptions{})
			}
			return err
		}
	}
	set := func(a map[string]string) map[string]string {
		if a == nil {
			a = map[string]string{}
		}
		a[annotations.Allowances] = forged
		return a
	}
	drop := func(a map[string]string) map[string]string {
		delete(a, annotations.Allowances)
		return a
	}
	return []allowanceWrite{
		{"merge patch", patch(types.MergePatchType, merge, metav1.PatchOptions{})},
		{"merge patch removing it", patch(types.MergePatchType, remove, metav1.PatchOptions{})},
		{"strategic merge patch", patch(types.StrategicMergePatchType, merge, metav1.PatchOptions{})},
		{"JSON patch", patch(types.JSONPatchType, jsonPatch, metav1.PatchOptions{})},
		{"JSON patch removing it", patch(types.JSONPatchType, jsonRemove, metav1.PatchOptions{})},
		{"server-side apply", patch(types.ApplyPatchType, apply, metav1.PatchOptions{FieldManager: "forger", Force: ptr.To(true)})},
		{"PUT", put(false, set)},
		{"PUT without it", put(false, drop)},
		{"status merge patch", patch(types.MergePatchType, merge, metav1.PatchOptions{}, "status")},
		{"status PUT", put(true, set)},
		{"status PUT without it", put(true, drop)},
	}
}

// setDirectly puts a value on the Deployment past the proxy, as the proxy
// itself would.
func setDirectly(t *testing.T, ns, value string) {
	t.Helper()
	key, _ := json.Marshal(annotations.Allowances)
	v, _ := json.Marshal(value)
	_, err := directClient(t).AppsV1().Deployments(ns).Patch(context.Background(), "web", types.MergePatchType,
		[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%s:%s}}}`, key, v)), metav1.PatchOptions{})
	if err != nil {
		t.Fatalf("setting kausal.io/allowances directly: %v", err)
	}
}
