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
// write ConfigMaps names another ConfigMap of its namespace as the
// controller of the ConfigMaps it creates, sending the field manager of a
// controller. The proxy decides each write under that ConfigMap, read
// live: no cache of every ConfigMap in the cluster, whole, is started for
// it. A Pod would do as well, but a status writer of Pods that another
// test runs through the proxy may make Pods watched legitimately. A
// Widget whose controller's status writes went through the proxy is the
// control: its kind is cached.
func TestAttackOwnerReferenceToAnyKindStartsNoCache(t *testing.T) {
	ctx := context.Background()
	f := newAttackFixture(t)
	admin := directClient(t)
	anchor, err := admin.CoreV1().ConfigMaps(f.ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "anchor"}, Data: map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	mustf(t, err, "create the ConfigMap named as controller")

	c := f.cert.proxyClient(t)
	mark := wgMark(t)
	for n := range 3 {
		name := fmt.Sprintf("owned-by-anchor-%d", n)
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,`+
			`"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"anchor","uid":%q,"controller":true}]},"data":{"k":"v"}}`, name, anchor.UID)
		code, out := sendRaw(t, c, cluster.ProxyEndpoint().URL, http.MethodPost,
			"/api/v1/namespaces/"+f.ns+"/configmaps?fieldManager=kube-controller-manager", "application/json", []byte(body), f.cert.header())
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
		name := fmt.Sprintf("owned-by-anchor-%d", n)
		d := wgDecision(t, mark, "configmaps", f.ns, name)
		if d.Str("parent") == "" || d.Str("parentSource") != "live" {
			t.Errorf("%s was decided under parent %q read from %q, want the ConfigMap read live", name, d.Str("parent"), d.Str("parentSource"))
		}
	}
	configMaps := `kausality_proxy_caches{holds="parents",resource="configmaps"}`
	if got := metricValue(t, env.MetricsURL, configMaps); got != "" {
		t.Errorf("%s = %s: the proxy caches every ConfigMap of the cluster, whole, for a caller's ownerReference", configMaps, got)
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
