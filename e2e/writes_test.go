package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	sigsyaml "sigs.k8s.io/yaml"
)

const wrProtobuf = "application/vnd.kubernetes.protobuf"

// wrContentTypes records the Content-Type of every request a client sends.
type wrContentTypes struct {
	mu   sync.Mutex
	seen []string
}

func (c *wrContentTypes) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := c.seen
	c.seen = nil
	return out
}

type wrRecordingTransport struct {
	rt  http.RoundTripper
	rec *wrContentTypes
}

func (r wrRecordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method != http.MethodGet {
		r.rec.mu.Lock()
		r.rec.seen = append(r.rec.seen, req.Method+" "+req.Header.Get("Content-Type"))
		r.rec.mu.Unlock()
	}
	return r.rt.RoundTrip(req)
}

// wrClient is the controller's identity with a typed client that sends
// bodies as contentType (client-go would otherwise pick protobuf for
// built-in kinds by itself) and records what it sent.
func wrClient(t *testing.T, a *wgActor, contentType string) (kubernetes.Interface, *wrContentTypes) {
	t.Helper()
	cfg := rest.CopyConfig(a.cfg)
	cfg.ContentType = contentType
	cfg.AcceptContentTypes = contentType
	if contentType == wrProtobuf {
		cfg.AcceptContentTypes = wrProtobuf + ",application/json"
	}
	rec := &wrContentTypes{}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return wrRecordingTransport{rt: rt, rec: rec} }
	c, err := kubernetes.NewForConfig(cfg)
	mustf(t, err, "%s client", contentType)
	return c, rec
}

func (f *wgFamily) configMap(name string, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: f.ns,
			Labels:          map[string]string{"app": "wr"},
			Annotations:     map[string]string{"example.com/note": "keep"},
			OwnerReferences: []metav1.OwnerReference{f.ownerRef()},
		},
		Data: data,
	}
}

func (f *wgFamily) cmOwnerApply() *metav1ac.OwnerReferenceApplyConfiguration {
	r := f.ownerRef()
	return metav1ac.OwnerReference().WithAPIVersion(r.APIVersion).WithKind(r.Kind).WithName(r.Name).WithUID(r.UID).
		WithController(true).WithBlockOwnerDeletion(true)
}

// putYAML is an update with a YAML body.
func (f *wgFamily) putYAML(c kubernetes.Interface, cm *corev1.ConfigMap, dryRun bool) (*corev1.ConfigMap, error) {
	cm = cm.DeepCopy()
	cm.TypeMeta = metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}
	cm.ManagedFields = nil
	body, err := sigsyaml.Marshal(cm)
	if err != nil {
		return nil, err
	}
	req := c.CoreV1().RESTClient().Put().Namespace(f.ns).Resource("configmaps").Name(cm.Name).
		Param("fieldManager", wgManager).SetHeader("Content-Type", "application/yaml").Body(body)
	if dryRun {
		req = req.Param("dryRun", metav1.DryRunAll)
	}
	out := &corev1.ConfigMap{}
	err = req.Do(context.Background()).Into(out)
	return out, err
}

func (f *wgFamily) getCM(name string) *corev1.ConfigMap {
	f.t.Helper()
	cm, err := directClient(f.t).CoreV1().ConfigMaps(f.ns).Get(context.Background(), name, metav1.GetOptions{})
	mustf(f.t, err, "get ConfigMap %s", name)
	return cm
}

// expectTraced checks what an expected controller write stored: the trace
// (the Widget's hop, then the ConfigMap's) written in the same write, and
// the rest of the object as sent.
func (f *wgFamily) expectTraced(t *testing.T, cm *corev1.ConfigMap, name string, widgetGen int64, data map[string]string) {
	t.Helper()
	if cm == nil || cm.Name != name {
		t.Fatalf("the write returned %v, want ConfigMap %s", cm, name)
	}
	hops := traceOf(t, cm)
	if len(hops) != 2 {
		t.Fatalf("the response of the write has trace %+v, want 2 hops", hops)
	}
	wgExpectHop(t, hops[0], "Widget", f.widget, widgetGen, "alice")
	wgExpectHop(t, hops[1], "ConfigMap", name, -1, wgControllerUser)
	if hops[1].APIVersion != "v1" {
		t.Errorf("ConfigMap hop apiVersion %q", hops[1].APIVersion)
	}
	if fmt.Sprint(cm.Data) != fmt.Sprint(data) {
		t.Errorf("data %v, want %v", cm.Data, data)
	}
	if cm.Labels["app"] != "wr" || cm.Annotations["example.com/note"] != "keep" {
		t.Errorf("labels %v / annotations %v not stored as sent", cm.Labels, cm.Annotations)
	}
	if ref := metav1.GetControllerOf(cm); ref == nil || ref.UID != f.uid {
		t.Errorf("controller ownerReference %v, want the Widget", ref)
	}
	// What the write returned is what is stored.
	if stored := f.getCM(name); stored.Annotations[wgAnnTrace] != cm.Annotations[wgAnnTrace] || fmt.Sprint(stored.Data) != fmt.Sprint(data) {
		t.Errorf("stored trace/data %q %v differ from the write's response", stored.Annotations[wgAnnTrace], stored.Data)
	}
}

// TestWriteShapes drives every write shape of a built-in kind through the
// proxy: a ConfigMap (spec-less: its data is the desired state) owned by a
// Widget, written by the Widget's controller.
func TestWriteShapes(t *testing.T) {
	ctx := context.Background()
	f := newWGFamily(t, "wr-shapes", "enforce")
	f.initialize()
	gen := f.bumpSpec()
	jsonClient, jsonSeen := wrClient(t, f.ctrl, "application/json")
	cms := jsonClient.CoreV1().ConfigMaps(f.ns)
	proto, protoSeen := wrClient(t, f.ctrl, wrProtobuf)
	pcms := proto.CoreV1().ConfigMaps(f.ns)
	create := metav1.CreateOptions{FieldManager: wgManager}
	update := metav1.UpdateOptions{FieldManager: wgManager}
	patchOpts := metav1.PatchOptions{FieldManager: wgManager}

	expected := func(t *testing.T, name, verb string, mark int) {
		t.Helper()
		d := wgDecision(t, mark, "configmaps", f.ns, name)
		wgExpectDecision(t, d, "Allow", "Expected")
		wgExpectField(t, d, "verb", verb)
		wgExpectField(t, d, "traceHops", 2)
	}

	t.Run("expected", func(t *testing.T) {
		t.Run("json create", func(t *testing.T) {
			jsonSeen.take()
			mark := wgMark(t)
			cm, err := cms.Create(ctx, f.configMap("cm-json", map[string]string{"k": "1"}), create)
			mustf(t, err, "create")
			f.expectTraced(t, cm, "cm-json", gen, map[string]string{"k": "1"})
			expected(t, "cm-json", "create", mark)
		})
		t.Run("json update", func(t *testing.T) {
			cm := f.getCM("cm-json")
			cm.Data = map[string]string{"k": "2"}
			mark := wgMark(t)
			out, err := cms.Update(ctx, cm, update)
			mustf(t, err, "update")
			f.expectTraced(t, out, "cm-json", gen, map[string]string{"k": "2"})
			expected(t, "cm-json", "update", mark)
			if seen := jsonSeen.take(); fmt.Sprint(seen) != fmt.Sprint([]string{"POST application/json", "PUT application/json"}) {
				t.Errorf("the JSON client sent %q", seen)
			}
		})
		t.Run("yaml update", func(t *testing.T) {
			cm := f.getCM("cm-json")
			cm.Data = map[string]string{"k": "3"}
			mark := wgMark(t)
			out, err := f.putYAML(jsonClient, cm, false)
			mustf(t, err, "YAML update")
			f.expectTraced(t, out, "cm-json", gen, map[string]string{"k": "3"})
			expected(t, "cm-json", "update", mark)
			if seen := jsonSeen.take(); fmt.Sprint(seen) != "[PUT application/yaml]" {
				t.Errorf("the YAML update sent %q", seen)
			}
		})
		t.Run("protobuf create and update", func(t *testing.T) {
			protoSeen.take()
			mark := wgMark(t)
			cm, err := pcms.Create(ctx, f.configMap("cm-proto", map[string]string{"p": "1"}), create)
			mustf(t, err, "protobuf create")
			f.expectTraced(t, cm, "cm-proto", gen, map[string]string{"p": "1"})
			expected(t, "cm-proto", "create", mark)

			cm.Data = map[string]string{"p": "2"}
			mark = wgMark(t)
			out, err := pcms.Update(ctx, cm, update)
			mustf(t, err, "protobuf update")
			f.expectTraced(t, out, "cm-proto", gen, map[string]string{"p": "2"})
			expected(t, "cm-proto", "update", mark)
			if seen := protoSeen.take(); fmt.Sprint(seen) != fmt.Sprint([]string{"POST " + wrProtobuf, "PUT " + wrProtobuf}) {
				t.Errorf("the protobuf client sent %q", seen)
			}
		})
		for _, tc := range []struct {
			name  string
			pt    types.PatchType
			patch string
			want  map[string]string
		}{
			{"json patch", types.JSONPatchType, `[{"op":"replace","path":"/data/k","value":"4"}]`, map[string]string{"k": "4"}},
			{"merge patch", types.MergePatchType, `{"data":{"k":"5","m":"x"}}`, map[string]string{"k": "5", "m": "x"}},
			{"strategic merge patch", types.StrategicMergePatchType, `{"data":{"k":"6"}}`, map[string]string{"k": "6", "m": "x"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				mark := wgMark(t)
				out, err := cms.Patch(ctx, "cm-json", tc.pt, []byte(tc.patch), patchOpts)
				mustf(t, err, "%s", tc.name)
				f.expectTraced(t, out, "cm-json", gen, tc.want)
				expected(t, "cm-json", "patch", mark)
			})
		}
		t.Run("server-side apply", func(t *testing.T) {
			mark := wgMark(t)
			ac := corev1ac.ConfigMap("cm-json", f.ns).WithLabels(map[string]string{"app": "wr"}).
				WithOwnerReferences(f.cmOwnerApply()).WithData(map[string]string{"k": "7", "m": "x"})
			out, err := cms.Apply(ctx, ac, metav1.ApplyOptions{FieldManager: wgManager, Force: true})
			mustf(t, err, "apply")
			f.expectTraced(t, out, "cm-json", gen, map[string]string{"k": "7", "m": "x"})
			expected(t, "cm-json", "patch", mark)
		})
		t.Run("server-side apply that creates", func(t *testing.T) {
			mark := wgMark(t)
			ac := corev1ac.ConfigMap("cm-applied", f.ns).WithLabels(map[string]string{"app": "wr"}).
				WithAnnotations(map[string]string{"example.com/note": "keep"}).
				WithOwnerReferences(f.cmOwnerApply()).WithData(map[string]string{"a": "1"})
			out, err := cms.Apply(ctx, ac, metav1.ApplyOptions{FieldManager: wgManager})
			mustf(t, err, "apply create")
			f.expectTraced(t, out, "cm-applied", gen, map[string]string{"a": "1"})
			expected(t, "cm-applied", "patch", mark)
			wgExpectField(t, wgDecision(t, mark, "configmaps", f.ns, "cm-applied"), "operation", "CREATE")
		})
	})

	// A controller copies its parent's kausality annotations (and sets its
	// own): on a controller write they are replaced by the proxy's (trace)
	// or taken from the stored object (user annotations), in every shape.
	t.Run("expected writes cannot forge kausality annotations", func(t *testing.T) {
		forged := map[string]string{
			wgAnnTrace:     f.getWidget().GetAnnotations()[wgAnnTrace],
			wgAnnMode:      "log",
			wgAnnApprovals: `[{"apiVersion":"v1","kind":"ConfigMap","name":"cm-forge","mode":"always"}]`,
			wgAnnPhase:     "initialized",
		}
		forgedJSON, _ := json.Marshal(forged)
		withForged := func(cm *corev1.ConfigMap, k, v string) *corev1.ConfigMap {
			cm = cm.DeepCopy()
			for fk, fv := range forged {
				cm.Annotations[fk] = fv
			}
			cm.Data = map[string]string{k: v}
			return cm
		}
		check := func(t *testing.T, out *corev1.ConfigMap, err error, v string) {
			t.Helper()
			mustf(t, err, "expected write with forged annotations")
			f.expectTraced(t, out, "cm-forge", gen, map[string]string{"f": v})
			for _, k := range []string{wgAnnMode, wgAnnApprovals, wgAnnPhase} {
				if got, ok := out.Annotations[k]; ok {
					t.Errorf("the controller's write stored %s=%q on its child", k, got)
				}
			}
		}
		t.Run("json create", func(t *testing.T) {
			out, err := cms.Create(ctx, withForged(f.configMap("cm-forge", nil), "f", "0"), create)
			check(t, out, err, "0")
		})
		t.Run("json update", func(t *testing.T) {
			out, err := cms.Update(ctx, withForged(f.getCM("cm-forge"), "f", "1"), update)
			check(t, out, err, "1")
		})
		t.Run("protobuf update", func(t *testing.T) {
			out, err := pcms.Update(ctx, withForged(f.getCM("cm-forge"), "f", "2"), update)
			check(t, out, err, "2")
		})
		t.Run("merge patch", func(t *testing.T) {
			patch := fmt.Sprintf(`{"metadata":{"annotations":%s},"data":{"f":"3"}}`, forgedJSON)
			out, err := cms.Patch(ctx, "cm-forge", types.MergePatchType, []byte(patch), patchOpts)
			check(t, out, err, "3")
		})
		t.Run("strategic merge patch", func(t *testing.T) {
			patch := fmt.Sprintf(`{"metadata":{"annotations":%s},"data":{"f":"4"}}`, forgedJSON)
			out, err := cms.Patch(ctx, "cm-forge", types.StrategicMergePatchType, []byte(patch), patchOpts)
			check(t, out, err, "4")
		})
		t.Run("json patch", func(t *testing.T) {
			var ops []map[string]any
			for k, v := range forged {
				ops = append(ops, map[string]any{"op": "add", "path": "/metadata/annotations/" + strings.ReplaceAll(k, "/", "~1"), "value": v})
			}
			ops = append(ops, map[string]any{"op": "replace", "path": "/data/f", "value": "5"})
			patch, _ := json.Marshal(ops)
			out, err := cms.Patch(ctx, "cm-forge", types.JSONPatchType, patch, patchOpts)
			check(t, out, err, "5")
		})
		t.Run("server-side apply", func(t *testing.T) {
			ac := corev1ac.ConfigMap("cm-forge", f.ns).WithLabels(map[string]string{"app": "wr"}).
				WithAnnotations(map[string]string{"example.com/note": "keep"}).WithAnnotations(forged).
				WithOwnerReferences(f.cmOwnerApply()).WithData(map[string]string{"f": "6"})
			out, err := cms.Apply(ctx, ac, metav1.ApplyOptions{FieldManager: wgManager, Force: true})
			check(t, out, err, "6")
		})
	})

	// The controller catches up: from now on a data change is drift.
	f.setStatus(true)
	f.settle("Deny/DriftUnapproved", func() error {
		cm := f.getCM("cm-json")
		cm.Data["k"] = "probe"
		_, err := cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: wgManager, DryRun: []string{metav1.DryRunAll}})
		return err
	})

	t.Run("drift is denied", func(t *testing.T) {
		drifted := func(cm *corev1.ConfigMap) *corev1.ConfigMap {
			cm = cm.DeepCopy()
			cm.Data["k"] = "drift"
			return cm
		}
		cases := []struct {
			name, child, verb string
			write             func() error
		}{
			{"json update", "cm-json", "update", func() error { _, err := cms.Update(ctx, drifted(f.getCM("cm-json")), update); return err }},
			{"yaml update", "cm-json", "update", func() error { _, err := f.putYAML(jsonClient, drifted(f.getCM("cm-json")), false); return err }},
			{"protobuf update", "cm-proto", "update", func() error { _, err := pcms.Update(ctx, drifted(f.getCM("cm-proto")), update); return err }},
			{"json patch", "cm-json", "patch", func() error {
				_, err := cms.Patch(ctx, "cm-json", types.JSONPatchType, []byte(`[{"op":"replace","path":"/data/k","value":"drift"}]`), patchOpts)
				return err
			}},
			{"merge patch", "cm-json", "patch", func() error {
				_, err := cms.Patch(ctx, "cm-json", types.MergePatchType, []byte(`{"data":{"k":"drift"}}`), patchOpts)
				return err
			}},
			{"strategic merge patch", "cm-json", "patch", func() error {
				_, err := cms.Patch(ctx, "cm-json", types.StrategicMergePatchType, []byte(`{"data":{"k":"drift"}}`), patchOpts)
				return err
			}},
			{"server-side apply", "cm-json", "patch", func() error {
				ac := corev1ac.ConfigMap("cm-json", f.ns).WithLabels(map[string]string{"app": "wr"}).
					WithOwnerReferences(f.cmOwnerApply()).WithData(map[string]string{"k": "drift", "m": "x"})
				_, err := cms.Apply(ctx, ac, metav1.ApplyOptions{FieldManager: wgManager, Force: true})
				return err
			}},
			{"merge patch without fieldManager (manager from User-Agent)", "cm-json", "patch", func() error {
				_, err := cms.Patch(ctx, "cm-json", types.MergePatchType, []byte(`{"data":{"k":"drift"}}`), metav1.PatchOptions{})
				return err
			}},
			{"server-side apply that creates", "cm-applied-drift", "patch", func() error {
				ac := corev1ac.ConfigMap("cm-applied-drift", f.ns).WithOwnerReferences(f.cmOwnerApply()).WithData(map[string]string{"a": "1"})
				_, err := cms.Apply(ctx, ac, metav1.ApplyOptions{FieldManager: wgManager})
				return err
			}},
			{"json create", "cm-new", "create", func() error {
				_, err := cms.Create(ctx, f.configMap("cm-new", map[string]string{"k": "1"}), create)
				return err
			}},
			{"protobuf create", "cm-new-proto", "create", func() error {
				_, err := pcms.Create(ctx, f.configMap("cm-new-proto", map[string]string{"k": "1"}), create)
				return err
			}},
			{"delete", "cm-json", "delete", func() error { return cms.Delete(ctx, "cm-json", metav1.DeleteOptions{}) }},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				mark := wgMark(t)
				err := tc.write()
				wgDenied(t, err, f, "ConfigMap", tc.child, wgAnnApprovals)
				d := wgDecision(t, mark, "configmaps", f.ns, tc.child)
				wgExpectDecision(t, d, "Deny", "DriftUnapproved")
				wgExpectField(t, d, "verb", tc.verb)
				wgExpectField(t, d, "fieldManager", wgManager)
			})
		}
		if got := f.getCM("cm-json").Data; fmt.Sprint(got) != fmt.Sprint(map[string]string{"k": "7", "m": "x"}) {
			t.Errorf("cm-json changed by denied writes: %v", got)
		}
		if got := f.getCM("cm-proto").Data; got["p"] != "2" || got["k"] != "" {
			t.Errorf("cm-proto changed by a denied write: %v", got)
		}
		for _, name := range []string{"cm-new", "cm-new-proto", "cm-applied-drift"} {
			if _, err := directClient(t).CoreV1().ConfigMaps(f.ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				t.Errorf("%s exists after a denied create (%v)", name, err)
			}
		}
	})

	t.Run("metadata-only writes are not drift", func(t *testing.T) {
		mark := wgMark(t)
		out, err := cms.Patch(ctx, "cm-json", types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"gold"}}}`), patchOpts)
		mustf(t, err, "the controller labels its ConfigMap while the Widget is stable")
		if out.Labels["tier"] != "gold" {
			t.Errorf("labels %v", out.Labels)
		}
		wgExpectDecision(t, wgDecision(t, mark, "configmaps", f.ns, "cm-json"), "Allow", "NoDesiredChange")

		cm := f.getCM("cm-proto")
		cm.Labels["tier"] = "silver"
		mark = wgMark(t)
		out, err = pcms.Update(ctx, cm, update)
		mustf(t, err, "the controller relabels with a protobuf update")
		if out.Labels["tier"] != "silver" {
			t.Errorf("labels %v", out.Labels)
		}
		wgExpectDecision(t, wgDecision(t, mark, "configmaps", f.ns, "cm-proto"), "Allow", "NoDesiredChange")

		// A metadata-only controller write cannot set kausality annotations
		// on its child either (it would downgrade the child to log mode).
		mark = wgMark(t)
		out, err = cms.Patch(ctx, "cm-json", types.MergePatchType, []byte(`{"metadata":{"labels":{"tier":"bronze"},"annotations":{"kausality.io/mode":"log"}}}`), patchOpts)
		mustf(t, err, "metadata-only controller write with a mode annotation")
		if _, ok := out.Annotations[wgAnnMode]; ok || out.Labels["tier"] != "bronze" {
			t.Errorf("stored annotations %v labels %v: want the label, not the mode", out.Annotations, out.Labels)
		}
		wgExpectDecision(t, wgDecision(t, mark, "configmaps", f.ns, "cm-json"), "Allow", "NoDesiredChange")
	})

	t.Run("dry-run", func(t *testing.T) {
		dryUpdate := func(v string) error {
			cm := f.getCM("cm-json")
			cm.Data["k"] = v
			_, err := cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: wgManager, DryRun: []string{metav1.DryRunAll}})
			return err
		}
		lines := func(mark int) []string {
			all, err := cluster.Decisions()
			mustf(t, err, "decisions")
			var out []string
			for _, d := range all[mark:] {
				if d.Str("name") == "cm-json" && d.Str("namespace") == f.ns && d.Bool("dryRun") {
					out = append(out, d.Str("decision")+"/"+d.Str("category"))
				}
			}
			return out
		}

		mark := wgMark(t)
		wgDenied(t, dryUpdate("dry"), f, "ConfigMap", "cm-json", wgAnnApprovals)
		if got := lines(mark); fmt.Sprint(got) != "[Deny/DriftUnapproved]" {
			t.Errorf("dry-run decision lines %v", got)
		}

		approval := fmt.Sprintf(`[{"apiVersion":"v1","kind":"ConfigMap","name":"cm-json","generation":%d,"mode":"once"}]`, gen)
		f.annotateWidget(map[string]*string{wgAnnApprovals: &approval})
		f.ctrl.warnings.take()
		mark = wgMark(t)
		mustf(t, dryUpdate("dry"), "a dry-run the once approval allows")
		if w := f.ctrl.warnings.take(); !wgSomeContainsAll(w, "kausality dry-run: Allow (DriftApproved)") {
			t.Errorf("dry-run warnings %q", w)
		}
		if got := f.getWidget().GetAnnotations()[wgAnnApprovals]; got != approval {
			t.Fatalf("the dry-run consumed the once approval: %q", got)
		}
		if got := f.getCM("cm-json").Data["k"]; got != "7" {
			t.Fatalf("the dry-run changed the ConfigMap: %q", got)
		}
		eventually(t, 15*time.Second, "the dry-run decision line", func() error {
			if got := lines(mark); fmt.Sprint(got) != "[Allow/DriftApproved]" {
				return fmt.Errorf("dry-run decision lines %v", got)
			}
			return nil
		})

		// The real write uses it.
		cm := f.getCM("cm-json")
		cm.Data["k"] = "approved"
		mark = wgMark(t)
		_, err := cms.Update(ctx, cm, update)
		mustf(t, err, "the approved write")
		d := wgDecision(t, mark, "configmaps", f.ns, "cm-json")
		wgExpectDecision(t, d, "Allow", "DriftApproved")
		wgExpectField(t, d, "approvalMode", "once")
		if v, ok := f.getWidget().GetAnnotations()[wgAnnApprovals]; ok {
			t.Errorf("the once approval is still there after the real write: %q", v)
		}
	})
}

// wrRaw sends one raw request to the proxy with a bearer token.
func wrRaw(t *testing.T, token, method, path, contentType string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, cluster.ProxyEndpoint().URL+path, bytes.NewReader(body))
	mustf(t, err, "request")
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", contentType)
	req.Header.Set("Accept", "application/json")
	resp, err := rawClient(t, nil).Do(req)
	mustf(t, err, "%s %s", method, path)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// TestInterceptedWriteErrors: bodies the proxy cannot decide about are
// refused by the proxy itself with a Status a person can act on, and never
// reach kube-apiserver.
func TestInterceptedWriteErrors(t *testing.T) {
	wgSetup(t)
	ns := wgNamespace(t, "wr-errors", "enforce")
	ctrl := wgController(t)
	token := ctrl.cfg.BearerToken
	marker := "wr-err-" + utilrand.String(6)
	path := func(suffix string) string { return "/api/v1/namespaces/" + ns + "/configmaps/" + marker + "-" + suffix }
	cmBody := func(suffix, value string) []byte {
		b, _ := json.Marshal(map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": marker + "-" + suffix, "namespace": ns},
			"data":     map[string]string{"k": value},
		})
		return b
	}

	cases := []struct {
		name, suffix, method, contentType string
		body                              []byte
		code                              int32
		reason                            metav1.StatusReason
		says                              []string
	}{
		{"unknown content type", "415", http.MethodPut, "text/plain", []byte("k=v"), 415, metav1.StatusReasonUnsupportedMediaType,
			[]string{"text/plain", "application/json"}},
		{"unknown patch type", "415p", http.MethodPatch, "application/x-unknown-patch", []byte(`{"data":{"k":"v"}}`), 415, metav1.StatusReasonUnsupportedMediaType,
			[]string{"application/merge-patch+json"}},
		{"body over the limit", "413", http.MethodPut, "application/json", cmBody("413", strings.Repeat("x", 3*1024*1024+512*1024)), 413, metav1.StatusReasonRequestEntityTooLarge,
			[]string{"3145728"}},
		{"undecodable JSON", "400", http.MethodPut, "application/json", []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{`), 400, metav1.StatusReasonBadRequest,
			[]string{"JSON"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, data := wrRaw(t, token, tc.method, path(tc.suffix), tc.contentType, tc.body)
			if int32(code) != tc.code {
				t.Fatalf("got %d, want %d: %.300s", code, tc.code, data)
			}
			var s metav1.Status
			if err := json.Unmarshal(data, &s); err != nil || s.Kind != "Status" {
				t.Fatalf("not a Status (%v): %.300s", err, data)
			}
			if s.Code != tc.code || s.Reason != tc.reason || s.Status != metav1.StatusFailure {
				t.Errorf("status %d %q %q, want %d %q Failure", s.Code, s.Reason, s.Status, tc.code, tc.reason)
			}
			for _, want := range tc.says {
				if !strings.Contains(s.Message, want) {
					t.Errorf("the message does not mention %q: %s", want, s.Message)
				}
			}
		})
	}

	// Positive control: a well-formed write to a marked name reaches
	// kube-apiserver (which answers 404: a ConfigMap is not created by PUT).
	code, data := wrRaw(t, token, http.MethodPut, path("control"), "application/json", cmBody("control", "v"))
	if code != http.StatusNotFound {
		t.Fatalf("control write: %d %.300s", code, data)
	}
	eventually(t, 30*time.Second, "the control write in the audit log", func() error {
		events, err := cluster.AuditEvents()
		if err != nil {
			return err
		}
		found := false
		for _, e := range events {
			if strings.Contains(e.RequestURI, marker+"-control") && e.Verb == "update" && e.User.Username == wgControllerUser {
				found = true
			}
		}
		if !found {
			return fmt.Errorf("not audited yet")
		}
		for _, e := range events {
			if !strings.Contains(e.RequestURI, marker) || strings.Contains(e.RequestURI, marker+"-control") {
				continue
			}
			// The proxy may read the stored object itself; the write never
			// goes upstream.
			if e.Verb != "get" || e.User.Username == wgControllerUser {
				t.Errorf("a refused request reached kube-apiserver: %s %s by %s", e.Verb, e.RequestURI, e.User.Username)
			}
		}
		return nil
	})
	// Each refused write still produced its decision line.
	all, err := cluster.Decisions()
	mustf(t, err, "decisions")
	for _, tc := range cases {
		n := 0
		for _, d := range all {
			if d.Str("namespace") == ns && d.Str("name") == marker+"-"+tc.suffix && d.Str("decision") == "Error" {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d Error decision lines, want 1", tc.name, n)
		}
	}
}

// TestNonTargetedWritesAreNotDecided: writes outside the resource rules
// (the kube-system namespace, leases) pass through without a decision.
func TestNonTargetedWritesAreNotDecided(t *testing.T) {
	wgSetup(t)
	ctx := context.Background()
	ns := wgNamespace(t, "wr-untargeted", "enforce")
	ctrl := wgController(t)
	name := "wr-untargeted-" + utilrand.String(6)

	sys := ctrl.kube.CoreV1().ConfigMaps("kube-system")
	_, err := sys.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}, Data: map[string]string{"k": "v"}}, metav1.CreateOptions{FieldManager: wgManager})
	mustf(t, err, "ConfigMap in kube-system")
	_, err = sys.Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"k":"w"}}`), metav1.PatchOptions{FieldManager: wgManager})
	mustf(t, err, "patch in kube-system")
	mustf(t, sys.Delete(ctx, name, metav1.DeleteOptions{}), "delete in kube-system")
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
	_, err = ctrl.kube.CoordinationV1().Leases(ns).Create(ctx, lease, metav1.CreateOptions{FieldManager: wgManager})
	mustf(t, err, "lease")

	// Control: a targeted write right after is decided.
	_, err = ctrl.kube.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{FieldManager: wgManager})
	mustf(t, err, "control ConfigMap")
	d := wgDecision(t, 0, "configmaps", ns, name)
	wgExpectDecision(t, d, "Allow", "NoParent")

	all, err := cluster.Decisions()
	mustf(t, err, "decisions")
	for _, d := range all {
		if d.Str("name") == name && (d.Str("namespace") == "kube-system" || d.Str("resource") == "leases") {
			t.Errorf("a non-targeted write was decided: %v", d)
		}
	}
}
