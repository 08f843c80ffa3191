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

// newInitializedGadgetFamily is a family whose controller created Gadget g
// (value a) before the Widget reported itself initialized.
func newInitializedGadgetFamily(t *testing.T, prefix, mode string) *wgFamily {
	t.Helper()
	f := newWGFamily(t, prefix, mode)
	_, err := f.createGadget("g", "a", false)
	mustf(t, err, "create Gadget")
	f.initialize()
	return f
}

// newOnceApprovedGadget is a settled Widget in enforce mode with Gadget g
// (value a) and a once approval for one drift of g at generation 1.
func newOnceApprovedGadget(t *testing.T, prefix string) *wgFamily {
	t.Helper()
	f := newInitializedGadgetFamily(t, prefix, "enforce")
	approval := fmt.Sprintf(`[{"apiVersion":%q,"kind":"Gadget","name":"g","generation":1,"mode":"once"}]`, wgAPIVersion)
	f.annotateWidget(map[string]*string{wgAnnApprovals: &approval})
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
	return wgDecisionBy(t, mark, "", resource, ns, name)
}

// wgDecisionBy is the first decision after mark on the object for a write by
// user (any user when empty). Naming the user matters for objects that
// kube-controller-manager also writes: its status and metadata updates of a
// ReplicaSet may be decided between the mark and the test's own write.
func wgDecisionBy(t *testing.T, mark int, user, resource, ns, name string) framework.DecisionLine {
	t.Helper()
	var d framework.DecisionLine
	eventually(t, 15*time.Second, fmt.Sprintf("a decision line for %s %s/%s by %q", resource, ns, name, user), func() error {
		for _, line := range wgDecisionsAfter(t, mark, resource, ns, name) {
			if user == "" || line.Str("user") == user {
				d = line
				return nil
			}
		}
		return errors.New("none yet")
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
