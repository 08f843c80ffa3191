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
	"k8s.io/client-go/kubernetes"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
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

	for _, d := range createUnderConfigMap(t, f, anchor, "kube-controller-manager") {
		if d.Str("parent") == "" || d.Str("parentSource") != "live" {
			t.Errorf("%s was decided under parent %q read from %q, want the ConfigMap read live", d.Str("name"), d.Str("parent"), d.Str("parentSource"))
		}
	}
	wantNoConfigMapCache(t, "a caller's ownerReference")

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

// TestAttackControllersRecordWrittenDirectlyStartsNoCache: the proxy
// writes a parent's controllers record only through itself, but a caller
// who may update ConfigMaps at kube-apiserver directly writes its own name
// into one's record there, and then names that ConfigMap as the controller
// of the ConfigMaps it creates through the proxy. Its writes are decided
// as the recorded controller's, and still no cache of every ConfigMap in
// the cluster is started: it may not write the status of ConfigMaps.
func TestAttackControllersRecordWrittenDirectlyStartsNoCache(t *testing.T) {
	ctx := context.Background()
	f := newAttackFixture(t)
	direct, err := kubernetes.NewForConfig(f.cert.direct)
	mustf(t, err, "the caller's own client of kube-apiserver")
	self := controllerid.UserOf(controllerid.UserIdentifier(f.cert.user, "")).Long
	anchor, err := direct.CoreV1().ConfigMaps(f.ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "recorded-anchor", Annotations: map[string]string{annotations.Controllers: self}},
		Data:       map[string]string{"k": "v"},
	}, metav1.CreateOptions{})
	mustf(t, err, "the caller creates, at kube-apiserver, a ConfigMap whose controllers record names it")

	for _, d := range createUnderConfigMap(t, f, anchor, "mallory") {
		if d.Str("controllerMethod") != string(controllerid.MethodStatusWriters) || !d.Bool("isController") {
			t.Fatalf("%s was decided for controller method %q (controller %v), want the recorded controller's: the attack did not reach the point it tests",
				d.Str("name"), d.Str("controllerMethod"), d.Bool("isController"))
		}
		if d.Str("parentSource") != "live" {
			t.Errorf("%s was decided under its parent read from %q, want the ConfigMap read live", d.Str("name"), d.Str("parentSource"))
		}
	}
	wantNoConfigMapCache(t, "a controllers record its caller wrote itself")
}

// createUnderConfigMap has f's certificate user create three ConfigMaps
// through the proxy whose controller is anchor, with fieldManager, and
// returns their decision lines.
func createUnderConfigMap(t *testing.T, f *attackFixture, anchor *corev1.ConfigMap, fieldManager string) []framework.DecisionLine {
	t.Helper()
	c := f.cert.proxyClient(t)
	mark := wgMark(t)
	names := make([]string, 3)
	for n := range names {
		names[n] = fmt.Sprintf("owned-by-%s-%d", anchor.Name, n)
		body := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,`+
			`"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":%q,"uid":%q,"controller":true}]},"data":{"k":"v"}}`, names[n], anchor.Name, anchor.UID)
		code, out := sendRaw(t, c, cluster.ProxyEndpoint().URL, http.MethodPost,
			"/api/v1/namespaces/"+f.ns+"/configmaps?fieldManager="+fieldManager, "application/json", []byte(body), f.cert.header())
		if code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", names[n], code, out)
		}
		if n == 0 {
			// A cache the first write had started would have synced by
			// the next: its parents would come from it.
			time.Sleep(2 * time.Second)
		}
	}
	lines := make([]framework.DecisionLine, len(names))
	for n, name := range names {
		lines[n] = wgDecision(t, mark, "configmaps", f.ns, name)
	}
	return lines
}

// wantNoConfigMapCache fails t when the proxy caches every ConfigMap of
// the cluster as parents, which it did for what.
func wantNoConfigMapCache(t *testing.T, what string) {
	t.Helper()
	configMaps := `kausality_proxy_caches{holds="parents",resource="configmaps"}`
	if got := metricValue(t, env.MetricsURL, configMaps); got != "" {
		t.Errorf("%s = %s: the proxy caches every ConfigMap of the cluster, whole, for %s", configMaps, got, what)
	}
}
