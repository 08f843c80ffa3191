//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// TestAttackOwnerReferenceToAnyKindStartsNoCache: a caller who may only
// write ConfigMaps names a Pod of its namespace as the controller of the
// ConfigMaps it creates, sending the field manager of a controller. The
// proxy decides each write under that Pod, read live: no cache of every
// Pod in the cluster is started for it, and none holds Pods afterwards. A Widget whose controller's status writes went through the
// proxy is the control: its kind is cached.
func TestAttackOwnerReferenceToAnyKindStartsNoCache(t *testing.T) {
	ctx := context.Background()
	f := newAttackFixture(t)
	admin := directClient(t)
	pod, err := admin.CoreV1().Pods(f.ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "driver"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	mustf(t, err, "create Pod")

	c := f.cert.proxyClient(t)
	mark := wgMark(t)
	for n := range 3 {
		name := fmt.Sprintf("owned-by-pod-%d", n)
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,`+
			`"ownerReferences":[{"apiVersion":"v1","kind":"Pod","name":"driver","uid":%q,"controller":true}]},"data":{"k":"v"}}`, name, pod.UID)
		code, out := sendRaw(t, c, cluster.ProxyEndpoint().URL, http.MethodPost,
			"/api/v1/namespaces/"+f.ns+"/configmaps?fieldManager=kubelet", "application/json", []byte(body), f.cert.header())
		if code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", name, code, out)
		}
		if n == 0 {
			// A cache the first write had started would have synced by
			// the next: its parents would come from it.
			time.Sleep(2 * time.Second)
		}
	}
	for n := range 3 {
		name := fmt.Sprintf("owned-by-pod-%d", n)
		d := wgDecision(t, mark, "configmaps", f.ns, name)
		if d.Str("parent") == "" || d.Str("parentSource") != "live" {
			t.Errorf("%s was decided under parent %q read from %q, want the Pod read live", name, d.Str("parent"), d.Str("parentSource"))
		}
	}
	pods := `kausality_proxy_caches{holds="parents",resource="pods"}`
	if got := metricValue(t, env.MetricsURL, pods); got != "" {
		t.Errorf("%s = %s: the proxy caches every Pod of the cluster for a caller's ownerReference", pods, got)
	}

	// The control: a Widget's controller had its status writes recorded,
	// and wrote under it.
	w := newInitializedGadgetFamily(t, "watched-kind", "log")
	_, err = w.createGadget("g2", "b", false)
	mustf(t, err, "the controller creates a second Gadget")
	widgets := fmt.Sprintf(`kausality_proxy_caches{holds="parents",resource=%q}`, framework.WidgetGVR.GroupResource().String())
	eventually(t, 15*time.Second, widgets+" is exported", func() error {
		if got := metricValue(t, env.MetricsURL, widgets); got != "1" {
			return fmt.Errorf("%s = %q", widgets, got)
		}
		return nil
	})
}
