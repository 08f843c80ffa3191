//go:build !kind

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// Inputs the proxy cannot or must not decide on. Each gets a metav1.Status
// with the right code and a message that says what is wrong, and the stored
// object is untouched (its resourceVersion does not move).

// billionLaughs is a YAML alias bomb: ten levels of nine aliases each.
func billionLaughs() string {
	var b strings.Builder
	b.WriteString("apiVersion: " + wgAPIVersion + "\nkind: Gadget\nmetadata:\n  name: g\nlol0: &lol0 \"lol\"\n")
	for i := 1; i < 10; i++ {
		fmt.Fprintf(&b, "lol%d: &lol%d [", i, i)
		for j := 0; j < 9; j++ {
			if j > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "*lol%d", i-1)
		}
		b.WriteString("]\n")
	}
	b.WriteString("spec:\n  value: *lol9\n")
	return b.String()
}

func TestBadInputBodies(t *testing.T) {
	f := newWGFamily(t, "badinput", "enforce")
	_, err := f.createGadget("g", "a", false)
	mustf(t, err, "create Gadget")
	_, err = f.ctrl.kube.CoreV1().ConfigMaps(f.ns).Create(context.Background(), f.configMap("cm", map[string]string{"k": "a"}), metav1.CreateOptions{FieldManager: wgManager})
	mustf(t, err, "create ConfigMap")
	f.initialize()
	header := http.Header{"Authorization": {"Bearer " + f.ctrl.cfg.BearerToken}}
	gadget := fmt.Sprintf("/apis/%s/namespaces/%s/gadgets/g?fieldManager=%s", wgAPIVersion, f.ns, wgManager)
	configMap := fmt.Sprintf("/api/v1/namespaces/%s/configmaps/cm?fieldManager=%s", f.ns, wgManager)
	const depth = 100000
	deepJSON := `{"apiVersion":"` + wgAPIVersion + `","kind":"Gadget","metadata":{"name":"g"},"spec":` + strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth) + "}"
	deepArray := `{"spec":{"value":` + strings.Repeat("[", depth) + strings.Repeat("]", depth) + "}}"
	deepYAML := "apiVersion: " + wgAPIVersion + "\nkind: Gadget\nmetadata:\n  name: g\nspec: " + strings.Repeat("[", depth) + strings.Repeat("]", depth) + "\n"
	cases := []struct {
		name, method, path, contentType, body string
		code                                  int32
		reason                                metav1.StatusReason
		says                                  []string
	}{
		{"malformed JSON", http.MethodPut, gadget, "application/json", `{"apiVersion":"` + wgAPIVersion + `","kind":"Gadget","metadata":{"name":"g"},"spec":{"value":}`,
			400, metav1.StatusReasonBadRequest, []string{"not valid JSON"}},
		{"malformed JSON merge patch", http.MethodPatch, gadget, "application/merge-patch+json", `{"spec":{"value":"b"`,
			400, metav1.StatusReasonBadRequest, []string{"JSON"}},
		{"malformed JSON patch", http.MethodPatch, gadget, "application/json-patch+json", `[{"op":"replace","path":"/spec/value"`,
			400, metav1.StatusReasonBadRequest, []string{"JSON"}},
		{"malformed YAML", http.MethodPut, gadget, "application/yaml", "apiVersion: " + wgAPIVersion + "\nkind: Gadget\nmetadata:\n  name: g\nspec: {value: [b\n",
			400, metav1.StatusReasonBadRequest, []string{"YAML"}},
		{"malformed YAML apply", http.MethodPatch, gadget + "&force=true", "application/apply-patch+yaml", "apiVersion: " + wgAPIVersion + "\nkind: Gadget\nspec:\n  value: [b\n",
			400, metav1.StatusReasonBadRequest, []string{"YAML"}},
		{"malformed protobuf", http.MethodPut, configMap, wrProtobuf, "k8s\x00\x0a\x02\xff\xff\x12\x05garbage",
			400, metav1.StatusReasonBadRequest, []string{"protobuf"}},
		{"protobuf for a custom resource", http.MethodPut, gadget, wrProtobuf, string(protobufEnvelope(t, wgAPIVersion, "Gadget", protobufField(1, nil))),
			415, metav1.StatusReasonUnsupportedMediaType, []string{"protobuf", "built-in"}},
		{"malformed CBOR", http.MethodPut, gadget, "application/cbor", "\xd9\xd9\xf7\xa1\x63abc",
			400, metav1.StatusReasonBadRequest, []string{"CBOR"}},
		{"JSON sent as CBOR", http.MethodPut, gadget, "application/cbor", `{"apiVersion":"` + wgAPIVersion + `","kind":"Gadget","metadata":{"name":"g"},"spec":{"value":"b"}}`,
			400, metav1.StatusReasonBadRequest, []string{"CBOR", "self-described"}},
		{"JSON sent as protobuf", http.MethodPut, configMap, wrProtobuf, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm"},"data":{"k":"b"}}`,
			400, metav1.StatusReasonBadRequest, []string{"protobuf"}},
		{"a merge patch over the size limit", http.MethodPatch, gadget, "application/merge-patch+json", `{"spec":{"value":"` + strings.Repeat("x", 3*1024*1024+512*1024) + `"}}`,
			413, metav1.StatusReasonRequestEntityTooLarge, []string{"--max-request-body-bytes"}},
		{"a YAML alias bomb", http.MethodPut, gadget, "application/yaml", billionLaughs(),
			400, metav1.StatusReasonBadRequest, []string{"YAML"}},
		{"100k levels of JSON objects", http.MethodPut, gadget, "application/json", deepJSON,
			400, metav1.StatusReasonBadRequest, []string{"depth"}},
		{"100k levels of JSON arrays in a merge patch", http.MethodPatch, gadget, "application/merge-patch+json", deepArray,
			400, metav1.StatusReasonBadRequest, []string{"depth"}},
		{"100k levels of YAML flow sequences", http.MethodPut, gadget, "application/yaml", deepYAML,
			400, metav1.StatusReasonBadRequest, []string{"YAML"}},
		{"a merge patch that is a JSON array, custom resource", http.MethodPatch, gadget, "application/merge-patch+json", `[{"spec":{"value":"b"}}]`,
			400, metav1.StatusReasonBadRequest, []string{"must be a JSON object, got an array"}},
		{"a merge patch that is a JSON array, built-in kind", http.MethodPatch, configMap, "application/merge-patch+json", `[{"data":{"k":"b"}}]`,
			400, metav1.StatusReasonBadRequest, []string{"must be a JSON object, got an array"}},
		{"an annotation value that is a number, custom resource", http.MethodPut, gadget, "application/json",
			`{"apiVersion":"` + wgAPIVersion + `","kind":"Gadget","metadata":{"name":"g","annotations":{"team":"a","prometheus.io/port":8080}},"spec":{"value":"b"}}`,
			400, metav1.StatusReasonBadRequest, []string{`metadata.annotations["prometheus.io/port"] is a number, not a string`}},
		{"annotations that are an array, built-in kind", http.MethodPut, configMap, "application/json",
			`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm","annotations":["team=a"]},"data":{"k":"b"}}`,
			400, metav1.StatusReasonBadRequest, []string{"metadata.annotations is an array, not an object"}},
		{"an annotation value that is a boolean, YAML", http.MethodPut, configMap, "application/yaml",
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  annotations:\n    team: a\n    enabled: true\ndata:\n  k: b\n",
			400, metav1.StatusReasonBadRequest, []string{`metadata.annotations["enabled"] is a boolean, not a string`, "quote numbers and booleans"}},
		{"an unquoted resourceVersion, YAML", http.MethodPut, configMap, "application/yaml",
			"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cm\n  resourceVersion: 1\ndata:\n  k: b\n",
			400, metav1.StatusReasonBadRequest, []string{"metadata.resourceVersion is a number, not a string"}},
	}
	// Cases kube-apiserver itself is asked too: its code must be the same.
	sameAsDirect := map[string]bool{
		"a merge patch that is a JSON array, custom resource":   true,
		"a merge patch that is a JSON array, built-in kind":     true,
		"an annotation value that is a number, custom resource": true,
		"annotations that are an array, built-in kind":          true,
		"an annotation value that is a boolean, YAML":           true,
		"an unquoted resourceVersion, YAML":                     true,
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := f.storedVersions(t)
			if sameAsDirect[tc.name] {
				direct, directBody := sendRaw(t, directHTTPClient(t, nil), directURL(), tc.method, tc.path, tc.contentType, []byte(tc.body), header)
				if int32(direct) != tc.code {
					t.Fatalf("kube-apiserver itself answers %d, the case expects %d: %.400s", direct, tc.code, directBody)
				}
			}
			code, body := sendRaw(t, rawClient(t, nil), cluster.ProxyEndpoint().URL, tc.method, tc.path, tc.contentType, []byte(tc.body), header)
			if int32(code) != tc.code {
				t.Fatalf("code %d, want %d: %.400s", code, tc.code, body)
			}
			s := decodeStatus(t, body)
			if s.Code != tc.code || s.Reason != tc.reason || s.Status != metav1.StatusFailure {
				t.Errorf("status %d %q %q, want %d %q Failure", s.Code, s.Reason, s.Status, tc.code, tc.reason)
			}
			for _, want := range tc.says {
				if !strings.Contains(s.Message, want) {
					t.Errorf("the message does not say %q: %.400s", want, s.Message)
				}
			}
			if after := f.storedVersions(t); after != before {
				t.Fatalf("the stored objects changed: resourceVersions %s → %s", before, after)
			}
		})
	}
}

// protobufEnvelope is a Kubernetes protobuf body: the magic prefix and a
// runtime.Unknown naming apiVersion and kind around raw.
func protobufEnvelope(t *testing.T, apiVersion, kind string, raw []byte) []byte {
	t.Helper()
	unknown := &runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: apiVersion, Kind: kind}, Raw: raw}
	var buf bytes.Buffer
	mustf(t, protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(unknown, &buf), "protobuf envelope")
	return buf.Bytes()
}

// storedVersions are the resourceVersions of the family's children.
func (f *wgFamily) storedVersions(t *testing.T) string {
	t.Helper()
	g, err := f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Get(context.Background(), "g", metav1.GetOptions{})
	mustf(t, err, "get Gadget")
	cm := f.getCM("cm")
	return g.GetResourceVersion() + "/" + cm.ResourceVersion
}

// Broken kausality.io annotations on the parent fail safe, and the answer
// names the annotation: approvals that cannot be read approve nothing,
// rejections that cannot be read reject, a freeze that cannot be read
// freezes, a snooze that cannot be read does not snooze, and a parent's
// trace that cannot be read is not carried into the child's.
func TestBadInputParentAnnotations(t *testing.T) {
	cases := []struct {
		name, annotation, value string
		// settle is the decision a dry-run probe must reach first;
		// deniedBy the annotation the denial names.
		settle, deniedBy string
	}{
		{"approvals as an object", wgAnnApprovals, fmt.Sprintf(`{"apiVersion":%q,"kind":"Gadget","name":"g","mode":"always"}`, wgAPIVersion), "Deny/DriftUnapproved", wgAnnApprovals},
		{"approvals with an unknown mode", wgAnnApprovals, fmt.Sprintf(`[{"apiVersion":%q,"kind":"Gadget","name":"g","mode":"forever"}]`, wgAPIVersion), "Deny/DriftUnapproved", wgAnnApprovals},
		{"approvals with a generation that is a string", wgAnnApprovals, fmt.Sprintf(`[{"apiVersion":%q,"kind":"Gadget","name":"g","generation":"1","mode":"once"}]`, wgAPIVersion), "Deny/DriftUnapproved", wgAnnApprovals},
		{"rejections that are not JSON", wgAnnRejections, "reject everything", "Deny/DriftRejected", wgAnnRejections},
		{"freeze as a broken object", wgAnnFreeze, `{"user":"oncall"`, "Deny/Frozen", wgAnnFreeze},
		{"snooze-until that is not a time", wgAnnSnooze, "next tuesday", "Deny/DriftUnapproved", wgAnnApprovals},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newInitializedGadgetFamily(t, "bad-ann", "enforce")
			value := tc.value
			f.annotateWidget(map[string]*string{tc.annotation: &value})
			f.settleGadget("g", tc.settle)
			before := f.storedVersion(t)
			f.ctrl.warnings.take()
			_, err := f.setValue("g", "b", false)
			s := wgDenied(t, err, f, "Gadget", "g", tc.deniedBy)
			warnings := f.ctrl.warnings.take()
			if !wgSomeContainsAll(warnings, tc.annotation, "malformed") && !strings.Contains(s.Message, tc.annotation) {
				t.Errorf("neither the denial nor a Warning names the malformed %s: %s; %q", tc.annotation, s.Message, warnings)
			}
			if !wgSomeContainsAll(warnings, tc.annotation) {
				t.Errorf("no Warning names %s: %q", tc.annotation, warnings)
			}
			if after := f.storedVersion(t); after != before {
				t.Fatalf("the Gadget changed: resourceVersion %s → %s", before, after)
			}
		})
	}

	t.Run("a trace on the parent that is not JSON", func(t *testing.T) {
		f := newInitializedGadgetFamily(t, "bad-trace", "enforce")
		// The Widget's own trace is rewritten by every write through the
		// proxy: the spec change first, then the broken trace.
		f.bumpSpec()
		broken := `[{"kind":"Widget","name":`
		f.annotateWidget(map[string]*string{wgAnnTrace: &broken})
		f.settleGadget("g", "Allow/Expected")
		f.ctrl.warnings.take()
		g, err := f.setValue("g", "b", false)
		mustf(t, err, "the expected write")
		if w := f.ctrl.warnings.take(); !wgSomeContainsAll(w, wgAnnTrace) {
			t.Errorf("no Warning names the parent's broken %s: %q", wgAnnTrace, w)
		}
		hops := traceOf(t, g)
		if len(hops) == 0 || strings.Contains(g.GetAnnotations()[wgAnnTrace], broken) {
			t.Fatalf("the child's trace carries the broken one: %q", g.GetAnnotations()[wgAnnTrace])
		}
	})
}

func (f *wgFamily) storedVersion(t *testing.T) string {
	t.Helper()
	g, err := f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Get(context.Background(), "g", metav1.GetOptions{})
	mustf(t, err, "get Gadget")
	return g.GetResourceVersion()
}

// ownerReferences are namespace-local, and may name a kind the cluster
// does not serve. Neither may make the proxy decide under the wrong parent.
func TestBadInputOwnerReferences(t *testing.T) {
	ctx := context.Background()
	f := newWGFamily(t, "bad-owner", "enforce")
	f.initialize()

	t.Run("a parent in another namespace", func(t *testing.T) {
		// A frozen Gadget in another namespace, named by a ConfigMap's
		// controller reference: kube-apiserver and the garbage collector
		// look for the owner in the ConfigMap's own namespace, where there
		// is none, and so must the proxy.
		other := wgNamespace(t, "bad-owner-other", "enforce")
		parent := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": wgAPIVersion, "kind": "Gadget",
			"metadata": map[string]any{"name": "frozen", "annotations": map[string]any{wgAnnFreeze: "true"}},
			"spec":     map[string]any{"value": "x"},
		}}
		created, err := f.admin.Resource(framework.GadgetGVR).Namespace(other).Create(ctx, parent, metav1.CreateOptions{})
		mustf(t, err, "the frozen Gadget")
		// The garbage collector deletes an object all of whose owners are
		// missing; an owner that exists keeps the ConfigMap for the patch
		// below.
		anchor, err := directClient(t).CoreV1().ConfigMaps(f.ns).Create(ctx,
			&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "anchor"}}, metav1.CreateOptions{})
		mustf(t, err, "the anchor ConfigMap")
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "far", Namespace: f.ns, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: wgAPIVersion, Kind: "Gadget", Name: "frozen", UID: created.GetUID(), Controller: ptr.To(true),
		}, {APIVersion: "v1", Kind: "ConfigMap", Name: anchor.Name, UID: anchor.UID}}}, Data: map[string]string{"k": "a"}}
		mark := wgMark(t)
		_, err = f.ctrl.kube.CoreV1().ConfigMaps(f.ns).Create(ctx, cm, metav1.CreateOptions{FieldManager: wgManager})
		mustf(t, err, "a ConfigMap owned by a Gadget of another namespace")
		d := wgDecision(t, mark, "configmaps", f.ns, "far")
		if d.Str("category") == "Frozen" {
			t.Fatalf("decided under the Gadget of another namespace: %v", d)
		}
		_, err = f.ctrl.kube.CoreV1().ConfigMaps(f.ns).Patch(ctx, "far", types.MergePatchType, []byte(`{"data":{"k":"b"}}`), metav1.PatchOptions{FieldManager: wgManager})
		mustf(t, err, "changing it")
	})

	t.Run("a parent of a kind the cluster does not serve", func(t *testing.T) {
		name := "nokind-" + utilrand.String(4)
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: f.ns, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "nothing.example.com/v1", Kind: "Nothing", Name: "x", UID: "00000000-0000-0000-0000-000000000001", Controller: ptr.To(true),
		}}}, Data: map[string]string{"k": "a"}}
		unserved := func(what string, err error) {
			t.Helper()
			s := wgStatus(t, err, 500, what)
			if !strings.Contains(s.Message, "ownerReference") || !strings.Contains(s.Message, "nothing.example.com") {
				t.Errorf("%s: the message does not say the ownerReference's kind is not served: %s", what, s.Message)
			}
		}
		_, err := f.ctrl.kube.CoreV1().ConfigMaps(f.ns).Create(ctx, cm, metav1.CreateOptions{FieldManager: wgManager})
		unserved("the create", err)
		if _, err := directClient(t).CoreV1().ConfigMaps(f.ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
			t.Fatal("the refused create created the ConfigMap")
		}
		stored, err := directClient(t).CoreV1().ConfigMaps(f.ns).Create(ctx, cm, metav1.CreateOptions{})
		mustf(t, err, "creating it straight in kube-apiserver, which accepts it")
		_, err = f.ctrl.kube.CoreV1().ConfigMaps(f.ns).Patch(ctx, name, types.MergePatchType, []byte(`{"data":{"k":"b"}}`), metav1.PatchOptions{FieldManager: wgManager})
		unserved("the patch", err)
		if after := f.getCM(name); after.ResourceVersion != stored.ResourceVersion {
			t.Fatalf("the ConfigMap changed: resourceVersion %s → %s", stored.ResourceVersion, after.ResourceVersion)
		}

		// No object of an unserved kind exists (removing a kind's
		// CustomResourceDefinition removes its objects): cleaning up after
		// it is allowed, as the refusal's message suggests.
		moved := cm.DeepCopy()
		moved.Name = name + "-moved"
		_, err = directClient(t).CoreV1().ConfigMaps(f.ns).Create(ctx, moved, metav1.CreateOptions{})
		mustf(t, err, "a second orphan, straight in kube-apiserver")
		_, err = f.ctrl.kube.CoreV1().ConfigMaps(f.ns).Patch(ctx, moved.Name, types.JSONPatchType, []byte(`[{"op":"remove","path":"/metadata/ownerReferences"}]`), metav1.PatchOptions{FieldManager: wgManager})
		mustf(t, err, "removing the ownerReference to the unserved kind")
		if refs := f.getCM(moved.Name).OwnerReferences; len(refs) != 0 {
			t.Fatalf("the ownerReference is still there: %v", refs)
		}
		mustf(t, f.ctrl.kube.CoreV1().ConfigMaps(f.ns).Delete(ctx, name, metav1.DeleteOptions{}), "deleting the orphan")
		if _, err := directClient(t).CoreV1().ConfigMaps(f.ns).Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the orphan is still there after its delete: %v", err)
		}
	})
}
