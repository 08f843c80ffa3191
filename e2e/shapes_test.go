package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// No write escapes the gate by its shape: a deletecollection is decided
// per object it deletes, an eviction as the delete of its pod, a custom
// resource's /scale on the field its CRD names, and a /scale write leaves
// the same trace on the scaled object as a spec write would.

const shapesLabel = "e2e.kausality.io/widget"

// shapesClient is a controller-runtime client for cfg: DeleteAllOf is what
// controllers built on it send.
func shapesClient(t *testing.T, cfg *rest.Config) ctrlclient.Client {
	t.Helper()
	c, err := ctrlclient.New(rest.CopyConfig(cfg), ctrlclient.Options{})
	mustf(t, err, "controller-runtime client")
	return c
}

// shapesGadgets has the controller create Gadgets it owns, labelled with
// the Widget's name, and returns their names.
func shapesGadgets(t *testing.T, f *wgFamily, names ...string) {
	t.Helper()
	for _, name := range names {
		g := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": wgAPIVersion, "kind": "Gadget",
			"metadata": map[string]any{"name": name, "namespace": f.ns, "labels": map[string]any{shapesLabel: f.widget}},
			"spec":     map[string]any{"value": "a"},
		}}
		g.SetOwnerReferences([]metav1.OwnerReference{f.ownerRef()})
		_, err := f.gadgets(f.ctrl).Create(context.Background(), g, metav1.CreateOptions{FieldManager: wgManager})
		mustf(t, err, "the controller creates Gadget %s", name)
	}
}

// deleteAllGadgets is DeleteAllOf the Widget's Gadgets by cfg's identity.
func deleteAllGadgets(t *testing.T, f *wgFamily, cfg *rest.Config, dryRun bool) error {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(wgAPIVersion)
	u.SetKind("Gadget")
	opts := []ctrlclient.DeleteAllOfOption{ctrlclient.InNamespace(f.ns), ctrlclient.MatchingLabels{shapesLabel: f.widget}}
	if dryRun {
		opts = append(opts, ctrlclient.DryRunAll)
	}
	return shapesClient(t, cfg).DeleteAllOf(context.Background(), u, opts...)
}

// expectGadgets fails unless exactly names are left.
func expectGadgets(t *testing.T, f *wgFamily, names ...string) {
	t.Helper()
	list, err := f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).List(context.Background(), metav1.ListOptions{})
	mustf(t, err, "list Gadgets")
	var got []string
	for _, g := range list.Items {
		if g.GetDeletionTimestamp() == nil {
			got = append(got, g.GetName())
		}
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Fatalf("Gadgets left: %v, want %v", got, names)
	}
}

// waitRefused probes with dry runs until the proxy refuses them (its cache
// has caught up with a parent change the test just made): a dry run that
// is let through deletes nothing.
func waitRefused(t *testing.T, what string, probe func() error) {
	t.Helper()
	eventually(t, 30*time.Second, what, func() error {
		err := probe()
		if apierrors.IsForbidden(err) {
			return nil
		}
		return fmt.Errorf("got %v", err)
	})
}

// collectionRefusal checks the 403 of a refused deletecollection: it says
// nothing was deleted, names each held Gadget in its message and in
// details.causes, and carries the first one's reason.
func collectionRefusal(t *testing.T, err error, f *wgFamily, category, reasonCause string, held ...string) {
	t.Helper()
	s := wgStatus(t, err, 403, "a refused DeleteAllOf")
	if s.Reason != metav1.StatusReasonForbidden || !strings.Contains(s.Message, "nothing was deleted") {
		t.Errorf("reason %q, message %s", s.Reason, s.Message)
	}
	if !strings.Contains(s.Message, "Widget "+f.widget) {
		t.Errorf("the message does not name the parent: %s", s.Message)
	}
	for _, name := range held {
		if !strings.Contains(s.Message, "Gadget "+f.ns+"/"+name+" ("+category+")") {
			t.Errorf("the message does not name Gadget %s as %s: %s", name, category, s.Message)
		}
		found := false
		for _, c := range s.Details.Causes {
			found = found || (c.Type == "KausalityChild" && strings.HasSuffix(c.Message, "Gadget "+f.ns+"/"+name))
		}
		if !found {
			t.Errorf("details.causes do not name Gadget %s: %+v", name, s.Details.Causes)
		}
	}
	if _, ok := wgCause(s, reasonCause); !ok {
		t.Errorf("no %s cause: %+v", reasonCause, s.Details.Causes)
	}
}

func TestShapesDeleteCollection(t *testing.T) {
	t.Run("children of a frozen parent: refused whoever asks, nothing deleted", func(t *testing.T) {
		f := newWGFamily(t, "shp-frozen", "enforce")
		shapesGadgets(t, f, "g1", "g2")
		f.initialize()
		freeze := "true"
		f.annotateWidget(map[string]*string{wgAnnFreeze: &freeze})
		waitRefused(t, "a dry-run DeleteAllOf by alice is refused as frozen", func() error { return deleteAllGadgets(t, f, f.alice.cfg, true) })

		mark := wgMark(t)
		collectionRefusal(t, deleteAllGadgets(t, f, f.alice.cfg, false), f, "Frozen", "KausalityFrozen", "g1", "g2")
		collectionRefusal(t, deleteAllGadgets(t, f, f.ctrl.cfg, false), f, "Frozen", "KausalityFrozen", "g1", "g2")
		expectGadgets(t, f, "g1", "g2")
		for _, name := range []string{"g1", "g2"} {
			lines := wgDecisionsAfter(t, mark, "gadgets", f.ns, name)
			if countDecisions(lines, "alice", "Deny", "Frozen") != 1 || countDecisions(lines, wgControllerUser, "Deny", "Frozen") != 1 {
				t.Errorf("Gadget %s: want one Deny/Frozen line for alice and one for the controller: %s", name, intentDescribe(lines))
			}
			for _, l := range lines {
				if l.Str("verb") != "deletecollection" || l.Str("operation") != "DELETE" {
					t.Errorf("line %s: verb %q operation %q, want deletecollection DELETE", name, l.Str("verb"), l.Str("operation"))
				}
			}
		}

		// Deleting the namespace is the decision to delete everything in
		// it: the namespace controller empties it despite the freeze.
		err := directClient(t).CoreV1().Namespaces().Delete(context.Background(), f.ns, metav1.DeleteOptions{})
		mustf(t, err, "deleting namespace %s", f.ns)
		eventually(t, 90*time.Second, "the namespace with the frozen Widget's Gadgets is gone", func() error {
			ns, err := directClient(t).CoreV1().Namespaces().Get(context.Background(), f.ns, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err != nil {
				return err
			}
			return fmt.Errorf("namespace %s: %s %+v", f.ns, ns.Status.Phase, ns.Status.Conditions)
		})
	})

	t.Run("children of a settled parent: its controller is refused, a person is not", func(t *testing.T) {
		f := newWGFamily(t, "shp-settled", "enforce")
		shapesGadgets(t, f, "g1", "g2")
		f.initialize()
		f.settleGadget("g1", "Deny/DriftUnapproved")
		waitRefused(t, "a dry-run DeleteAllOf by the controller is refused as drift", func() error { return deleteAllGadgets(t, f, f.ctrl.cfg, true) })

		mark := wgMark(t)
		collectionRefusal(t, deleteAllGadgets(t, f, f.ctrl.cfg, false), f, "DriftUnapproved", "KausalityUnapproved", "g1", "g2")
		expectGadgets(t, f, "g1", "g2")
		if n := countDecisions(wgDecisionsAfter(t, mark, "gadgets", f.ns, "g1"), wgControllerUser, "Deny", "DriftUnapproved"); n != 1 {
			t.Errorf("%d Deny/DriftUnapproved lines for g1, want 1", n)
		}

		mark = wgMark(t)
		mustf(t, deleteAllGadgets(t, f, f.alice.cfg, false), "alice deletes the Gadgets of the unfrozen Widget (new origins)")
		expectGadgets(t, f)
		for _, name := range []string{"g1", "g2"} {
			d := wgDecision(t, mark, "gadgets", f.ns, name)
			wgExpectDecision(t, d, "Allow", "NewOrigin")
			wgExpectField(t, d, "verb", "deletecollection")
		}
	})
}

// readyDeployment is a settled Deployment of n ready pods, and the name
// of its ReplicaSet.
func readyDeployment(t *testing.T, ns string, n int32) string {
	t.Helper()
	readyPods(t, ns)
	_, rs := intentSettledDeployment(t, intentPerson(t, "alice"), ns, "web", n, false)
	return rs
}

func podsOf(t *testing.T, ns, rs string) []corev1.Pod {
	t.Helper()
	pods, err := directClient(t).CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	mustf(t, err, "list pods")
	var out []corev1.Pod
	for _, p := range pods.Items {
		if ref := metav1.GetControllerOf(&p); ref != nil && ref.Name == rs && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

func TestShapesEviction(t *testing.T) {
	ctx := context.Background()
	ns := namespaceWithMode(t, "shp-evict", "enforce")
	rs := readyDeployment(t, ns, 2)
	pods := podsOf(t, ns, rs)
	if len(pods) != 2 {
		t.Fatalf("%d pods of ReplicaSet %s, want 2", len(pods), rs)
	}
	bob := intentPerson(t, "bob")
	evict := func(pod string, dryRun bool) error {
		req := bob.CoreV1().RESTClient().Post().Namespace(ns).Resource("pods").Name(pod).SubResource("eviction").
			Body(&policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns}})
		if dryRun {
			req = req.Param("dryRun", metav1.DryRunAll)
		}
		return req.Do(ctx).Error()
	}

	freeze := "true"
	_, err := directClient(t).AppsV1().ReplicaSets(ns).Patch(ctx, rs, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+intentAnnFreeze+`":"`+freeze+`"}}}`), metav1.PatchOptions{})
	mustf(t, err, "freezing ReplicaSet %s", rs)
	victim := pods[0].Name
	waitRefused(t, "a dry-run eviction of a frozen ReplicaSet's pod is refused", func() error { return evict(victim, true) })

	mark := wgMark(t)
	err = bob.CoreV1().Pods(ns).EvictV1(ctx, &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: victim, Namespace: ns}})
	s := wgStatus(t, err, 403, "bob evicts a pod of the frozen ReplicaSet")
	if !strings.Contains(s.Message, "DELETE of v1 Pod "+ns+"/"+victim) || !strings.Contains(s.Message, intentAnnFreeze) {
		t.Errorf("the refusal does not name the pod's delete and the freeze: %s", s.Message)
	}
	intentUnblock(t, s, intentAnnFreeze)
	d := wgDecisionBy(t, mark, "bob", "pods", ns, victim)
	wgExpectDecision(t, d, "Deny", "Frozen")
	wgExpectField(t, d, "subresource", "eviction")
	wgExpectField(t, d, "operation", "DELETE")
	p, err := directClient(t).CoreV1().Pods(ns).Get(ctx, victim, metav1.GetOptions{})
	mustf(t, err, "the pod must still exist")
	if p.DeletionTimestamp != nil {
		t.Fatal("the refused eviction went through: the pod is terminating")
	}

	// Unfrozen, a person's drain is a new origin.
	_, err = directClient(t).AppsV1().ReplicaSets(ns).Patch(ctx, rs, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+intentAnnFreeze+`":null}}}`), metav1.PatchOptions{})
	mustf(t, err, "lifting the freeze")
	eventually(t, 30*time.Second, "bob's eviction after the freeze is lifted goes through", func() error {
		return evict(victim, false)
	})
	eventually(t, 15*time.Second, "an Allow/NewOrigin line for bob's eviction", func() error {
		if countDecisions(wgDecisionsAfter(t, mark, "pods", ns, victim), "bob", "Allow", "NewOrigin") == 0 {
			return fmt.Errorf("none yet: %s", intentDescribe(wgDecisionsAfter(t, mark, "pods", ns, victim)))
		}
		return nil
	})
}

// The proxy makes a DELETE land only on the object it decided on, with the
// object's uid as its precondition in a body of DeleteOptions. kube-apiserver
// reads a DELETE's options from its body when it has one, so options sent
// in the query must reach it in that body: a ReplicaSet deleted with
// propagationPolicy=Orphan in the query leaves its pods, without their
// owner, where the default propagation would have the garbage collector
// delete them.
func TestShapesDeleteKeepsTheOptionsOfItsQuery(t *testing.T) {
	ctx := context.Background()
	ns := namespaceWithMode(t, "shp-delopts", "enforce")
	rs := readyDeployment(t, ns, 2)
	pods := podsOf(t, ns, rs)
	if len(pods) != 2 {
		t.Fatalf("%d pods of ReplicaSet %s, want 2", len(pods), rs)
	}
	stored, err := directClient(t).AppsV1().ReplicaSets(ns).Get(ctx, rs, metav1.GetOptions{})
	mustf(t, err, "reading ReplicaSet %s", rs)
	mark := wgMark(t)
	bob := intentPerson(t, "bob")
	err = bob.AppsV1().RESTClient().Delete().Namespace(ns).Resource("replicasets").Name(rs).
		Param("propagationPolicy", string(metav1.DeletePropagationOrphan)).Do(ctx).Error()
	mustf(t, err, "bob deletes ReplicaSet %s, orphaning its pods", rs)
	wgExpectDecision(t, wgDecisionBy(t, mark, "bob", "replicasets", ns, rs), "Allow", "NewOrigin")
	eventually(t, 60*time.Second, "the ReplicaSet is gone and its pods are left without it", func() error {
		current, err := directClient(t).AppsV1().ReplicaSets(ns).Get(ctx, rs, metav1.GetOptions{})
		switch {
		case err == nil && current.UID == stored.UID:
			return fmt.Errorf("ReplicaSet %s is still there (finalizers %v)", rs, current.Finalizers)
		case err != nil && !apierrors.IsNotFound(err):
			return err
		}
		for _, pod := range pods {
			p, err := directClient(t).CoreV1().Pods(ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("pod %s: %w (the garbage collector deleted it: the propagation policy of the query was lost)", pod.Name, err)
			}
			if p.DeletionTimestamp != nil {
				return fmt.Errorf("pod %s is being deleted: the propagation policy of the query was lost", pod.Name)
			}
			for _, ref := range p.OwnerReferences {
				if ref.UID == stored.UID {
					return fmt.Errorf("pod %s still names the deleted ReplicaSet as its owner", pod.Name)
				}
			}
		}
		return nil
	})
}

// A resize changes a pod's spec, so a frozen ReplicaSet's pod is not
// resized; unfrozen, a person's resize is a new origin.
func TestShapesResize(t *testing.T) {
	ctx := context.Background()
	ns := namespaceWithMode(t, "shp-resize", "enforce")
	rs := readyDeployment(t, ns, 1)
	pods := podsOf(t, ns, rs)
	if len(pods) != 1 {
		t.Fatalf("%d pods of ReplicaSet %s, want 1", len(pods), rs)
	}
	pod := pods[0].Name
	bob := intentPerson(t, "bob")
	resize := func() error {
		return bob.CoreV1().RESTClient().Patch(types.StrategicMergePatchType).Namespace(ns).Resource("pods").Name(pod).SubResource("resize").
			Body([]byte(`{"spec":{"containers":[{"name":"app"}]}}`)).Do(ctx).Error()
	}
	_, err := directClient(t).AppsV1().ReplicaSets(ns).Patch(ctx, rs, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+intentAnnFreeze+`":"true"}}}`), metav1.PatchOptions{})
	mustf(t, err, "freezing ReplicaSet %s", rs)
	waitRefused(t, "a resize of a frozen ReplicaSet's pod is refused", resize)

	mark := wgMark(t)
	s := wgStatus(t, resize(), 403, "bob resizes a pod of the frozen ReplicaSet")
	if !strings.Contains(s.Message, "v1 Pod "+ns+"/"+pod) || !strings.Contains(s.Message, intentAnnFreeze) {
		t.Errorf("the refusal does not name the pod and the freeze: %s", s.Message)
	}
	d := wgDecisionBy(t, mark, "bob", "pods", ns, pod)
	wgExpectDecision(t, d, "Deny", "Frozen")
	wgExpectField(t, d, "subresource", "resize")

	_, err = directClient(t).AppsV1().ReplicaSets(ns).Patch(ctx, rs, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+intentAnnFreeze+`":null}}}`), metav1.PatchOptions{})
	mustf(t, err, "lifting the freeze")
	// The test's nodes have no kubelet to say they support resizing, so
	// kube-apiserver refuses it itself: what matters is that it got it.
	eventually(t, 30*time.Second, "bob's resize after the freeze is lifted reaches kube-apiserver", func() error {
		if err := resize(); err != nil && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "resize")) {
			return err
		}
		return nil
	})
	eventually(t, 15*time.Second, "an Allow/NewOrigin line for bob's resize", func() error {
		if countDecisions(wgDecisionsAfter(t, mark, "pods", ns, pod), "bob", "Allow", "NewOrigin") == 0 {
			return fmt.Errorf("none yet: %s", intentDescribe(wgDecisionsAfter(t, mark, "pods", ns, pod)))
		}
		return nil
	})
}

var (
	sprocketOnce sync.Once
	sprocketErr  error
)

// sprocketFamily is a Widget family whose controller has created Sprocket
// "s" (size 2, and a spec.replicas of 7 that means something else).
func sprocketFamily(t *testing.T, prefix string) *wgFamily {
	t.Helper()
	f := newWGFamily(t, prefix, "enforce")
	sprocketOnce.Do(func() {
		sprocketErr = framework.InstallCRDs(context.Background(), cluster.Direct(), framework.SprocketCRD())
	})
	mustf(t, sprocketErr, "installing the Sprocket CRD")
	s := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": wgAPIVersion, "kind": "Sprocket",
		"metadata": map[string]any{"name": "s", "namespace": f.ns},
		"spec":     map[string]any{"size": int64(2), "replicas": int64(7)},
	}}
	s.SetOwnerReferences([]metav1.OwnerReference{f.ownerRef()})
	_, err := f.ctrl.dyn.Resource(framework.SprocketGVR).Namespace(f.ns).Create(context.Background(), s, metav1.CreateOptions{FieldManager: wgManager})
	mustf(t, err, "the controller creates Sprocket s")
	f.initialize()
	return f
}

// scaleSprocket writes the Scale of Sprocket s as a.
func scaleSprocket(f *wgFamily, a *wgActor, replicas int64, dryRun bool) error {
	scale := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "autoscaling/v1", "kind": "Scale",
		"metadata": map[string]any{"name": "s", "namespace": f.ns},
		"spec":     map[string]any{"replicas": replicas},
	}}
	opts := metav1.UpdateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	_, err := a.dyn.Resource(framework.SprocketGVR).Namespace(f.ns).Update(context.Background(), scale, opts, "scale")
	return err
}

func sprocket(t *testing.T, f *wgFamily) *unstructured.Unstructured {
	t.Helper()
	s, err := f.admin.Resource(framework.SprocketGVR).Namespace(f.ns).Get(context.Background(), "s", metav1.GetOptions{})
	mustf(t, err, "get Sprocket s")
	return s
}

// A custom resource's /scale is decided on its CRD's specReplicasPath
// (spec.size), not on spec.replicas.
func TestShapesCustomResourceScale(t *testing.T) {
	f := sprocketFamily(t, "shp-crscale")
	freeze := "true"
	f.annotateWidget(map[string]*string{wgAnnFreeze: &freeze})
	waitRefused(t, "a dry-run scale of the frozen Widget's Sprocket is refused", func() error { return scaleSprocket(f, f.alice, 3, true) })

	// Its size as it is: no desired change, so even a freeze lets it by.
	mark := wgMark(t)
	mustf(t, scaleSprocket(f, f.alice, 2, false), "alice scales Sprocket s to the size it has")
	wgExpectDecision(t, wgDecision(t, mark, "sprockets", f.ns, "s"), "Allow", "NoDesiredChange")

	mark = wgMark(t)
	s := wgStatus(t, scaleSprocket(f, f.alice, 3, false), 403, "alice scales Sprocket s of the frozen Widget")
	c, ok := wgCause(s, "KausalityChangedField")
	if !ok || c.Field != "spec.size" || c.Message != "2 → 3" {
		t.Errorf("changed-field cause %+v, want spec.size 2 → 3; causes %+v", c, s.Details.Causes)
	}
	d := wgDecision(t, mark, "sprockets", f.ns, "s")
	wgExpectDecision(t, d, "Deny", "Frozen")
	if paths, _ := d["changedPaths"].([]any); len(paths) != 1 || paths[0] != "spec.size" {
		t.Errorf("changedPaths %v, want [spec.size]", d["changedPaths"])
	}
	if size, _, _ := unstructured.NestedInt64(sprocket(t, f).Object, "spec", "size"); size != 2 {
		t.Fatalf("Sprocket size %d after a refused scale", size)
	}
}

// A /scale write leaves its trace on the scaled object, as a spec write
// would: on a Deployment (no parent: a new trace starts) and on a custom
// resource under a parent (a person's scale: a new origin).
func TestShapesScaleTrace(t *testing.T) {
	t.Run("Deployment", func(t *testing.T) {
		ctx := context.Background()
		ns := namespaceWithMode(t, "shp-trace", "enforce")
		alice := intentPerson(t, "alice")
		_, err := alice.AppsV1().Deployments(ns).Create(ctx, testDeployment("web", 0), metav1.CreateOptions{})
		mustf(t, err, "alice creates Deployment web")
		bob := intentPerson(t, "bob")
		eventually(t, 30*time.Second, "bob scales Deployment web", func() error {
			scale, err := bob.AppsV1().Deployments(ns).GetScale(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			scale.Spec.Replicas = 1
			_, err = bob.AppsV1().Deployments(ns).UpdateScale(ctx, "web", scale, metav1.UpdateOptions{})
			return err
		})
		eventually(t, 30*time.Second, "Deployment web carries bob's scale as its trace", func() error {
			d, err := directClient(t).AppsV1().Deployments(ns).Get(ctx, "web", metav1.GetOptions{})
			if err != nil {
				return err
			}
			hops := traceOf(t, d)
			if len(hops) != 1 || hops[0].Kind != "Deployment" || hops[0].Name != "web" || hops[0].User != "bob" {
				return fmt.Errorf("trace %+v (replicas %d)", hops, *d.Spec.Replicas)
			}
			if *d.Spec.Replicas != 1 {
				return fmt.Errorf("replicas %d", *d.Spec.Replicas)
			}
			return nil
		})
	})

	t.Run("custom resource", func(t *testing.T) {
		f := sprocketFamily(t, "shp-crtrace")
		before := sprocket(t, f)
		mustf(t, scaleSprocket(f, f.alice, 4, false), "alice scales Sprocket s")
		eventually(t, 30*time.Second, "Sprocket s carries alice's scale as its trace", func() error {
			s := sprocket(t, f)
			raw := s.GetAnnotations()[wgAnnTrace]
			var hops []hop
			if err := json.Unmarshal([]byte(raw), &hops); err != nil {
				return fmt.Errorf("trace %q: %v", raw, err)
			}
			if len(hops) != 1 || hops[0].Kind != "Sprocket" || hops[0].User != "alice" || hops[0].Generation != before.GetGeneration()+1 {
				return fmt.Errorf("trace %+v, want alice's scale at generation %d", hops, before.GetGeneration()+1)
			}
			if size, _, _ := unstructured.NestedInt64(s.Object, "spec", "size"); size != 4 {
				return fmt.Errorf("size %d", size)
			}
			return nil
		})
	})
}
