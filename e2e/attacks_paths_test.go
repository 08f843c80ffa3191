//go:build !kind

package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/sets"
	auditv1 "k8s.io/apiserver/pkg/apis/audit/v1"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// kubeAPIServerRequestInfo builds the RequestInfo kube-apiserver builds for
// a request: its own factory, with its prefixes.
func kubeAPIServerRequestInfo(t *testing.T, method, rawPath string) *request.RequestInfo {
	t.Helper()
	u, err := url.Parse("https://kube-apiserver" + rawPath)
	mustf(t, err, "path %s", rawPath)
	factory := &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}
	info, err := factory.NewRequestInfo(&http.Request{Method: method, URL: u})
	mustf(t, err, "request info of %s", rawPath)
	return info
}

// TestAttackPathTricks: writes to Secrets, which the attacker may not make,
// spelled with dot segments (plain and %-encoded), encoded slashes, double
// and trailing slashes, so that a path normalized differently by the proxy
// and by kube-apiserver could authorize one resource and write another. The
// proxy's answer must be kube-apiserver's own for the same identity; for
// every path kube-apiserver reads as a Secret write, that is a 403.
func TestAttackPathTricks(t *testing.T) {
	f := newAttackFixture(t)
	start := time.Now().Add(-time.Second)
	marker := "atk-path-" + utilrand.String(5)
	ns := f.ns
	_, err := directClient(t).CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: marker}}, metav1.CreateOptions{})
	mustf(t, err, "the Secret")
	_, err = directClient(t).CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: marker}}, metav1.CreateOptions{})
	mustf(t, err, "the ConfigMap")
	secret := fmt.Sprintf(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"%s-new"},"stringData":{"k":"v"}}`, marker)
	patch := `{"stringData":{"k":"stolen"}}`
	cases := []struct {
		name, method, path, contentType, body string
	}{
		{"dot-dot from configmaps to secrets", http.MethodPost, "/api/v1/namespaces/" + ns + "/configmaps/../secrets", "application/json", secret},
		{"encoded dot-dot", http.MethodPost, "/api/v1/namespaces/" + ns + "/configmaps/%2e%2e/secrets", "application/json", secret},
		{"upper-case encoded dot-dot", http.MethodPost, "/api/v1/namespaces/" + ns + "/configmaps/%2E%2E/secrets", "application/json", secret},
		{"dot-dot out of a ConfigMap name into a Secret", http.MethodPatch, "/api/v1/namespaces/" + ns + "/configmaps/" + marker + "/../../secrets/" + marker, "application/merge-patch+json", patch},
		{"encoded slash in the resource", http.MethodPatch, "/api/v1/namespaces/" + ns + "/configmaps%2F..%2Fsecrets/" + marker, "application/merge-patch+json", patch},
		{"encoded slash in the name", http.MethodPatch, "/api/v1/namespaces/" + ns + "/secrets/" + marker + "%2Fstatus", "application/merge-patch+json", patch},
		{"dot segment", http.MethodPatch, "/api/v1/namespaces/" + ns + "/./secrets/" + marker, "application/merge-patch+json", patch},
		{"double slash before the resource", http.MethodPatch, "/api/v1/namespaces/" + ns + "//secrets/" + marker, "application/merge-patch+json", patch},
		{"double slash at the start", http.MethodPatch, "//api/v1/namespaces/" + ns + "/secrets/" + marker, "application/merge-patch+json", patch},
		{"double slash in the prefix", http.MethodPost, "/api//v1/namespaces/" + ns + "/secrets", "application/json", secret},
		{"trailing slash on the collection", http.MethodPost, "/api/v1/namespaces/" + ns + "/secrets/", "application/json", secret},
		{"trailing slash on the object", http.MethodPatch, "/api/v1/namespaces/" + ns + "/secrets/" + marker + "/", "application/merge-patch+json", patch},
		{"from another group's prefix", http.MethodPatch, "/apis/../api/v1/namespaces/" + ns + "/secrets/" + marker, "application/merge-patch+json", patch},
		{"empty namespace segment", http.MethodPost, "/api/v1/namespaces//secrets", "application/json", secret},
		{"configmap subresource named secrets", http.MethodPatch, "/api/v1/namespaces/" + ns + "/configmaps/" + marker + "/secrets", "application/merge-patch+json", patch},
	}
	for _, who := range []attacker{f.cert, f.token} {
		for _, tc := range cases {
			t.Run(who.kind()+"/"+tc.name, func(t *testing.T) {
				info := kubeAPIServerRequestInfo(t, tc.method, tc.path)
				code, body := sendRaw(t, who.proxyClient(t), cluster.ProxyEndpoint().URL, tc.method, tc.path, tc.contentType, []byte(tc.body), who.header())
				direct, directBody := sendRaw(t, directHTTPClient(t, who.cert), directURL(), tc.method, tc.path, tc.contentType, []byte(tc.body), who.header())
				if code != direct {
					t.Fatalf("kube-apiserver reads this as %s %s/%s %q: through the proxy %d, straight to kube-apiserver %d\nproxy: %s\nkube-apiserver: %s",
						info.Verb, info.Resource, info.Subresource, info.Name, code, direct, body, directBody)
				}
				if info.IsResourceRequest && info.Resource == "secrets" && info.Subresource == "" && code != http.StatusForbidden && code != http.StatusNotFound {
					t.Fatalf("a Secret write by %s answered %d: %s", who.user, code, body)
				}
				if code >= 200 && code < 300 {
					t.Fatalf("the attacker's write succeeded (%s %s/%s): %s", info.Verb, info.Resource, info.Subresource, body)
				}
			})
		}
	}
	s, err := directClient(t).CoreV1().Secrets(ns).Get(context.Background(), marker, metav1.GetOptions{})
	mustf(t, err, "the Secret")
	if len(s.Data) > 0 {
		t.Fatalf("the Secret was written: %v", s.Data)
	}
	if _, err := directClient(t).CoreV1().Secrets(ns).Get(context.Background(), marker+"-new", metav1.GetOptions{}); err == nil {
		t.Fatalf("a Secret was created")
	}
	expectOnlyCaller(t, start, marker, f.cert.user, f.token.user)
}

// TestAttackDuplicateQueryParameters: dryRun and fieldManager given twice.
// kube-apiserver rejects a dryRun list with anything but "All" in it, and
// takes the first fieldManager; the proxy acts on the same values, or
// refuses. Nothing is written, and no once approval is used up by a write
// that was never going to land.
func TestAttackDuplicateQueryParameters(t *testing.T) {
	f := newOnceApprovedGadget(t, "atk-query")
	approval := f.getWidget().GetAnnotations()[wgAnnApprovals]
	f.settleGadget("g", "Allow/DriftApproved")
	header := http.Header{"Authorization": {"Bearer " + f.ctrl.cfg.BearerToken}}
	path := fmt.Sprintf("/apis/%s/namespaces/%s/gadgets/g", wgAPIVersion, f.ns)
	cases := []struct {
		name, query string
		want        int
	}{
		{"dryRun=All then an empty dryRun", "dryRun=All&dryRun=", http.StatusUnprocessableEntity},
		{"an empty dryRun then dryRun=All", "dryRun=&dryRun=All", http.StatusUnprocessableEntity},
		{"dryRun=All then dryRun=None", "dryRun=All&dryRun=None", http.StatusUnprocessableEntity},
		{"lower-case dryRun=all", "dryRun=all", http.StatusUnprocessableEntity},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			q := tc.query + "&fieldManager=" + wgManager
			code, body := sendRaw(t, rawClient(t, nil), cluster.ProxyEndpoint().URL, http.MethodPatch, path+"?"+q, "application/merge-patch+json", []byte(`{"spec":{"value":"b"}}`), header)
			direct, directBody := sendRaw(t, directHTTPClient(t, nil), directURL(), http.MethodPatch, path+"?"+q, "application/merge-patch+json", []byte(`{"spec":{"value":"b"}}`), header)
			if direct != tc.want {
				t.Fatalf("kube-apiserver answered %d, the case expects %d: %s", direct, tc.want, directBody)
			}
			if code != tc.want {
				t.Fatalf("through the proxy %d, kube-apiserver's own answer is %d: %s", code, tc.want, body)
			}
			if v := f.gadgetValue("g"); v != "a" {
				t.Fatalf("the Gadget was written: %q", v)
			}
			if got := wgApprovals(t, f.getWidget().GetAnnotations()[wgAnnApprovals]); len(got) != 1 {
				t.Fatalf("the once approval was used by a write kube-apiserver refused: %v", got)
			}
		})
	}

	// Two field managers: kube-apiserver takes the first, and so does the
	// proxy (an apply as the second would own other fields).
	t.Run("two fieldManagers on an apply", func(t *testing.T) {
		apply := fmt.Sprintf(`{"apiVersion":%q,"kind":"Gadget","metadata":{"name":"g"},"spec":{"value":"b"}}`, wgAPIVersion)
		q := "fieldManager=" + wgManager + "&fieldManager=someone-else&force=true"
		code, body := sendRaw(t, rawClient(t, nil), cluster.ProxyEndpoint().URL, http.MethodPatch, path+"?"+q, "application/apply-patch+yaml", []byte(apply), header)
		if code != http.StatusOK {
			t.Fatalf("the approved apply: %d %s", code, body)
		}
		g, err := f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Get(context.Background(), "g", metav1.GetOptions{})
		mustf(t, err, "get Gadget")
		if v, _, _ := unstructured.NestedString(g.Object, "spec", "value"); v != "b" {
			t.Fatalf("value %q", v)
		}
		for _, mf := range g.GetManagedFields() {
			if mf.Manager == "someone-else" {
				t.Fatalf("the second fieldManager owns fields: %+v", g.GetManagedFields())
			}
		}
		if got := wgApprovals(t, f.getWidget().GetAnnotations()[wgAnnApprovals]); len(got) != 0 {
			t.Fatalf("the once approval is still there after the write it admitted: %v", got)
		}
	})

	// A DELETE with a body takes its options from the body: dryRun in the
	// query is ignored by kube-apiserver, and the delete is real. Read as a
	// dry run, it would go through without using up the once approval,
	// which would then admit the next write too.
	t.Run("dryRun=All in the query of a DELETE with a body", func(t *testing.T) {
		f.annotateWidget(map[string]*string{wgAnnApprovals: &approval})
		f.settleGadget("g", "Allow/DriftApproved")
		code, body := sendRaw(t, rawClient(t, nil), cluster.ProxyEndpoint().URL, http.MethodDelete, path+"?dryRun=All", "application/json",
			[]byte(`{"kind":"DeleteOptions","apiVersion":"v1"}`), header)
		if code != http.StatusOK {
			t.Fatalf("the approved delete: %d %s", code, body)
		}
		if _, err := f.admin.Resource(framework.GadgetGVR).Namespace(f.ns).Get(context.Background(), "g", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("kube-apiserver ran the delete as a dry run? the Gadget is still there: %v", err)
		}
		if got := wgApprovals(t, f.getWidget().GetAnnotations()[wgAnnApprovals]); len(got) != 0 {
			t.Fatalf("the Gadget was deleted and the once approval is still there: %v", got)
		}
	})
}

// TestAttackUpstreamRedirectIsNotFollowed: kube-apiserver redirects a GET of
// a pod's proxy subresource without a trailing slash. The proxy answers
// 502 with a Status, passes no Location on, and does not follow it.
func TestAttackUpstreamRedirectIsNotFollowed(t *testing.T) {
	ctx := context.Background()
	f := newAttackFixture(t, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"pods/proxy"}, Verbs: []string{"get"}})
	start := time.Now().Add(-time.Second)
	marker := "atk-redirect-" + utilrand.String(5)
	pod, err := directClient(t).CoreV1().Pods(f.ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: marker},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "registry.k8s.io/pause:3.10"}}},
	}, metav1.CreateOptions{})
	mustf(t, err, "pod")
	pod.Status.PodIP = "10.244.7.7"
	pod.Status.PodIPs = []corev1.PodIP{{IP: pod.Status.PodIP}}
	_, err = directClient(t).CoreV1().Pods(f.ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{})
	mustf(t, err, "pod status")
	waitAllowed(t, f.cert.user, "get", "pods/proxy", f.ns)
	path := "/api/v1/namespaces/" + f.ns + "/pods/" + marker + "/proxy"

	for _, who := range []attacker{f.cert, f.token} {
		t.Run(who.kind(), func(t *testing.T) {
			direct, _ := sendRaw(t, directHTTPClient(t, who.cert), directURL(), http.MethodGet, path, "", nil, who.header())
			if direct != http.StatusMovedPermanently {
				t.Fatalf("kube-apiserver answered %d, want its 301: the scenario does not redirect", direct)
			}
			req, err := http.NewRequest(http.MethodGet, cluster.ProxyEndpoint().URL+path, nil)
			mustf(t, err, "request")
			req.Header = who.header()
			resp, err := who.proxyClient(t).Do(req)
			mustf(t, err, "through the proxy")
			defer resp.Body.Close()
			body := make([]byte, 4096)
			n, _ := resp.Body.Read(body)
			body = body[:n]
			if resp.StatusCode != http.StatusBadGateway || resp.Header.Get("Location") != "" {
				t.Fatalf("code %d, Location %q: want 502 and no Location: %s", resp.StatusCode, resp.Header.Get("Location"), body)
			}
			if s := decodeStatus(t, body); s.Code != http.StatusBadGateway || !strings.Contains(s.Message, "redirect") {
				t.Fatalf("status %+v", s)
			}
		})
	}
	followed := auditedSince(t, start, func(e auditv1.Event) bool {
		return strings.HasSuffix(strings.SplitN(e.RequestURI, "?", 2)[0], marker+"/proxy/")
	})
	if len(followed) > 0 {
		t.Fatalf("the redirect was followed:%s", describeEvents(followed))
	}
	expectOnlyCaller(t, start, marker, f.cert.user, f.token.user)
}
