package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// These scenarios prove that the proxy works with its own credentials only
// for a caller who may do the write: each runs with an identity that has no
// rights at all, and kube-apiserver's audit log shows what reached it.

// rawDo sends one request through the proxy with an HTTP/1.1 client and
// returns the code and body.
func rawDo(t *testing.T, c *http.Client, method, path, contentType, body string, header http.Header) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, cluster.ProxyEndpoint().URL+path, strings.NewReader(body))
	mustf(t, err, "request")
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	resp, err := c.Do(req)
	mustf(t, err, "%s %s", method, path)
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

// nobody is a client-certificate identity without any RBAC binding.
func nobody(t *testing.T) (string, *http.Client) {
	t.Helper()
	name := "nobody-" + utilrand.String(5)
	cfg, err := cluster.UserThroughProxy(name)
	mustf(t, err, "user %s", name)
	return name, rawClient(t, certOf(t, cfg))
}

// auditedSince returns the audit events received since start that match.
func auditedSince(t *testing.T, start time.Time, match func(auditv1.Event) bool) []auditv1.Event {
	t.Helper()
	events, err := cluster.AuditEvents()
	mustf(t, err, "reading the audit log")
	var out []auditv1.Event
	for _, e := range events {
		if !e.RequestReceivedTimestamp.Time.Before(start) && match(e) {
			out = append(out, e)
		}
	}
	return out
}

// waitAudited waits until a request whose URI contains marker is in the
// audit log: the positive control that makes "nothing was audited" mean
// something.
func waitAudited(t *testing.T, marker string) {
	t.Helper()
	eventually(t, 30*time.Second, "the control request is audited", func() error {
		events, err := cluster.AuditEvents()
		if err != nil {
			return err
		}
		for _, e := range events {
			if strings.Contains(e.RequestURI, marker) || (e.ObjectRef != nil && e.ObjectRef.Name == marker) {
				return nil
			}
		}
		return fmt.Errorf("not yet")
	})
}

func describeEvents(events []auditv1.Event) string {
	var b strings.Builder
	for _, e := range events {
		imp := ""
		if e.ImpersonatedUser != nil {
			imp = " as " + e.ImpersonatedUser.Username
		}
		fmt.Fprintf(&b, "\n  %s %s by %s%s", e.Verb, e.RequestURI, e.User.Username, imp)
	}
	return b.String()
}

// A caller who may not write gets kube-apiserver's own 403, and the proxy
// has neither read the object nor forwarded anything: no stored value can
// leak through an error, and nothing tells whether the object exists.
func TestUnauthorizedWritesGetForbiddenAndCauseNoWork(t *testing.T) {
	ctx := context.Background()
	ns := newNamespace(t, "authz-first")
	password := "pw-" + utilrand.String(12)
	_, err := directClient(t).CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "topsecret"},
		StringData: map[string]string{"password": password},
	}, metav1.CreateOptions{})
	mustf(t, err, "creating the Secret")
	user, c := nobody(t)
	start := time.Now().Add(-time.Second)

	forbidden := func(resource, name, namespace string) string {
		where := "at the cluster scope"
		if namespace != "" {
			where = fmt.Sprintf("in the namespace %q", namespace)
		}
		group, qualified := `""`, resource
		if resource == "clusterroles" {
			group, qualified = `"rbac.authorization.k8s.io"`, resource+".rbac.authorization.k8s.io"
		}
		return fmt.Sprintf(`%s %q is forbidden: User %q cannot patch resource %q in API group %s %s`, qualified, name, user, resource, group, where)
	}
	secretPath := "/api/v1/namespaces/" + ns + "/secrets/"
	cases := []struct {
		name, path, contentType, body, want string
	}{
		{"copy the data into kind", secretPath + "topsecret", "application/json-patch+json",
			`[{"op":"copy","from":"/data","path":"/kind"}]`, forbidden("secrets", "topsecret", ns)},
		{"copy a value into the name", secretPath + "topsecret", "application/json-patch+json",
			`[{"op":"copy","from":"/data/password","path":"/metadata/name"}]`, forbidden("secrets", "topsecret", ns)},
		{"test a stored value", secretPath + "topsecret", "application/json-patch+json",
			`[{"op":"test","path":"/data/password","value":"x"}]`, forbidden("secrets", "topsecret", ns)},
		{"probe for an object that does not exist", secretPath + "does-not-exist", "application/merge-patch+json",
			`{"data":{}}`, forbidden("secrets", "does-not-exist", ns)},
		{"copy cluster-admin's rules into kind", "/apis/rbac.authorization.k8s.io/v1/clusterroles/cluster-admin", "application/json-patch+json",
			`[{"op":"copy","from":"/rules","path":"/kind"}]`, forbidden("clusterroles", "cluster-admin", "")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, body := rawDo(t, c, http.MethodPatch, tc.path, tc.contentType, tc.body, nil)
			if code != http.StatusForbidden {
				t.Fatalf("code %d, want 403: %s", code, body)
			}
			s := decodeStatus(t, body)
			if s.Reason != metav1.StatusReasonForbidden || s.Message != tc.want {
				t.Fatalf("status %s %q\nwant kube-apiserver's %q", s.Reason, s.Message, tc.want)
			}
			if strings.Contains(string(body), password) || strings.Contains(string(body), "password") {
				t.Fatalf("the answer leaks the Secret: %s", body)
			}
		})
	}

	// Positive control, then the proof: nothing about the Secret or
	// cluster-admin reached kube-apiserver after the test started, neither
	// as the caller nor as the proxy itself.
	marker := "authz-control-" + utilrand.String(5)
	admin, err := cluster.UserThroughProxy("auditor", "system:masters")
	mustf(t, err, "auditor")
	_, err = clientFor(t, admin).CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: marker}}, metav1.CreateOptions{})
	mustf(t, err, "control write")
	waitAudited(t, marker)
	touched := auditedSince(t, start, func(e auditv1.Event) bool {
		if e.ObjectRef == nil {
			return false
		}
		if e.ObjectRef.Resource == "secrets" && e.ObjectRef.Namespace == ns {
			return e.Verb != "create" // the test's own setup
		}
		if e.ObjectRef.Resource == "clusterroles" && e.ObjectRef.Name == "cluster-admin" {
			return true
		}
		return e.ImpersonatedUser != nil && e.ImpersonatedUser.Username == user || e.User.Username == user
	})
	if len(touched) > 0 {
		t.Fatalf("kube-apiserver saw requests for refused writes:%s", describeEvents(touched))
	}
}

// A certificate whose group carries white space would be trimmed into
// system:masters by kube-apiserver's HTTP/1.1 parser on the upgrade path.
// The proxy refuses the identity on every path, and nothing is created.
func TestIdentityWithWhiteSpaceIsRefused(t *testing.T) {
	name := "eve-" + utilrand.String(5)
	cfg, err := cluster.UserThroughProxy(name, " system:masters")
	mustf(t, err, "user %s", name)
	c := rawClient(t, certOf(t, cfg))
	crb := "kausality-e2e-" + name
	body := fmt.Sprintf(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":%q},`+
		`"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"},`+
		`"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":%q}]}`, crb, name)
	for _, upgrade := range []bool{true, false} {
		header := http.Header{}
		if upgrade {
			header.Set("Connection", "Upgrade")
			header.Set("Upgrade", "SPDY/3.1")
		}
		code, data := rawDo(t, c, http.MethodPost, "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", "application/json", body, header)
		if code != http.StatusUnauthorized {
			t.Fatalf("upgrade=%v: code %d, want 401: %s", upgrade, code, data)
		}
		if s := decodeStatus(t, data); !strings.Contains(s.Message, "white space") {
			t.Fatalf("upgrade=%v: message %q does not say what is wrong", upgrade, s.Message)
		}
	}
	if _, err := directClient(t).RbacV1().ClusterRoleBindings().Get(context.Background(), crb, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the ClusterRoleBinding exists (or cannot be read): %v", err)
	}
}

// A write sent with Connection: Upgrade is served as a plain write: the
// caller gets the real answer, and a once approval admits exactly one
// write however the writes are sent.
func TestOnceApprovalThroughTheUpgradePathIsUsedOnce(t *testing.T) {
	f := newOnceApprovedGadget(t, "wg-upgrade")
	f.settleGadget("g", "Allow/DriftApproved")

	c := rawClient(t, nil)
	header := http.Header{
		"Authorization": {"Bearer " + f.ctrl.cfg.BearerToken},
		"Connection":    {"Upgrade"},
		"Upgrade":       {"SPDY/3.1"},
	}
	path := fmt.Sprintf("/apis/%s/namespaces/%s/gadgets/g?fieldManager=%s", wgAPIVersion, f.ns, wgManager)
	for i, value := range []string{"b", "c", "d"} {
		code, data := rawDo(t, c, http.MethodPatch, path, "application/merge-patch+json", fmt.Sprintf(`{"spec":{"value":%q}}`, value), header)
		switch {
		case i == 0 && code != http.StatusOK:
			t.Fatalf("the approved write: code %d, want 200: %s", code, data)
		case i > 0 && code != http.StatusForbidden:
			t.Fatalf("write %d after the once approval was used: code %d, want 403: %s", i+1, code, data)
		}
	}
	if v := f.gadgetValue("g"); v != "b" {
		t.Fatalf("Gadget value %q, want b: only the approved write may land", v)
	}
	if v, ok := f.getWidget().GetAnnotations()[wgAnnApprovals]; ok {
		t.Fatalf("the once approval is still on the Widget: %s", v)
	}
}

// A caller who may not write a child makes the proxy write nothing to its
// parent: no approval is reserved, restored or consumed, and the parent's
// resourceVersion (and a Deployment's generation) does not move.
func TestUnauthorizedWriteTouchesNoApproval(t *testing.T) {
	f := newOnceApprovedGadget(t, "wg-nobody")
	f.settleGadget("g", "Allow/DriftApproved")
	before := f.getWidget().GetResourceVersion()

	_, c := nobody(t)
	path := fmt.Sprintf("/apis/%s/namespaces/%s/gadgets/g?fieldManager=%s", wgAPIVersion, f.ns, wgManager)
	for i := 0; i < 3; i++ {
		code, data := rawDo(t, c, http.MethodPatch, path, "application/merge-patch+json", `{"spec":{"value":"mallory"}}`, nil)
		if code != http.StatusForbidden || !strings.Contains(string(data), "cannot patch resource") {
			t.Fatalf("code %d, want kube-apiserver's 403: %s", code, data)
		}
	}
	w := f.getWidget()
	if w.GetResourceVersion() != before {
		t.Fatalf("the Widget was written for an unauthorized caller: resourceVersion %s → %s", before, w.GetResourceVersion())
	}
	if got := wgApprovals(t, w.GetAnnotations()[wgAnnApprovals]); len(got) != 1 {
		t.Fatalf("approvals %v, want the once approval untouched", got)
	}
	// The approval still admits the controller's write.
	_, err := f.setValue("g", "b", false)
	mustf(t, err, "the controller's approved write")
}

// A controller patch that replaces metadata.annotations as a whole would
// drop every kausality.io annotation. The proxy cannot rewrite it, so it
// refuses it instead of forwarding it.
func TestPatchDroppingAllAnnotationsIsRefused(t *testing.T) {
	f := newInitializedGadgetFamily(t, "wg-annnull", "enforce")
	f.bumpSpec() // the controller now acts on a spec change: allowed, traced
	f.settleGadget("g", "Allow/Expected")

	_, err := f.gadgets(f.ctrl).Patch(context.Background(), "g", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":null},"spec":{"value":"b"}}`), metav1.PatchOptions{FieldManager: wgManager})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "metadata.annotations") {
		t.Fatalf("the patch: %v, want a 422 naming metadata.annotations", err)
	}
	g, err := f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Get(context.Background(), "g", metav1.GetOptions{})
	mustf(t, err, "get Gadget")
	if _, ok := g.GetAnnotations()[wgAnnTrace]; !ok {
		t.Fatalf("the Gadget lost its trace: %v", g.GetAnnotations())
	}
	if v, _, _ := unstructured.NestedString(g.Object, "spec", "value"); v != "a" {
		t.Fatalf("the refused patch was applied: value %q", v)
	}
	// The same change, patching one annotation key, goes through.
	_, err = f.gadgets(f.ctrl).Patch(context.Background(), "g", types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"example.com/note":null}},"spec":{"value":"b"}}`), metav1.PatchOptions{FieldManager: wgManager})
	mustf(t, err, "the key-wise patch")
}
