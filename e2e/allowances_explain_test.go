//go:build !kind

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kausality-io/kausality-proxy/api/v1alpha1"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/internal/kubectlplugin"
)

// TestAllowancesExplained: in a namespace whose allowance mode is enforce,
// with the shipped policies applied, the deployment controller's identity
// changes a ReplicaSet's pod template while a person's scale is carried
// out. The 403 is reported: the DriftReport and the drift record name the
// mutated field and the allowance it needed. `kubectl kausality why` says
// which allowances on the Deployment the controller can use and what
// nothing covers, and `kubectl kausality allowances` lists the
// Deployment's allowances with their initiator, policy and trace, and the
// ones its ReplicaSet carries from it.
func TestAllowancesExplained(t *testing.T) {
	ctx := context.Background()
	applyShippedAllowancePolicies(t)
	ns := allowanceNamespace(t, "allow-explain", "enforce")
	pause := allowanceReadyPods(t, ns)
	alice := intentPerson(t, "alice")
	carol := pluginPerson(t, "carol")
	_, rsName := intentSettledDeployment(t, alice, ns, "web", 2, false)

	// Pods stay unready: the Deployment stays in its scale window.
	pause(true)
	scaleDeploymentTo(t, alice, ns, rsName, 4)
	scaled, err := alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	mustf(t, err, "reading the Deployment")

	ctrl := intentServiceAccount(t, "deployment-controller")
	err = allowanceChangeTemplate(ctrl, ns, rsName)
	if status, ok := err.(apierrors.APIStatus); !ok || status.Status().Code != http.StatusForbidden {
		t.Fatalf("the deployment controller's template change in the scale window: %v, want 403", err)
	}

	// The DriftReport names the field and the missing allowance.
	names := func(a *v1alpha1.AllowanceVerdict) bool {
		if a == nil || a.Mode != "enforce" {
			return false
		}
		for _, v := range a.Violations {
			if strings.HasPrefix(v.Field, "spec.template") && v.NeededKind == "ReplicaSet" && v.NeededMutation == v.Field {
				return true
			}
		}
		return false
	}
	eventually(t, 60*time.Second, "a Detected DriftReport naming the template change and the allowance it needed", func() error {
		for _, r := range env.Reports.For(ns, rsName) {
			if r.Spec.Phase == v1alpha1.PhaseDetected && names(r.Spec.Allowances) {
				return nil
			}
		}
		return fmt.Errorf("none among %d reports of %s", len(env.Reports.For(ns, rsName)), rsName)
	})

	// The drift record says the same, as `drifts` shows it.
	eventually(t, 60*time.Second, "the drift record of the violation", func() error {
		var list struct {
			Drifts []kubectlplugin.DriftRow `json:"drifts"`
		}
		if err := json.Unmarshal([]byte(carol.run("-n", ns, "drifts", "-o", "json")), &list); err != nil {
			return err
		}
		for _, r := range list.Drifts {
			if r.Child.Name == rsName && r.Held && names(r.Allowances) {
				return nil
			}
		}
		return fmt.Errorf("no held record of %s names the violation: %+v", rsName, list.Drifts)
	})

	// why: the controller's writes of the ReplicaSet are checked against
	// the Deployment's allowances; the scale allows spec.replicas only.
	text := carol.run("-n", ns, "why", "replicaset/"+rsName)
	for _, want := range []string{
		"Allowances:  enforce (annotation " + annotations.AllowanceMode + " on namespace " + ns + ")",
		"on parent: ReplicaSet spec.replicas (generation " + fmt.Sprint(scaled.Generation) + ", consumed no, by alice via e2e-wiring-deployment-replicas): usable by " + deploymentController,
		"covered:   spec.replicas",
		"is a violation: denied (enforce)",
		"policy:    e2e-wiring-deployment-replicas names the controller",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("why does not say %q", want)
		}
	}
	var ex kubectlplugin.Explanation
	mustf(t, json.Unmarshal([]byte(carol.run("-n", ns, "why", "replicaset/"+rsName, "-o", "json")), &ex), "why -o json")
	if a := ex.Allowances; a == nil || strings.Join(a.Covered, ",") != "spec.replicas" {
		t.Errorf("why -o json: allowances %+v, want spec.replicas covered and nothing else", ex.Allowances)
	}

	// allowances, as TYPE NAME: the scale's allowance, its trace, and the
	// Pod allowances the ReplicaSet carries from the Deployment.
	text = carol.run("-n", ns, "allowances", "deployment", "web")
	for _, want := range []string{
		"Mode:        enforce (annotation " + annotations.AllowanceMode + " on namespace " + ns + ")",
		"e2e-wiring-deployment-replicas",
		"Deployment web (generation " + fmt.Sprint(scaled.Generation) + ") spec.replicas",
		"Children's allowances that came from Deployment web:",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("allowances does not say %q", want)
		}
	}
	var r kubectlplugin.AllowancesReport
	mustf(t, json.Unmarshal([]byte(carol.run("-n", ns, "allowances", "deployment/web", "-o", "json")), &r), "allowances -o json")
	found := false
	for _, a := range r.Allowances {
		if a.Kind == "ReplicaSet" && a.Mutation == "spec.replicas" && a.Generation == scaled.Generation {
			found = true
			if a.Initiator != "alice" || a.Consumed != "no" || len(a.Trace) != 1 || a.Trace[0].Field != "spec.replicas" {
				t.Errorf("the scale's allowance: %+v", a)
			}
		}
	}
	if !found {
		t.Errorf("no allowance of the scale (generation %d) listed: %+v", scaled.Generation, r.Allowances)
	}
	fromDeployment := false
	for _, c := range r.Children {
		for _, a := range c.Allowances {
			fromDeployment = fromDeployment || c.Child.Name == rsName && a.Kind == "Pod" && len(a.Trace) == 2 && a.Trace[0].Kind == "Deployment" && a.Initiator == "alice"
		}
	}
	if !fromDeployment {
		t.Errorf("the ReplicaSet's Pod allowances from the Deployment are not listed: %+v", r.Children)
	}
}
