//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	autoscalingv1 "k8s.io/api/autoscaling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
	"github.com/kausality-io/kausality-proxy/intercept/allowance"
	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
)

// TestAllowancesAcceptWithoutMayInitiate: with the shipped policies
// narrowed so that one user may initiate, another user whom RBAC lets
// scale a Deployment (in an enforce namespace) starts nothing: the
// forwarded write grants no allowances, and the deployment controller's
// scaling of the ReplicaSet that follows is refused, naming spec.replicas
// and the missing allowance, with nothing of it sent to kube-apiserver.
// The initiator's own scale afterwards is carried out.
func TestAllowancesAcceptWithoutMayInitiate(t *testing.T) {
	ctx := context.Background()
	acceptPolicies(t, "e2e-accept-init-", onlyUserInitiates("accept-initiator"))
	ns := allowanceNamespace(t, "accept-init", "enforce")
	allowanceReadyPods(t, ns)
	initiator := intentPerson(t, "accept-initiator")
	bystander := intentPerson(t, "accept-bystander")
	_, rsName := intentSettledDeployment(t, initiator, ns, "web", 2, false)

	// The ReplicaSet's name is its template's hash, the same in every
	// namespace: the marker names the namespace too.
	marker := "/namespaces/" + ns + "/replicasets/" + rsName
	env.Recorder.Watch(marker)
	mark := wgMark(t)
	scaled, err := bystander.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{})
	mustf(t, err, "the bystander scales the Deployment (RBAC allows it)")
	if v := scaled.Annotations[annotations.Allowances]; strings.Contains(v, "accept-bystander") {
		t.Errorf("the bystander's scale granted allowances: %s", v)
	}
	for _, l := range wgDecisionsAfter(t, mark, "deployments", ns, "web") {
		if l.Str("user") == "accept-bystander" && l["allowanceGranted"] != nil {
			t.Errorf("the bystander's write granted allowances: %s", intentDescribe([]framework.DecisionLine{l}))
		}
	}

	// The real deployment controller's scaling is a violation.
	acceptWaitDenied(t, mark, ns, rsName, deploymentControllerUser, "spec.replicas")
	intentExpectReplicas(t, bystander, ns, rsName, 2, "after the refused scaling")
	for _, r := range env.Recorder.Requests(marker) {
		if r.Method != http.MethodGet && strings.Contains(string(r.Body), `"replicas":4`) {
			t.Errorf("a write of the ReplicaSet reached kube-apiserver: %s %s %s", r.Method, r.Path, r.Body)
		}
	}

	// The same write as the controller's identity, to read the 403.
	ctrl := intentServiceAccount(t, "deployment-controller")
	err = intentSetReplicas(ctrl, ns, rsName, 4, "kube-controller-manager")
	acceptExpectViolation(t, err, "spec.replicas")

	// The initiator's scale grants what the controller needs.
	_, err = initiator.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{})
	mustf(t, err, "the initiator scales the Deployment")
	intentWaitReplicas(t, initiator, ns, rsName, 3, "the initiator's scale carried out")
}

// acceptExpectViolation checks that err is the proxy's 403 for an
// allowance violation of the mutation: the message and a cause name the
// field and the missing allowance.
func acceptExpectViolation(t *testing.T, err error, mutation string) {
	t.Helper()
	status, ok := err.(apierrors.APIStatus)
	if !ok || status.Status().Code != http.StatusForbidden {
		t.Fatalf("%v, want a 403 for %s", err, mutation)
	}
	s := status.Status()
	if !strings.Contains(s.Message, mutation) || !strings.Contains(s.Message, annotations.Allowances) {
		t.Errorf("the denial does not name %s and the missing allowance: %s", mutation, s.Message)
	}
	named := false
	for _, c := range s.Details.Causes {
		named = named || c.Type == decision.CauseAllowance && strings.HasPrefix(c.Field, mutation) && strings.Contains(c.Message, "mutation: "+mutation)
	}
	if !named {
		t.Errorf("no cause names %s and the allowance it needs: %+v", mutation, s.Details.Causes)
	}
}

// jiraReplicasPolicy is the Kausal design's attestation example: a scale
// starts allowances only with a ticket, whose value the trace records.
const jiraReplicasPolicy = `apiVersion: kausal.io/v1alpha1
kind: AllowancePolicy
metadata: {name: deployment-replicas-with-ticket}
spec:
  match:
    kind: Deployment
    fields: ["spec.replicas"]
    cel: ["has(object.metadata.annotations) && has(object.metadata.annotations.jira)"]
    capture: ["metadata.annotations[jira]"]
  subjects:
  - {kind: Group, name: "system:authenticated", mayInitiate: true}
  - {kind: ServiceAccount, namespace: kube-system, name: deployment-controller}
  allow:
  - {kind: ReplicaSet, relation: Child, mutations: ["spec.replicas"]}
`

// TestAllowancesAcceptAttestation: with the shipped replica policy
// replaced by one whose CEL requires a jira annotation, a scale without
// the annotation initiates nothing (the controller's scaling is refused);
// with it, the allowance's trace carries the ticket as an attestation,
// and the allowances the ReplicaSet receives for its Pods carry it on.
func TestAllowancesAcceptAttestation(t *testing.T) {
	ctx := context.Background()
	acceptPolicies(t, "e2e-accept-jira-", withoutPolicy("deployment-replicas"), jiraReplicasPolicy)
	const policy = "e2e-accept-jira-deployment-replicas-with-ticket"
	ns := allowanceNamespace(t, "accept-jira", "enforce")
	pause := allowanceReadyPods(t, ns)
	alice := intentPerson(t, "alice")
	_, rsName := intentSettledDeployment(t, alice, ns, "web", 2, false)

	mark := wgMark(t)
	d, err := alice.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":3}}`), metav1.PatchOptions{})
	mustf(t, err, "alice scales without a ticket")
	if v := d.Annotations[annotations.Allowances]; strings.Contains(v, policy) {
		t.Errorf("a scale without a ticket was granted allowances: %s", v)
	}
	acceptWaitDenied(t, mark, ns, rsName, deploymentControllerUser, "spec.replicas")

	// New pods stay unready: the ReplicaSet does not settle, so the
	// allowances it is given are not consumed and pruned before they are
	// read.
	pause(true)
	d, err = alice.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"jira":"INFRA-23232"}},"spec":{"replicas":4}}`), metav1.PatchOptions{})
	mustf(t, err, "alice scales with a ticket")
	set, err := allowance.Parse(d.Annotations[annotations.Allowances])
	mustf(t, err, "the Deployment's allowances")
	var granted *allowance.Allowance
	for i, a := range set.Allowances {
		if a.Policy == policy && a.Generation == d.Generation {
			granted = &set.Allowances[i]
		}
	}
	if granted == nil {
		t.Fatalf("no allowance of %s at generation %d: %s", policy, d.Generation, d.Annotations[annotations.Allowances])
	}
	if len(granted.Trace) != 1 || granted.Trace[0].Field != "spec.replicas" || granted.Trace[0].Attestations["metadata.annotations[jira]"] != "INFRA-23232" {
		t.Errorf("the trace does not attest the ticket at spec.replicas: %+v", granted.Trace)
	}
	intentWaitReplicas(t, alice, ns, rsName, 4, "the ticketed scale carried out")

	// The ReplicaSet's allowances for its Pods carry the ticket on.
	eventually(t, 60*time.Second, "the ReplicaSet's allowances carry the ticket", func() error {
		rs, err := alice.AppsV1().ReplicaSets(ns).Get(ctx, rsName, metav1.GetOptions{})
		if err != nil {
			return err
		}
		set, err := allowance.Parse(rs.Annotations[annotations.Allowances])
		if err != nil {
			return err
		}
		for _, a := range set.Allowances {
			if a.Kind == "Pod" && len(a.Trace) == 2 && a.Trace[0].Kind == "Deployment" &&
				a.Trace[0].Attestations["metadata.annotations[jira]"] == "INFRA-23232" && a.Trace[1].Kind == "ReplicaSet" && a.Trace[1].Field == "spec.replicas" {
				if a.Initiator != "alice" {
					return fmt.Errorf("initiator %q, want alice", a.Initiator)
				}
				return nil
			}
		}
		return fmt.Errorf("none: %s", rs.Annotations[annotations.Allowances])
	})
}

// TestAllowancesAcceptAutoscalerWindow: an autoscaler's /scale of a
// Deployment (as kube-controller-manager's horizontal-pod-autoscaler
// identity) allows ReplicaSet replica changes and nothing else. A person
// has edited the ReplicaSet's pod template (the Deployment is paused, so
// the deployment controller keeps the edited ReplicaSet); in the /scale's
// window the ReplicaSet is scaled, while a revert of the person's edit by
// the deployment controller's identity is refused.
//
// The /scale's allowances reach the Deployment ahead of the /scale, so
// the controller reacting to the /scale is never refused.
func TestAllowancesAcceptAutoscalerWindow(t *testing.T) {
	ctx := context.Background()
	// Pausing starts no rollout allowances here: the /scale's must be the
	// only ones the controller's scaling can use.
	acceptPolicies(t, "e2e-accept-hpa-", func(u *unstructured.Unstructured) {
		if u.GetName() == "deployment-rollout" {
			_ = unstructured.SetNestedStringSlice(u.Object, []string{"spec.template", "spec.strategy", "spec.minReadySeconds"}, "spec", "match", "fields")
		}
	})
	ns := allowanceNamespace(t, "accept-hpa", "enforce")
	pause := allowanceReadyPods(t, ns)
	alice := intentPerson(t, "alice")
	_, rsName := intentSettledDeployment(t, alice, ns, "web", 2, false)

	_, err := alice.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"paused":true}}`), metav1.PatchOptions{})
	mustf(t, err, "alice pauses the Deployment")
	eventually(t, 60*time.Second, "the pause observed", func() error {
		d, err := alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		if d.Status.ObservedGeneration != d.Generation {
			return fmt.Errorf("generation %d observed %d", d.Generation, d.Status.ObservedGeneration)
		}
		return nil
	})
	rs, err := alice.AppsV1().ReplicaSets(ns).Get(ctx, rsName, metav1.GetOptions{})
	mustf(t, err, "reading the ReplicaSet")
	original := rs.Spec.Template.Spec.Containers[0].Image
	beforeEdit := rs.DeepCopy()
	const edited = "registry.invalid/edited-by-a-person:1"
	mustf(t, acceptSetImage(alice, ns, rsName, edited), "alice edits the ReplicaSet's pod template")

	pause(true)
	hpa := intentServiceAccount(t, "horizontal-pod-autoscaler")
	mark := wgMark(t)
	mustf(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		s, err := hpa.AppsV1().Deployments(ns).GetScale(ctx, "web", metav1.GetOptions{})
		if err != nil {
			return err
		}
		s.Spec.Replicas = 4
		_, err = hpa.AppsV1().Deployments(ns).UpdateScale(ctx, "web", &autoscalingv1.Scale{ObjectMeta: s.ObjectMeta, Spec: s.Spec}, metav1.UpdateOptions{})
		return err
	}), "the autoscaler scales the Deployment through /scale")
	intentWaitReplicas(t, alice, ns, rsName, 4, "the autoscaler's scale carried out")
	refused := acceptDenials(t, mark, ns, rsName, deploymentControllerUser)
	if len(refused) > 0 {
		t.Errorf("the deployment controller's scaling was refused %d time(s), want none: %s", len(refused), intentDescribe(refused))
	}

	d, err := alice.AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
	mustf(t, err, "reading the Deployment")
	set, err := allowance.Parse(d.Annotations[annotations.Allowances])
	mustf(t, err, "the Deployment's allowances")
	const autoscaler = "system:serviceaccount:kube-system:horizontal-pod-autoscaler"
	byAutoscaler := 0
	for _, a := range set.Allowances {
		if a.Initiator != autoscaler {
			continue
		}
		byAutoscaler++
		if a.Kind != "ReplicaSet" || a.Mutation != "spec.replicas" {
			t.Errorf("the /scale allows more than ReplicaSet replica changes: %+v", a)
		}
	}
	if byAutoscaler == 0 {
		t.Errorf("no allowance the autoscaler initiated: %s", d.Annotations[annotations.Allowances])
	}

	// An old copy of the ReplicaSet, read before the person's edit, as
	// the deployment controller sends one when its cache is a beat
	// behind: it differs in the template without anyone reverting the
	// edit, and kube-apiserver refuses it with a conflict. The caller gets
	// that conflict, not a violation.
	ctrl := intentServiceAccount(t, "deployment-controller")
	mark = wgMark(t)
	beforeEdit.Spec.Replicas = ptr.To[int32](4)
	_, err = ctrl.AppsV1().ReplicaSets(ns).Update(ctx, beforeEdit, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Errorf("the write of an old copy: %v, want kube-apiserver's conflict", err)
	}
	if refused := acceptDenials(t, mark, ns, rsName, deploymentControllerUser); len(refused) > 0 {
		t.Errorf("the write of an old copy was refused as a violation: %s", intentDescribe(refused))
	}

	// The revert of the person's edit, in the window.
	acceptExpectViolation(t, acceptSetImage(ctrl, ns, rsName, original), "spec.template")
	rs, err = alice.AppsV1().ReplicaSets(ns).Get(ctx, rsName, metav1.GetOptions{})
	mustf(t, err, "reading the ReplicaSet")
	if got := rs.Spec.Template.Spec.Containers[0].Image; got != edited {
		t.Errorf("the ReplicaSet's image is %s, want the person's %s kept", got, edited)
	}
}

// acceptSetImage sets the image of a ReplicaSet's first container as c.
func acceptSetImage(c kubernetes.Interface, ns, name, image string) error {
	ctx := context.Background()
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rs, err := c.AppsV1().ReplicaSets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		rs.Spec.Template.Spec.Containers[0].Image = image
		_, err = c.AppsV1().ReplicaSets(ns).Update(ctx, rs, metav1.UpdateOptions{})
		return err
	})
}

// TestAllowancesAcceptLogAndShadow: the violation enforce refuses (the
// deployment controller's identity changing a ReplicaSet's pod template
// in a person's scale window) passes in log mode with a warning that
// names it and a drift record, and in shadow mode silently, with only
// the decision line telling.
func TestAllowancesAcceptLogAndShadow(t *testing.T) {
	acceptPolicies(t, "e2e-accept-modes-", nil)
	alice := intentPerson(t, "alice")
	ctrl, warnings := acceptControllerWithWarnings(t)

	type outcome struct {
		ns, rs   string
		warnings []string
		line     *[]framework.DecisionLine
	}
	violate := func(mode string) outcome {
		ctx := context.Background()
		ns := allowanceNamespace(t, "accept-"+mode, mode)
		pause := allowanceReadyPods(t, ns)
		_, rsName := intentSettledDeployment(t, alice, ns, "web", 2, false)
		pause(true)
		_, err := alice.AppsV1().Deployments(ns).Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"replicas":4}}`), metav1.PatchOptions{})
		mustf(t, err, "alice scales the Deployment")
		intentWaitReplicas(t, alice, ns, rsName, 4, "the scale carried out")
		before := len(warnings.all())
		mark := wgMark(t)
		mustf(t, acceptSetImage(ctrl, ns, rsName, allowanceEvilImage), "the template change in "+mode+" mode")
		var line []framework.DecisionLine
		eventually(t, 30*time.Second, "the decision line of the template change", func() error {
			line = nil
			for _, l := range wgDecisionsAfter(t, mark, "replicasets", ns, rsName) {
				if l.Str("user") == deploymentControllerUser && acceptLineViolates(l, "spec.template") {
					line = append(line, l)
				}
			}
			if len(line) == 0 {
				return fmt.Errorf("none: %s", intentDescribe(wgDecisionsAfter(t, mark, "replicasets", ns, rsName)))
			}
			return nil
		})
		return outcome{ns: ns, rs: rsName, warnings: warnings.all()[before:], line: &line}
	}

	shadow := violate("shadow")
	log := violate("log")

	for _, o := range []struct {
		mode string
		outcome
	}{{"shadow", shadow}, {"log", log}} {
		for _, l := range *o.line {
			if l.Str("decision") != "Allow" || l.Str("allowanceMode") != o.mode {
				t.Errorf("%s mode: %s, want allowed in allowance mode %s", o.mode, intentDescribe([]framework.DecisionLine{l}), o.mode)
			}
		}
	}

	warned := false
	for _, w := range log.warnings {
		warned = warned || strings.Contains(w, "spec.template") && strings.Contains(w, "allowance-mode log")
	}
	if !warned {
		t.Errorf("log mode: no warning names the violation: %q", log.warnings)
	}
	for _, w := range shadow.warnings {
		if strings.Contains(w, "allowance") {
			t.Errorf("shadow mode warned: %q", w)
		}
	}

	eventually(t, 60*time.Second, "a drift record of the log-mode violation", func() error {
		if recs := acceptDriftRecords(t, log.ns, log.rs); len(recs) == 0 {
			return fmt.Errorf("none")
		}
		return nil
	})
	if recs := acceptDriftRecords(t, shadow.ns, shadow.rs); len(recs) > 0 {
		t.Errorf("shadow mode recorded the violation as drift: %s", recs[0])
	}

}
