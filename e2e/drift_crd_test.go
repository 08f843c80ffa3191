package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// The scripted controller of the Widget/Gadget scenarios: a service account
// that talks to the proxy and passes a fixed field manager on every write.
const (
	wgManager        = "widget-controller"
	wgControllerNS   = "kausality-e2e-controllers"
	wgControllerSA   = "widget-controller"
	wgControllerUser = "system:serviceaccount:" + wgControllerNS + ":" + wgControllerSA
	wgAPIVersion     = framework.TestGroup + "/" + framework.TestVersion

	wgAnnTrace      = "kausality.io/trace"
	wgAnnPhase      = "kausality.io/phase"
	wgAnnMode       = "kausality.io/mode"
	wgAnnApprovals  = "kausality.io/approvals"
	wgAnnRejections = "kausality.io/rejections"
	wgAnnFreeze     = "kausality.io/freeze"
	wgAnnSnooze     = "kausality.io/snooze-until"
)

var (
	wgSetupOnce sync.Once
	wgSetupErr  error
)

// wgSetup installs the Widget and Gadget CRDs and the controller's service
// account (cluster-admin) once for the package.
func wgSetup(t *testing.T) {
	t.Helper()
	wgSetupOnce.Do(func() {
		ctx := context.Background()
		if wgSetupErr = framework.InstallCRDs(ctx, cluster.Direct(), framework.WidgetCRD(), framework.GadgetCRD()); wgSetupErr != nil {
			return
		}
		admin, err := kubernetes.NewForConfig(cluster.Direct())
		if err != nil {
			wgSetupErr = err
			return
		}
		_, err = admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: wgControllerNS}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			wgSetupErr = err
			return
		}
		binding := &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: "kausality-e2e-widget-controller"},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: wgControllerNS, Name: wgControllerSA}},
		}
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			wgSetupErr = err
		}
	})
	if wgSetupErr != nil {
		t.Fatalf("setting up the Widget/Gadget CRDs and controller: %v", wgSetupErr)
	}
}

// wgWarnings records the Warning headers a client receives.
type wgWarnings struct {
	mu   sync.Mutex
	list []string
}

func (w *wgWarnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

// take returns the warnings received since the last take.
func (w *wgWarnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// wgActor is one identity talking to the proxy.
type wgActor struct {
	user     string
	cfg      *rest.Config
	dyn      dynamic.Interface
	kube     kubernetes.Interface
	warnings *wgWarnings
}

func wgNewActor(t *testing.T, cfg *rest.Config, user string) *wgActor {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 1000, 2000
	w := &wgWarnings{}
	cfg.WarningHandler = w
	dyn, err := dynamic.NewForConfig(cfg)
	mustf(t, err, "dynamic client for %s", user)
	kube, err := kubernetes.NewForConfig(cfg)
	mustf(t, err, "client for %s", user)
	return &wgActor{user: user, cfg: cfg, dyn: dyn, kube: kube, warnings: w}
}

func wgController(t *testing.T) *wgActor {
	t.Helper()
	cfg, err := cluster.ServiceAccountThroughProxy(context.Background(), wgControllerNS, wgControllerSA)
	mustf(t, err, "controller service account")
	// Writes without a fieldManager parameter (DELETE has none) get the
	// apiserver's default manager from the User-Agent: the same name.
	cfg.UserAgent = wgManager + "/v0.0.1 (e2e)"
	return wgNewActor(t, cfg, wgControllerUser)
}

func wgAlice(t *testing.T) *wgActor {
	t.Helper()
	cfg, err := cluster.UserThroughProxy("alice", "system:masters")
	mustf(t, err, "alice")
	return wgNewActor(t, cfg, "alice")
}

// wgNamespace creates a namespace directly, annotated with mode if set.
func wgNamespace(t *testing.T, prefix, mode string) string {
	t.Helper()
	name := prefix + "-" + utilrand.String(5)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if mode != "" {
		ns.Annotations = map[string]string{wgAnnMode: mode}
	}
	admin := directClient(t)
	_, err := admin.CoreV1().Namespaces().Create(context.Background(), ns, metav1.CreateOptions{})
	mustf(t, err, "namespace %s", name)
	t.Cleanup(func() { _ = admin.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	return name
}

// wgFamily is one Widget (parent, created by alice through the proxy) with
// its Gadgets and ConfigMaps (children, written by the scripted controller)
// in one namespace.
type wgFamily struct {
	t      *testing.T
	ns     string
	widget string
	uid    types.UID
	ctrl   *wgActor
	alice  *wgActor
	admin  dynamic.Interface
}

func newWGFamily(t *testing.T, prefix, mode string) *wgFamily {
	t.Helper()
	wgSetup(t)
	admin, err := dynamic.NewForConfig(cluster.Direct())
	mustf(t, err, "admin dynamic client")
	f := &wgFamily{
		t:      t,
		ns:     wgNamespace(t, prefix, mode),
		widget: prefix + "-" + utilrand.String(5),
		ctrl:   wgController(t),
		alice:  wgAlice(t),
		admin:  admin,
	}
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": wgAPIVersion,
		"kind":       "Widget",
		"metadata":   map[string]any{"name": f.widget},
		"spec":       map[string]any{"size": int64(1), "color": "blue"},
	}}
	created, err := f.alice.dyn.Resource(framework.WidgetGVR).Create(context.Background(), w, metav1.CreateOptions{})
	mustf(t, err, "alice creates Widget %s through the proxy", f.widget)
	f.uid = created.GetUID()
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = admin.Resource(framework.WidgetGVR).Patch(ctx, f.widget, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		_ = admin.Resource(framework.WidgetGVR).Delete(ctx, f.widget, metav1.DeleteOptions{})
	})
	return f
}

func (f *wgFamily) getWidget() *unstructured.Unstructured {
	f.t.Helper()
	w, err := f.admin.Resource(framework.WidgetGVR).Get(context.Background(), f.widget, metav1.GetOptions{})
	mustf(f.t, err, "get Widget %s", f.widget)
	return w
}

// setStatus is the controller's status write: observedGeneration = the
// current generation and the Ready condition.
func (f *wgFamily) setStatus(ready bool) int64 {
	f.t.Helper()
	ctx := context.Background()
	var gen int64
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		w, err := f.ctrl.dyn.Resource(framework.WidgetGVR).Get(ctx, f.widget, metav1.GetOptions{})
		if err != nil {
			return err
		}
		gen = w.GetGeneration()
		status := "False"
		if ready {
			status = "True"
		}
		w.Object["status"] = map[string]any{
			"observedGeneration": gen,
			"conditions": []any{map[string]any{
				"type": "Ready", "status": status, "reason": "Scripted",
				"lastTransitionTime": time.Now().UTC().Format(time.RFC3339),
			}},
		}
		_, err = f.ctrl.dyn.Resource(framework.WidgetGVR).UpdateStatus(ctx, w, metav1.UpdateOptions{FieldManager: wgManager})
		return err
	})
	mustf(f.t, err, "the controller writes the status of Widget %s (ready=%v)", f.widget, ready)
	return gen
}

// initialize writes Ready=True with observedGeneration and waits until the
// proxy has persisted the initialized phase on the Widget.
func (f *wgFamily) initialize() {
	f.t.Helper()
	f.setStatus(true)
	eventually(f.t, 30*time.Second, "the proxy persists kausality.io/phase: initialized on the Widget", func() error {
		if got := f.getWidget().GetAnnotations()[wgAnnPhase]; got != "initialized" {
			return fmt.Errorf("%s = %q", wgAnnPhase, got)
		}
		return nil
	})
}

// bumpSpec is alice changing the Widget's spec through the proxy; it
// returns the new generation.
func (f *wgFamily) bumpSpec() int64 {
	f.t.Helper()
	before := f.getWidget()
	size, _, _ := unstructured.NestedInt64(before.Object, "spec", "size")
	patch := fmt.Sprintf(`{"spec":{"size":%d}}`, size+1)
	after, err := f.alice.dyn.Resource(framework.WidgetGVR).Patch(context.Background(), f.widget, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	mustf(f.t, err, "alice changes the spec of Widget %s", f.widget)
	if after.GetGeneration() != before.GetGeneration()+1 {
		f.t.Fatalf("Widget generation %d → %d after a spec change", before.GetGeneration(), after.GetGeneration())
	}
	return after.GetGeneration()
}

// annotateWidget sets (or, for nil, removes) Widget annotations directly.
func (f *wgFamily) annotateWidget(kv map[string]*string) {
	f.t.Helper()
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": kv}})
	mustf(f.t, err, "annotation patch")
	_, err = f.admin.Resource(framework.WidgetGVR).Patch(context.Background(), f.widget, types.MergePatchType, data, metav1.PatchOptions{})
	mustf(f.t, err, "annotating Widget %s", f.widget)
}

func (f *wgFamily) ownerRef() metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion: wgAPIVersion, Kind: "Widget", Name: f.widget, UID: f.uid,
		Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
	}
}

func (f *wgFamily) gadgets(a *wgActor) dynamic.ResourceInterface {
	return a.dyn.Resource(framework.GadgetGVR).Namespace(f.ns)
}

// createGadget is the controller creating a Gadget it owns.
func (f *wgFamily) createGadget(name, value string, dryRun bool) (*unstructured.Unstructured, error) {
	g := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": wgAPIVersion,
		"kind":       "Gadget",
		"metadata":   map[string]any{"name": name, "namespace": f.ns},
		"spec":       map[string]any{"value": value},
	}}
	g.SetOwnerReferences([]metav1.OwnerReference{f.ownerRef()})
	opts := metav1.CreateOptions{FieldManager: wgManager}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return f.gadgets(f.ctrl).Create(context.Background(), g, opts)
}

// writeGadget is a read-modify-update of a Gadget by actor a (the
// controller's field manager is passed for every actor).
func (f *wgFamily) writeGadget(a *wgActor, name string, dryRun bool, mutate func(*unstructured.Unstructured)) (*unstructured.Unstructured, error) {
	ctx := context.Background()
	g, err := f.gadgets(a).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	mutate(g)
	opts := metav1.UpdateOptions{FieldManager: wgManager}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return f.gadgets(a).Update(ctx, g, opts)
}

// setValue is the controller writing spec.value of a Gadget.
func (f *wgFamily) setValue(name, value string, dryRun bool) (*unstructured.Unstructured, error) {
	return f.writeGadget(f.ctrl, name, dryRun, func(g *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(g.Object, value, "spec", "value")
	})
}

func (f *wgFamily) gadgetValue(name string) string {
	f.t.Helper()
	g, err := f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Get(context.Background(), name, metav1.GetOptions{})
	mustf(f.t, err, "get Gadget %s", name)
	v, _, _ := unstructured.NestedString(g.Object, "spec", "value")
	return v
}

// settle waits until a dry-run probe of the controller gets the decision
// want ("Result/Category"). The proxy reads parents from an informer cache
// that may be a beat behind a parent change the test just made; a dry-run
// has no side effects, so probing with it until the proxy's view has caught
// up keeps the real write that follows deterministic.
func (f *wgFamily) settle(want string, probe func() error) {
	f.t.Helper()
	eventually(f.t, 30*time.Second, "the proxy decides "+want+" for a dry-run probe", func() error {
		f.ctrl.warnings.take()
		err := probe()
		if got := wgCategory(err, f.ctrl.warnings.take()); got != want {
			return fmt.Errorf("got %s", got)
		}
		return nil
	})
}

// settleGadget probes with a dry-run spec.value write to a Gadget.
func (f *wgFamily) settleGadget(name, want string) {
	f.t.Helper()
	f.settle(want, func() error {
		_, err := f.setValue(name, "probe-"+utilrand.String(6), true)
		return err
	})
}

var wgDryRunWarning = regexp.MustCompile(`^kausality dry-run: (\w+) \((\w+)\)`)

// wgCategory turns the outcome of a dry-run write into "Result/Category":
// from the dry-run Warning when allowed, from the Status causes when denied.
func wgCategory(err error, warnings []string) string {
	if err == nil {
		for _, w := range warnings {
			if m := wgDryRunWarning.FindStringSubmatch(w); m != nil {
				return m[1] + "/" + m[2]
			}
		}
		return fmt.Sprintf("Allow/<no dry-run warning in %q>", warnings)
	}
	var st apierrors.APIStatus
	if errors.As(err, &st) && st.Status().Code == 403 && st.Status().Details != nil {
		for _, c := range st.Status().Details.Causes {
			switch c.Type {
			case "KausalityFrozen":
				return "Deny/Frozen"
			case "KausalityRejected":
				return "Deny/DriftRejected"
			case "KausalityUnapproved":
				return "Deny/DriftUnapproved"
			}
		}
	}
	return "error: " + err.Error()
}

// wgStatus returns the Status of a failed write, failing the test when the
// write did not fail with code.
func wgStatus(t *testing.T, err error, code int32, what string) metav1.Status {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: succeeded, want %d", what, code)
	}
	var st apierrors.APIStatus
	if !errors.As(err, &st) {
		t.Fatalf("%s: %v is not a Status error", what, err)
	}
	s := st.Status()
	if s.Code != code {
		t.Fatalf("%s: got %d (%s): %s, want %d", what, s.Code, s.Reason, s.Message, code)
	}
	return s
}

// wgDenied checks a drift denial: 403 Forbidden, the message names the
// parent, the child and the annotation that unblocks it, and details.causes
// carry the same.
func wgDenied(t *testing.T, err error, f *wgFamily, kind, child, annotation string) metav1.Status {
	t.Helper()
	s := wgStatus(t, err, 403, "a denied write")
	if s.Reason != metav1.StatusReasonForbidden || s.Status != metav1.StatusFailure {
		t.Errorf("reason %q status %q, want Forbidden Failure", s.Reason, s.Status)
	}
	for _, want := range []string{
		wgAPIVersion + " Widget " + f.widget,
		kind + " " + f.ns + "/" + child,
		annotation,
	} {
		if !strings.Contains(s.Message, want) {
			t.Errorf("the denial message does not name %q: %s", want, s.Message)
		}
	}
	if s.Details == nil || len(s.Details.Causes) == 0 {
		t.Fatalf("the denial has no details.causes: %+v", s)
	}
	if s.Details.Name != child {
		t.Errorf("details.name %q, want %q", s.Details.Name, child)
	}
	var parent, childCause, unblock bool
	for _, c := range s.Details.Causes {
		switch c.Type {
		case "KausalityParent":
			parent = strings.Contains(c.Message, "Widget "+f.widget)
		case "KausalityChild":
			childCause = strings.Contains(c.Message, kind+" "+f.ns+"/"+child)
		case "KausalityUnblock":
			unblock = c.Field == "metadata.annotations["+annotation+"]"
		}
	}
	if !parent || !childCause || !unblock {
		t.Errorf("causes lack the parent (%v), the child (%v) or the unblocking annotation %s (%v): %+v", parent, childCause, annotation, unblock, s.Details.Causes)
	}
	return s
}

func wgCause(s metav1.Status, typ string) (metav1.StatusCause, bool) {
	if s.Details == nil {
		return metav1.StatusCause{}, false
	}
	for _, c := range s.Details.Causes {
		if string(c.Type) == typ {
			return c, true
		}
	}
	return metav1.StatusCause{}, false
}

// wgExpectHop compares the identifying fields of a hop (generation < 0 is
// not compared).
func wgExpectHop(t *testing.T, h hop, kind, name string, generation int64, user string) {
	t.Helper()
	ok := h.Kind == kind && h.Name == name && h.User == user && (generation < 0 || h.Generation == generation) && h.Timestamp != ""
	if kind == "Widget" || kind == "Gadget" {
		ok = ok && h.APIVersion == wgAPIVersion
	}
	if !ok {
		t.Errorf("hop %+v, want %s %s generation %d by %s", h, kind, name, generation, user)
	}
}

// wgMark is the number of decision lines so far.
func wgMark(t *testing.T) int {
	t.Helper()
	lines, err := cluster.Decisions()
	mustf(t, err, "reading decisions")
	return len(lines)
}

// wgDecisionsAfter returns the decision lines about one object (dry-runs
// excluded) logged after mark.
func wgDecisionsAfter(t *testing.T, mark int, resource, ns, name string) []framework.DecisionLine {
	t.Helper()
	lines, err := cluster.Decisions()
	mustf(t, err, "reading decisions")
	var out []framework.DecisionLine
	for _, d := range lines[min(mark, len(lines)):] {
		if d.Str("resource") == resource && d.Str("namespace") == ns && d.Str("name") == name && !d.Bool("dryRun") {
			out = append(out, d)
		}
	}
	return out
}

// wgDecision waits for the decision line of the write just made (the first
// non-dry-run line about the object after mark). Lines of allowed writes
// are logged once the upstream answered, so they may trail the response.
func wgDecision(t *testing.T, mark int, resource, ns, name string) framework.DecisionLine {
	t.Helper()
	var d framework.DecisionLine
	eventually(t, 15*time.Second, fmt.Sprintf("a decision line for %s %s/%s", resource, ns, name), func() error {
		lines := wgDecisionsAfter(t, mark, resource, ns, name)
		if len(lines) == 0 {
			return errors.New("none yet")
		}
		d = lines[0]
		return nil
	})
	return d
}

func wgExpectDecision(t *testing.T, d framework.DecisionLine, decision, category string) {
	t.Helper()
	if d.Str("decision") != decision || d.Str("category") != category {
		t.Errorf("decision %s/%s (reason %q), want %s/%s; line %v", d.Str("decision"), d.Str("category"), d.Str("reason"), decision, category, d)
	}
}

func wgExpectField(t *testing.T, d framework.DecisionLine, key string, want any) {
	t.Helper()
	got := d[key]
	if n, ok := got.(float64); ok {
		if w, ok := want.(int); ok && n == float64(w) {
			return
		}
	}
	if got != want {
		t.Errorf("decision line %s = %v (%T), want %v; line %v", key, got, got, want, d)
	}
}

func wgApprovals(t *testing.T, v string) []map[string]any {
	t.Helper()
	if v == "" {
		return nil
	}
	var out []map[string]any
	if err := json.Unmarshal([]byte(v), &out); err != nil {
		t.Fatalf("approvals %q: %v", v, err)
	}
	return out
}

// wgSomeContainsAll reports whether one of list contains every sub.
func wgSomeContainsAll(list []string, sub ...string) bool {
	for _, s := range list {
		all := true
		for _, x := range sub {
			if !strings.Contains(s, x) {
				all = false
			}
		}
		if all {
			return true
		}
	}
	return false
}

// TestDriftCustomResources runs the drift semantics on a cluster-scoped
// custom resource parent (Widget) and a namespaced custom resource child
// (Gadget) with a scripted controller, so every decision is deterministic.
func TestDriftCustomResources(t *testing.T) {
	t.Run("initialization", func(t *testing.T) {
		f := newWGFamily(t, "wg-init", "enforce")

		mark := wgMark(t)
		_, err := f.createGadget("g", "v1", false)
		mustf(t, err, "the controller creates a Gadget while its Widget initializes")
		d := wgDecision(t, mark, "gadgets", f.ns, "g")
		wgExpectDecision(t, d, "Allow", "ParentInitializing")
		wgExpectField(t, d, "lifecyclePhase", "Initializing")

		mark = wgMark(t)
		_, err = f.setValue("g", "v2", false)
		mustf(t, err, "the controller changes the Gadget while its Widget initializes")
		wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Allow", "ParentInitializing")
		if w := f.getWidget(); w.GetAnnotations()[wgAnnPhase] != "" {
			t.Fatalf("phase persisted before the Widget was ready: %q", w.GetAnnotations()[wgAnnPhase])
		}

		mark = wgMark(t)
		f.initialize()
		d = wgDecision(t, mark, "widgets", "", f.widget)
		wgExpectDecision(t, d, "Allow", "StatusWrite")
		wgExpectField(t, d, "subresource", "status")

		// The proxy wrote the phase itself, after the status write, as its
		// own field manager.
		owner := ""
		for _, mf := range f.getWidget().GetManagedFields() {
			if mf.FieldsV1 != nil && strings.Contains(string(mf.FieldsV1.Raw), `"f:kausality.io/phase"`) {
				owner = mf.Manager
			}
		}
		if owner != "kausality-proxy" {
			t.Errorf("kausality.io/phase is owned by %q, want the proxy's field manager kausality-proxy", owner)
		}

		// Ready flaps to False: the high-water mark keeps it initialized.
		f.setStatus(false)
		if got := f.getWidget().GetAnnotations()[wgAnnPhase]; got != "initialized" {
			t.Fatalf("%s = %q after Ready=False", wgAnnPhase, got)
		}
		f.settleGadget("g", "Deny/DriftUnapproved")
		mark = wgMark(t)
		_, err = f.setValue("g", "v3", false)
		wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
		d = wgDecision(t, mark, "gadgets", f.ns, "g")
		wgExpectDecision(t, d, "Deny", "DriftUnapproved")
		wgExpectField(t, d, "lifecyclePhase", "Initialized")
		if v := f.gadgetValue("g"); v != "v2" {
			t.Fatalf("the denied write changed the Gadget: %q", v)
		}
		if got := f.getWidget().GetAnnotations()[wgAnnPhase]; got != "initialized" {
			t.Fatalf("%s = %q at the end", wgAnnPhase, got)
		}
	})

	t.Run("expected then drift", func(t *testing.T) {
		f := newWGFamily(t, "wg-exp", "enforce")
		f.initialize()
		gen := f.bumpSpec()

		mark := wgMark(t)
		g, err := f.createGadget("g", "a", false)
		mustf(t, err, "the controller creates a Gadget for the changed Widget (expected)")
		d := wgDecision(t, mark, "gadgets", f.ns, "g")
		wgExpectDecision(t, d, "Allow", "Expected")
		wgExpectField(t, d, "isController", true)
		wgExpectField(t, d, "controllerMethod", "managedFields")
		wgExpectField(t, d, "parentGeneration", int(gen))
		wgExpectField(t, d, "parentObservedGeneration", int(gen-1))
		hops := traceOf(t, g)
		if len(hops) != 2 {
			t.Fatalf("the created Gadget's trace has %d hops, want 2: %+v", len(hops), hops)
		}
		wgExpectHop(t, hops[0], "Widget", f.widget, gen, "alice")
		wgExpectHop(t, hops[1], "Gadget", "g", 1, wgControllerUser)

		// An expected update: the trace is replaced, two hops again.
		mark = wgMark(t)
		g, err = f.setValue("g", "b", false)
		mustf(t, err, "the controller updates the Gadget while the Widget reconciles")
		wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Allow", "Expected")
		hops = traceOf(t, g)
		if len(hops) != 2 {
			t.Fatalf("the updated Gadget's trace has %d hops, want 2: %+v", len(hops), hops)
		}
		wgExpectHop(t, hops[0], "Widget", f.widget, gen, "alice")
		wgExpectHop(t, hops[1], "Gadget", "g", g.GetGeneration(), wgControllerUser)

		// The controller catches up: the next change is drift.
		f.setStatus(true)
		f.settleGadget("g", "Deny/DriftUnapproved")
		mark = wgMark(t)
		_, err = f.setValue("g", "drifted", false)
		s := wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
		if !strings.Contains(s.Message, "spec.value") || !strings.Contains(s.Message, `"b"`) || !strings.Contains(s.Message, `"drifted"`) {
			t.Errorf("the denial does not show spec.value \"b\" → \"drifted\": %s", s.Message)
		}
		if c, ok := wgCause(s, "KausalityChangedField"); !ok || c.Field != "spec.value" {
			t.Errorf("no changed-field cause for spec.value: %+v", s.Details.Causes)
		}
		if c, ok := wgCause(s, "KausalityController"); !ok || !strings.Contains(c.Message, wgManager) {
			t.Errorf("no controller cause naming %s: %+v", wgManager, s.Details.Causes)
		}
		c, _ := wgCause(s, "KausalityUnblock")
		sugg := wgApprovals(t, c.Message)
		if len(sugg) != 1 || sugg[0]["kind"] != "Gadget" || sugg[0]["name"] != "g" || sugg[0]["apiVersion"] != wgAPIVersion ||
			sugg[0]["generation"] != float64(gen) || sugg[0]["mode"] != "once" {
			t.Errorf("the suggested approval %q is not a once approval of Gadget g at generation %d", c.Message, gen)
		}
		d = wgDecision(t, mark, "gadgets", f.ns, "g")
		wgExpectDecision(t, d, "Deny", "DriftUnapproved")
		wgExpectField(t, d, "mode", "enforce")
		wgExpectField(t, d, "modeSource", "namespace")
		wgExpectField(t, d, "drift", true)
		wgExpectField(t, d, "snoozed", false)
		if v := f.gadgetValue("g"); v != "b" {
			t.Fatalf("the denied write changed the Gadget: %q", v)
		}
	})

	t.Run("log mode", func(t *testing.T) {
		f := newWGFamily(t, "wg-log", "log")
		_, err := f.createGadget("g", "a", false)
		mustf(t, err, "create Gadget")
		f.initialize()
		f.settleGadget("g", "Allow/DriftUnapproved")

		f.ctrl.warnings.take()
		mark := wgMark(t)
		g, err := f.setValue("g", "drifted", false)
		mustf(t, err, "a drift write in log mode must go through")
		warnings := f.ctrl.warnings.take()
		if !wgSomeContainsAll(warnings, "drift", "Gadget "+f.ns+"/g", "Widget "+f.widget, wgAnnApprovals) {
			t.Errorf("no Warning naming the drift of Gadget %s/g under Widget %s: %q", f.ns, f.widget, warnings)
		}
		d := wgDecision(t, mark, "gadgets", f.ns, "g")
		wgExpectDecision(t, d, "Allow", "DriftUnapproved")
		wgExpectField(t, d, "mode", "log")
		wgExpectField(t, d, "modeSource", "namespace")
		if v := f.gadgetValue("g"); v != "drifted" {
			t.Fatalf("the Gadget has %q", v)
		}
		// Unapproved drift starts a new causal chain at the child.
		hops := traceOf(t, g)
		if len(hops) != 1 {
			t.Fatalf("trace after drift in log mode: %+v, want one origin hop", hops)
		}
		wgExpectHop(t, hops[0], "Gadget", "g", g.GetGeneration(), wgControllerUser)
	})

	t.Run("approvals", func(t *testing.T) {
		t.Run("once", func(t *testing.T) {
			f := newWGFamily(t, "wg-once", "enforce")
			_, err := f.createGadget("g", "a", false)
			mustf(t, err, "create Gadget")
			f.initialize()
			f.settleGadget("g", "Deny/DriftUnapproved")
			_, err = f.setValue("g", "b", false)
			s := wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
			// Do what the denial says.
			c, _ := wgCause(s, "KausalityUnblock")
			f.annotateWidget(map[string]*string{wgAnnApprovals: &c.Message})

			mark := wgMark(t)
			g, err := f.setValue("g", "b", false)
			mustf(t, err, "the write the once approval allows")
			d := wgDecision(t, mark, "gadgets", f.ns, "g")
			wgExpectDecision(t, d, "Allow", "DriftApproved")
			wgExpectField(t, d, "approvalMode", "once")
			wgExpectField(t, d, "approval", "Gadget/g")
			if v, ok := f.getWidget().GetAnnotations()[wgAnnApprovals]; ok {
				t.Errorf("the once approval was not removed from the Widget: %q", v)
			}
			hops := traceOf(t, g)
			if len(hops) != 2 {
				t.Fatalf("trace after approved drift: %+v, want the Widget's hop then the Gadget's", hops)
			}
			wgExpectHop(t, hops[0], "Widget", f.widget, 1, "alice")
			wgExpectHop(t, hops[1], "Gadget", "g", g.GetGeneration(), wgControllerUser)

			mark = wgMark(t)
			_, err = f.setValue("g", "c", false)
			wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
			wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Deny", "DriftUnapproved")
			if v := f.gadgetValue("g"); v != "b" {
				t.Fatalf("the Gadget has %q, want b", v)
			}
		})

		t.Run("once is never taken for a write the upstream refuses", func(t *testing.T) {
			f := newWGFamily(t, "wg-restore", "enforce")
			_, err := f.createGadget("g", "a", false)
			mustf(t, err, "create Gadget")
			f.initialize()
			approval := fmt.Sprintf(`[{"apiVersion":%q,"kind":"Gadget","name":"g","generation":1,"mode":"once"}]`, wgAPIVersion)
			f.annotateWidget(map[string]*string{wgAnnApprovals: &approval})
			f.settleGadget("g", "Allow/DriftApproved")

			// The controller writes from a stale read: kube-apiserver
			// refuses it with 409. The proxy learns that from a dry run
			// before it touches the approval, so the parent is not written
			// at all: its resourceVersion does not move.
			stale, err := f.gadgets(f.ctrl).Get(context.Background(), "g", metav1.GetOptions{})
			mustf(t, err, "get")
			_, err = f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Patch(context.Background(), "g", types.MergePatchType,
				[]byte(`{"metadata":{"labels":{"touched":"yes"}}}`), metav1.PatchOptions{})
			mustf(t, err, "moving the Gadget's resourceVersion on")
			_ = unstructured.SetNestedField(stale.Object, "b", "spec", "value")
			widgetRV := f.getWidget().GetResourceVersion()
			mark := wgMark(t)
			_, err = f.gadgets(f.ctrl).Update(context.Background(), stale, metav1.UpdateOptions{FieldManager: wgManager})
			if !apierrors.IsConflict(err) {
				t.Fatalf("the stale update: %v, want kube-apiserver's 409", err)
			}
			d := wgDecision(t, mark, "gadgets", f.ns, "g")
			wgExpectDecision(t, d, "Allow", "DriftApproved")
			wgExpectField(t, d, "outcome", "dry-run-refused")
			widget := f.getWidget()
			if widget.GetResourceVersion() != widgetRV {
				t.Errorf("the Widget was written for a refused write: resourceVersion %s, was %s", widget.GetResourceVersion(), widgetRV)
			}
			got := wgApprovals(t, widget.GetAnnotations()[wgAnnApprovals])
			if len(got) != 1 || got[0]["name"] != "g" || got[0]["mode"] != "once" || got[0]["generation"] != float64(1) {
				t.Fatalf("approvals %v", got)
			}

			// And the next write can use it.
			mark = wgMark(t)
			_, err = f.setValue("g", "c", false)
			mustf(t, err, "the write with the restored approval")
			wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Allow", "DriftApproved")
			if v, ok := f.getWidget().GetAnnotations()[wgAnnApprovals]; ok {
				t.Errorf("the once approval is still there: %q", v)
			}
			if v := f.gadgetValue("g"); v != "c" {
				t.Fatalf("Gadget value %q", v)
			}
		})

		t.Run("generation", func(t *testing.T) {
			f := newWGFamily(t, "wg-gen", "enforce")
			_, err := f.createGadget("g", "a", false)
			mustf(t, err, "create Gadget")
			f.initialize()
			approval := fmt.Sprintf(`[{"apiVersion":%q,"kind":"Gadget","name":"g","generation":1,"mode":"generation"}]`, wgAPIVersion)
			f.annotateWidget(map[string]*string{wgAnnApprovals: &approval})
			f.settleGadget("g", "Allow/DriftApproved")
			for _, v := range []string{"b", "c"} {
				mark := wgMark(t)
				_, err := f.setValue("g", v, false)
				mustf(t, err, "drift write %s under a generation approval", v)
				d := wgDecision(t, mark, "gadgets", f.ns, "g")
				wgExpectDecision(t, d, "Allow", "DriftApproved")
				wgExpectField(t, d, "approvalMode", "generation")
				if got := f.getWidget().GetAnnotations()[wgAnnApprovals]; got != approval {
					t.Fatalf("the generation approval changed: %q", got)
				}
			}

			// The Widget moves on to generation 2 and the controller catches
			// up: the approval for generation 1 no longer applies.
			f.bumpSpec()
			f.setStatus(true)
			f.settleGadget("g", "Deny/DriftUnapproved")
			mark := wgMark(t)
			_, err = f.setValue("g", "d", false)
			s := wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
			if c, ok := wgCause(s, "KausalityUnapproved"); !ok || !strings.Contains(c.Message, "generation 2") {
				t.Errorf("the denial should say there is no approval at generation 2: %+v", s.Details.Causes)
			}
			wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Deny", "DriftUnapproved")

			// The next expected write prunes the stale approval; the dry-run
			// probes of that write do not.
			f.bumpSpec()
			f.settleGadget("g", "Allow/Expected")
			if got := f.getWidget().GetAnnotations()[wgAnnApprovals]; got != approval {
				t.Fatalf("a dry-run pruned the approvals: %q", got)
			}
			_, err = f.setValue("g", "e", false)
			mustf(t, err, "expected write")
			eventually(t, 15*time.Second, "the stale generation approval is pruned", func() error {
				if v, ok := f.getWidget().GetAnnotations()[wgAnnApprovals]; ok {
					return fmt.Errorf("approvals still %q", v)
				}
				return nil
			})
		})

		t.Run("always", func(t *testing.T) {
			f := newWGFamily(t, "wg-always", "enforce")
			_, err := f.createGadget("g", "a", false)
			mustf(t, err, "create Gadget")
			f.initialize()
			// A person adds the approval through the proxy: user annotations
			// stay editable.
			approval := fmt.Sprintf(`[{"apiVersion":%q,"kind":"Gadget","name":"g","mode":"always"}]`, wgAPIVersion)
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{wgAnnApprovals: approval}}})
			_, err = f.alice.dyn.Resource(framework.WidgetGVR).Patch(context.Background(), f.widget, types.MergePatchType, patch, metav1.PatchOptions{})
			mustf(t, err, "alice adds an always approval through the proxy")
			if got := f.getWidget().GetAnnotations()[wgAnnApprovals]; got != approval {
				t.Fatalf("the approval alice wrote is stored as %q", got)
			}
			f.settleGadget("g", "Allow/DriftApproved")
			write := func(v string) {
				t.Helper()
				mark := wgMark(t)
				_, err := f.setValue("g", v, false)
				mustf(t, err, "drift write %s under an always approval", v)
				d := wgDecision(t, mark, "gadgets", f.ns, "g")
				wgExpectDecision(t, d, "Allow", "DriftApproved")
				wgExpectField(t, d, "approvalMode", "always")
			}
			write("b")
			write("c")
			f.bumpSpec()
			f.setStatus(true)
			f.settleGadget("g", "Allow/DriftApproved")
			write("d")
			if got := f.getWidget().GetAnnotations()[wgAnnApprovals]; got != approval {
				t.Fatalf("the always approval changed: %q", got)
			}
			if v := f.gadgetValue("g"); v != "d" {
				t.Fatalf("Gadget value %q", v)
			}
		})

		t.Run("rejection wins over always", func(t *testing.T) {
			f := newWGFamily(t, "wg-reject", "enforce")
			_, err := f.createGadget("g", "a", false)
			mustf(t, err, "create Gadget")
			f.initialize()
			approval := fmt.Sprintf(`[{"apiVersion":%q,"kind":"Gadget","name":"g","mode":"always"}]`, wgAPIVersion)
			rejection := fmt.Sprintf(`[{"apiVersion":%q,"kind":"Gadget","name":"g","reason":"needs SRE review (ticket OPS-7)"}]`, wgAPIVersion)
			f.annotateWidget(map[string]*string{wgAnnApprovals: &approval, wgAnnRejections: &rejection})
			f.settleGadget("g", "Deny/DriftRejected")
			mark := wgMark(t)
			_, err = f.setValue("g", "b", false)
			s := wgDenied(t, err, f, "Gadget", "g", wgAnnRejections)
			if !strings.Contains(s.Message, "needs SRE review (ticket OPS-7)") {
				t.Errorf("the denial does not carry the rejection reason: %s", s.Message)
			}
			if c, ok := wgCause(s, "KausalityRejected"); !ok || c.Message != "needs SRE review (ticket OPS-7)" {
				t.Errorf("no rejection cause with the reason: %+v", s.Details.Causes)
			}
			d := wgDecision(t, mark, "gadgets", f.ns, "g")
			wgExpectDecision(t, d, "Deny", "DriftRejected")
			wgExpectField(t, d, "rejection", "Gadget/g")
			if v := f.gadgetValue("g"); v != "a" {
				t.Fatalf("Gadget value %q", v)
			}
		})
	})

	t.Run("freeze", func(t *testing.T) {
		for _, tc := range []struct {
			name, value string
			want        []string
		}{
			{name: "true", value: "true", want: []string{"is frozen"}},
			{name: "json", value: `{"user":"ops@example.com","reason":"incident 42"}`, want: []string{"is frozen by ops@example.com", "incident 42"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				f := newWGFamily(t, "wg-freeze", "enforce")
				_, err := f.createGadget("g", "a", false)
				mustf(t, err, "create Gadget")
				f.initialize()
				f.bumpSpec() // the controller's next write would be expected
				f.annotateWidget(map[string]*string{wgAnnFreeze: &tc.value})
				f.settleGadget("g", "Deny/Frozen")

				mark := wgMark(t)
				_, err = f.setValue("g", "b", false)
				s := wgDenied(t, err, f, "Gadget", "g", wgAnnFreeze)
				for _, want := range tc.want {
					if !strings.Contains(s.Message, want) {
						t.Errorf("the denial does not say %q: %s", want, s.Message)
					}
				}
				if _, ok := wgCause(s, "KausalityFrozen"); !ok {
					t.Errorf("no frozen cause: %+v", s.Details.Causes)
				}
				wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Deny", "Frozen")

				// Another actor is frozen out as well.
				_, err = f.writeGadget(f.alice, "g", false, func(g *unstructured.Unstructured) {
					_ = unstructured.SetNestedField(g.Object, "by-alice", "spec", "value")
				})
				wgStatus(t, err, 403, "alice writing under a frozen Widget")

				// Unfreezing lets the expected write through.
				f.annotateWidget(map[string]*string{wgAnnFreeze: nil})
				f.settleGadget("g", "Allow/Expected")
				_, err = f.setValue("g", "c", false)
				mustf(t, err, "expected write after unfreezing")
				if v := f.gadgetValue("g"); v != "c" {
					t.Fatalf("Gadget value %q", v)
				}
			})
		}
	})

	t.Run("snooze", func(t *testing.T) {
		f := newWGFamily(t, "wg-snooze", "enforce")
		_, err := f.createGadget("g", "a", false)
		mustf(t, err, "create Gadget")
		f.initialize()
		until := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
		f.annotateWidget(map[string]*string{wgAnnSnooze: &until})
		f.settleGadget("g", "Deny/DriftUnapproved")
		f.ctrl.warnings.take()
		mark := wgMark(t)
		_, err = f.setValue("g", "b", false)
		wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
		if w := f.ctrl.warnings.take(); len(w) != 0 {
			t.Errorf("a valid snooze produced warnings: %q", w)
		}
		d := wgDecision(t, mark, "gadgets", f.ns, "g")
		wgExpectDecision(t, d, "Deny", "DriftUnapproved")
		wgExpectField(t, d, "mode", "enforce")
		// Snooze suppresses notifications, not decisions; the line says so.
		wgExpectField(t, d, "snoozed", true)
		if v := f.gadgetValue("g"); v != "a" {
			t.Fatalf("Gadget value %q", v)
		}
	})

	t.Run("deletion cleanup", func(t *testing.T) {
		f := newWGFamily(t, "wg-del", "enforce")
		_, err := f.createGadget("g", "a", false)
		mustf(t, err, "create Gadget")
		f.initialize()
		_, err = f.admin.Resource(framework.WidgetGVR).Patch(context.Background(), f.widget, types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":["e2e.kausality.io/hold"]}}`), metav1.PatchOptions{})
		mustf(t, err, "adding a finalizer")
		err = f.alice.dyn.Resource(framework.WidgetGVR).Delete(context.Background(), f.widget, metav1.DeleteOptions{})
		mustf(t, err, "alice deletes the Widget through the proxy")
		if f.getWidget().GetDeletionTimestamp() == nil {
			t.Fatal("the Widget has no deletionTimestamp")
		}

		mark := wgMark(t)
		_, err = f.setValue("g", "cleanup", false)
		mustf(t, err, "the controller's cleanup write under a deleting Widget")
		d := wgDecision(t, mark, "gadgets", f.ns, "g")
		wgExpectDecision(t, d, "Allow", "ParentDeleting")
		wgExpectField(t, d, "lifecyclePhase", "Deleting")

		// Let the Widget go: the garbage collector (kube-controller-manager,
		// through the proxy) deletes the Gadget, also as ParentDeleting.
		mark = wgMark(t)
		_, err = f.admin.Resource(framework.WidgetGVR).Patch(context.Background(), f.widget, types.MergePatchType,
			[]byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		mustf(t, err, "removing the finalizer")
		eventually(t, 90*time.Second, "the garbage collector deletes the Gadget", func() error {
			_, err := f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Get(context.Background(), "g", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			return fmt.Errorf("Gadget still there (%v)", err)
		})
		d = wgDecision(t, mark, "gadgets", f.ns, "g")
		wgExpectDecision(t, d, "Allow", "ParentDeleting")
		wgExpectField(t, d, "operation", "DELETE")
		wgExpectField(t, d, "user", "system:serviceaccount:kube-system:generic-garbage-collector")
	})

	t.Run("once approval is used exactly once", func(t *testing.T) {
		const n = 8
		f := newWGFamily(t, "wg-race", "enforce")
		_, err := f.createGadget("g", "a", false)
		mustf(t, err, "create Gadget")
		f.initialize()
		approval := fmt.Sprintf(`[{"apiVersion":%q,"kind":"Gadget","name":"g","generation":1,"mode":"once"}]`, wgAPIVersion)
		f.annotateWidget(map[string]*string{wgAnnApprovals: &approval})
		// A dry-run sees the approval and does not use it up.
		f.settleGadget("g", "Allow/DriftApproved")
		if got := f.getWidget().GetAnnotations()[wgAnnApprovals]; got != approval {
			t.Fatalf("a dry-run changed the approvals: %q", got)
		}

		mark := wgMark(t)
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				patch := fmt.Sprintf(`{"spec":{"value":"burst-%d"}}`, i)
				_, errs[i] = f.gadgets(f.ctrl).Patch(context.Background(), "g", types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: wgManager})
			}()
		}
		close(start)
		wg.Wait()
		winner := -1
		for i, err := range errs {
			switch {
			case err == nil:
				if winner >= 0 {
					t.Errorf("writes %d and %d both succeeded on one once approval", winner, i)
				}
				winner = i
			case apierrors.IsForbidden(err), apierrors.IsConflict(err):
			default:
				t.Errorf("write %d: %v, want success, 403 or 409", i, err)
			}
		}
		if winner < 0 {
			t.Fatalf("no write used the once approval: %v", errs)
		}
		if v, ok := f.getWidget().GetAnnotations()[wgAnnApprovals]; ok {
			t.Errorf("the once approval is still on the Widget: %q", v)
		}
		if v := f.gadgetValue("g"); v != fmt.Sprintf("burst-%d", winner) {
			t.Errorf("Gadget value %q, want the winner's burst-%d", v, winner)
		}
		var lines []framework.DecisionLine
		eventually(t, 15*time.Second, "a decision line for each of the writes", func() error {
			lines = wgDecisionsAfter(t, mark, "gadgets", f.ns, "g")
			if len(lines) < n {
				return fmt.Errorf("%d lines", len(lines))
			}
			return nil
		})
		approved := 0
		for _, d := range lines {
			if d.Str("decision") == "Allow" {
				if d.Str("category") != "DriftApproved" {
					t.Errorf("allowed as %s: %v", d.Str("category"), d)
				}
				approved++
			}
		}
		if approved != 1 {
			t.Errorf("%d writes were allowed, want exactly 1", approved)
		}
	})

	t.Run("malformed annotations", func(t *testing.T) {
		f := newWGFamily(t, "wg-malformed", "enforce")
		_, err := f.createGadget("g", "a", false)
		mustf(t, err, "create Gadget")
		f.initialize()

		broken := `[{"apiVersion":"` + wgAPIVersion + `","kind":"Gadget","name":"g","mode":"always"`
		f.annotateWidget(map[string]*string{wgAnnApprovals: &broken})
		f.settleGadget("g", "Deny/DriftUnapproved")
		f.ctrl.warnings.take()
		mark := wgMark(t)
		_, err = f.setValue("g", "b", false)
		wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
		if w := f.ctrl.warnings.take(); !wgSomeContainsAll(w, wgAnnApprovals, "malformed") {
			t.Errorf("no Warning naming the malformed %s: %q", wgAnnApprovals, w)
		}
		wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Deny", "DriftUnapproved")

		// Broken rejections count as rejected, even with an always approval.
		approval := fmt.Sprintf(`[{"apiVersion":%q,"kind":"Gadget","name":"g","mode":"always"}]`, wgAPIVersion)
		brokenRej := `{"not":"a list"`
		f.annotateWidget(map[string]*string{wgAnnApprovals: &approval, wgAnnRejections: &brokenRej})
		f.settleGadget("g", "Deny/DriftRejected")
		f.ctrl.warnings.take()
		mark = wgMark(t)
		_, err = f.setValue("g", "c", false)
		s := wgDenied(t, err, f, "Gadget", "g", wgAnnRejections)
		if !strings.Contains(s.Message, "malformed") {
			t.Errorf("the denial does not say the rejections are malformed: %s", s.Message)
		}
		if w := f.ctrl.warnings.take(); !wgSomeContainsAll(w, wgAnnRejections, "malformed") {
			t.Errorf("no Warning naming the malformed %s: %q", wgAnnRejections, w)
		}
		wgExpectDecision(t, wgDecision(t, mark, "gadgets", f.ns, "g"), "Deny", "DriftRejected")

		// A broken freeze counts as frozen.
		brokenFreeze := "yes please"
		f.annotateWidget(map[string]*string{wgAnnRejections: nil, wgAnnFreeze: &brokenFreeze})
		f.settleGadget("g", "Deny/Frozen")
		f.ctrl.warnings.take()
		_, err = f.setValue("g", "d", false)
		wgDenied(t, err, f, "Gadget", "g", wgAnnFreeze)
		if w := f.ctrl.warnings.take(); !wgSomeContainsAll(w, wgAnnFreeze, "malformed") {
			t.Errorf("no Warning naming the malformed %s: %q", wgAnnFreeze, w)
		}
		if v := f.gadgetValue("g"); v != "a" {
			t.Fatalf("Gadget value %q", v)
		}
	})

	t.Run("mode comes from stored state", func(t *testing.T) {
		setLog := func(g *unstructured.Unstructured, v string) {
			ann := g.GetAnnotations()
			if ann == nil {
				ann = map[string]string{}
			}
			ann[wgAnnMode] = "log"
			g.SetAnnotations(ann)
			_ = unstructured.SetNestedField(g.Object, v, "spec", "value")
		}
		t.Run("namespace enforce", func(t *testing.T) {
			f := newWGFamily(t, "wg-mode-ns", "enforce")
			_, err := f.createGadget("g", "a", false)
			mustf(t, err, "create Gadget")
			f.initialize()
			f.settleGadget("g", "Deny/DriftUnapproved")
			mark := wgMark(t)
			_, err = f.writeGadget(f.ctrl, "g", false, func(g *unstructured.Unstructured) { setLog(g, "b") })
			wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
			d := wgDecision(t, mark, "gadgets", f.ns, "g")
			wgExpectDecision(t, d, "Deny", "DriftUnapproved")
			wgExpectField(t, d, "mode", "enforce")
			wgExpectField(t, d, "modeSource", "namespace")
			g, err := f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Get(context.Background(), "g", metav1.GetOptions{})
			mustf(t, err, "get Gadget")
			if _, ok := g.GetAnnotations()[wgAnnMode]; ok {
				t.Errorf("the denied write stored its mode annotation")
			}
		})
		t.Run("object enforce in a log namespace", func(t *testing.T) {
			f := newWGFamily(t, "wg-mode-obj", "log")
			_, err := f.createGadget("g", "a", false)
			mustf(t, err, "create Gadget")
			_, err = f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Patch(context.Background(), "g", types.MergePatchType,
				[]byte(`{"metadata":{"annotations":{"kausality.io/mode":"enforce"}}}`), metav1.PatchOptions{})
			mustf(t, err, "annotating the Gadget with mode enforce")
			f.initialize()
			f.settleGadget("g", "Deny/DriftUnapproved")
			mark := wgMark(t)
			_, err = f.writeGadget(f.ctrl, "g", false, func(g *unstructured.Unstructured) { setLog(g, "b") })
			wgDenied(t, err, f, "Gadget", "g", wgAnnApprovals)
			d := wgDecision(t, mark, "gadgets", f.ns, "g")
			wgExpectDecision(t, d, "Deny", "DriftUnapproved")
			wgExpectField(t, d, "mode", "enforce")
			wgExpectField(t, d, "modeSource", "object")
			if v := f.gadgetValue("g"); v != "a" {
				t.Fatalf("Gadget value %q", v)
			}
		})
	})
}
