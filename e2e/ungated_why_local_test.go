//go:build !kind

package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// A platform team adds its own attempt kind to ungatedChildKinds, under
// the kind of parent whose controller makes it by design: the proxy
// configured so lets the controller's write of such a child under its
// settled parent pass, and `kubectl kausality why`, reading the same
// configuration, says the kind is ungated there and why, instead of
// assuming the defaults.
func TestWhyUsesTheProxysUngatedKinds(t *testing.T) {
	cfg := framework.BaseConfig + "ungatedChildKinds:\n- kind: Pod\n- apiGroup: " + framework.TestGroup + "\n  kind: Gadget\n  parent:\n    apiGroup: " +
		framework.TestGroup + "\n    kind: Widget\n"
	rig := newDriftRig(t, "ungated-why", 0, func(o *framework.ReplicaOptions) { o.Config = cfg })
	rig.start()

	// The controller's write of g under its settled Widget passes through
	// the replica that leaves Gadgets ungated.
	_, err := rig.f.writeGadget(rig.ctrls[0], "g", false, func(g *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(g.Object, "attempt-2", "spec", "value")
	})
	mustf(t, err, "the controller's write of an ungated Gadget under its settled Widget")

	admin := directClient(t)
	_, err = admin.CoreV1().ConfigMaps(rig.f.ns).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "proxy-config"},
		Data:       map[string]string{"config.yaml": cfg},
	}, metav1.CreateOptions{})
	mustf(t, err, "the proxy's configuration as a ConfigMap")
	file := filepath.Join(t.TempDir(), "config.yaml")
	mustf(t, os.WriteFile(file, []byte(cfg), 0o600), "the proxy's configuration as a file")

	p := newPlugin(t, cluster.Direct())
	for _, tc := range []struct {
		name   string
		args   []string
		source string
	}{
		{"from the ConfigMap", []string{"--proxy-config-map", rig.f.ns + "/proxy-config"}, "ConfigMap " + rig.f.ns + "/proxy-config"},
		{"from the file", []string{"--proxy-config", file}, "the file " + file},
	} {
		out := p.run(append([]string{"-n", rig.f.ns, "why", "gadgets/g"}, tc.args...)...)
		if !strings.Contains(out, "Ungated:     yes: Gadget children of Widget parents are attempts") || !strings.Contains(out, "ungatedChildKinds from "+tc.source) {
			t.Errorf("%s: why does not say Gadget is ungated by the proxy's configuration:\n%s", tc.name, out)
		}
		if !strings.Contains(out, "Allow (SelfHealing)") {
			t.Errorf("%s: why does not decide as the proxy did (Allow, SelfHealing):\n%s", tc.name, out)
		}
	}

	// Without a readable configuration why says it assumes the defaults,
	// where Gadgets are gated.
	out := p.run("-n", rig.f.ns, "why", "gadgets/g", "--proxy-config-map", rig.f.ns+"/no-such-config")
	if !strings.Contains(out, "Ungated:     no: Gadget under parent kind Widget."+framework.TestGroup+" is not in ungatedChildKinds") || !strings.Contains(out, "the defaults: the proxy's configuration, ConfigMap "+rig.f.ns+"/no-such-config, cannot be read") {
		t.Errorf("why without the proxy's configuration:\n%s", out)
	}
}
