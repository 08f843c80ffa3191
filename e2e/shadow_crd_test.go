package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// In shadow mode an approved drift write is decided (the decision names the
// approval it would use) but the approval stays on the parent and the
// child gets no annotation: shadow changes nothing.
func TestShadowConsumesNoApproval(t *testing.T) {
	f := newInitializedGadgetFamily(t, "wg-shadow", "enforce")
	f.settleGadget("g", "Deny/DriftUnapproved")
	approval := fmt.Sprintf(`[{"apiVersion":%q,"kind":"Gadget","name":"g","generation":%d,"mode":"once"}]`, wgAPIVersion, f.getWidget().GetGeneration())
	f.annotateWidget(map[string]*string{wgAnnApprovals: &approval})
	f.settleGadget("g", "Allow/DriftApproved")
	before, err := f.admin.Resource(gadgetGVR()).Namespace(f.ns).Get(context.Background(), "g", getOpts())
	mustf(t, err, "get")

	setConfig(t, fmt.Sprintf(`apiVersion: kausality.io/v1alpha1
kind: ProxyConfiguration
controllers:
- name: widget-controller
  match:
    serviceAccount: %s/%s
    fieldManager: %s
  mode: shadow
`, wgControllerNS, wgControllerSA, wgManager))

	mark := wgMark(t)
	_, err = f.setValue("g", "b", false)
	mustf(t, err, "the shadowed write")
	d := wgDecision(t, mark, "gadgets", f.ns, "g")
	wgExpectDecision(t, d, "Allow", "DriftApproved")
	wgExpectField(t, d, "shadow", true)
	wgExpectField(t, d, "approvalMode", "once")
	if v := f.getWidget().GetAnnotations()[wgAnnApprovals]; v != approval {
		t.Fatalf("shadow mode consumed the once approval: %q", v)
	}
	after, err := f.admin.Resource(gadgetGVR()).Namespace(f.ns).Get(context.Background(), "g", getOpts())
	mustf(t, err, "get")
	if after.GetAnnotations()["kausality.io/trace"] != before.GetAnnotations()["kausality.io/trace"] {
		t.Fatalf("shadow mode rewrote the trace: %q → %q", before.GetAnnotations()["kausality.io/trace"], after.GetAnnotations()["kausality.io/trace"])
	}
	if f.gadgetValue("g") != "b" {
		t.Fatal("the shadowed write did not go through")
	}
}

// /metrics exposes the decision counters with bounded labels: no object
// names, no users.
func TestDecisionMetrics(t *testing.T) {
	f := newWGFamily(t, "wg-metrics", "enforce")
	_, err := f.createGadget("metrics-gadget-"+f.ns, "a", false)
	mustf(t, err, "create Gadget")
	var body string
	eventually(t, 30*time.Second, "decision metrics", func() error {
		resp, err := http.Get(cluster.ProxyEndpoint().MetricsURL + "/metrics")
		if err != nil {
			return err
		}
		data, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		body = string(data)
		if !strings.Contains(body, `kausality_proxy_decisions_total{category="ParentInitializing",controller="",decision="Allow",mode="enforce",resource="e2e.kausality.io/gadgets",shadow="false"}`) {
			var got []string
			for _, l := range strings.Split(body, "\n") {
				if strings.HasPrefix(l, "kausality_proxy_decisions_total{") {
					got = append(got, l)
				}
			}
			return fmt.Errorf("no ParentInitializing decision for gadgets in /metrics: %v", got)
		}
		return nil
	})
	for _, forbidden := range []string{"metrics-gadget-", f.ns, f.widget, "alice", wgControllerUser} {
		if strings.Contains(body, forbidden) {
			t.Errorf("/metrics contains %q: label cardinality must stay bounded", forbidden)
		}
	}
	for _, want := range []string{"kausality_proxy_decision_duration_seconds_bucket", "kausality_proxy_requests_total", "kausality_proxy_upstream_up 1"} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

func gadgetGVR() schema.GroupVersionResource { return framework.GadgetGVR }

func getOpts() metav1.GetOptions { return metav1.GetOptions{} }
