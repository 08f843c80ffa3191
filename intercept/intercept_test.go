package intercept

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/endpoints/request"

	"github.com/kausality-io/kausality-proxy/intercept/body"
	"github.com/kausality-io/kausality-proxy/intercept/config"
	"github.com/kausality-io/kausality-proxy/intercept/decision"
	"github.com/kausality-io/kausality-proxy/intercept/patch"
	"github.com/kausality-io/kausality-proxy/intercept/upstream"
)

var infoFactory = &request.RequestInfoFactory{APIPrefixes: sets.NewString("api", "apis"), GrouplessAPIPrefixes: sets.NewString("api")}

func requestFor(t testing.TB, method, target, userAgent string) *http.Request {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	r.Header.Set("User-Agent", userAgent)
	info, err := infoFactory.NewRequestInfo(r)
	if err != nil {
		t.Fatal(err)
	}
	return r.WithContext(request.WithRequestInfo(r.Context(), info))
}

func TestClassify(t *testing.T) {
	i := New(Config{})
	cases := []struct {
		name, method, path, ua string
		intercepted            bool
		op                     decision.Operation
		sub                    subresourceKind
		dryRun                 bool
		manager                string
		collection             bool
	}{
		{name: "create", method: "POST", path: "/apis/apps/v1/namespaces/prod/replicasets", ua: "kube-controller-manager/v1.35.4 (linux/amd64) kubernetes/abc/system:serviceaccount:kube-system:deployment-controller", intercepted: true, op: decision.Create, manager: "kube-controller-manager"},
		{name: "update", method: "PUT", path: "/apis/apps/v1/namespaces/prod/replicasets/web", intercepted: true, op: decision.Update},
		{name: "patch with field manager", method: "PATCH", path: "/api/v1/namespaces/prod/configmaps/c?fieldManager=argo", ua: "kubectl/v1.35", intercepted: true, op: decision.Update, manager: "argo"},
		{name: "delete", method: "DELETE", path: "/api/v1/namespaces/prod/pods/p", ua: "kubectl/v1.35", intercepted: true, op: decision.Delete, manager: "kubectl"},
		{name: "dry run", method: "POST", path: "/api/v1/namespaces/prod/configmaps?dryRun=All", ua: "kubectl", intercepted: true, op: decision.Create, dryRun: true, manager: "kubectl"},
		{name: "status update", method: "PUT", path: "/apis/apps/v1/namespaces/prod/deployments/web/status", intercepted: true, op: decision.Update, sub: statusSubresource},
		{name: "scale update", method: "PUT", path: "/apis/apps/v1/namespaces/prod/replicasets/web/scale", intercepted: true, op: decision.Update, sub: scaleSubresource},
		{name: "scale patch", method: "PATCH", path: "/apis/apps/v1/namespaces/prod/deployments/web/scale", intercepted: true, op: decision.Update, sub: scaleSubresource},
		{name: "cluster-scoped custom resource", method: "PUT", path: "/apis/example.com/v1/widgets/w", intercepted: true, op: decision.Update},
		{name: "get", method: "GET", path: "/api/v1/namespaces/prod/configmaps/c"},
		{name: "list", method: "GET", path: "/api/v1/namespaces/prod/configmaps"},
		{name: "watch", method: "GET", path: "/api/v1/namespaces/prod/configmaps?watch=true"},
		{name: "deletecollection: each object it deletes is decided", method: "DELETE", path: "/api/v1/namespaces/prod/configmaps?labelSelector=app%3Dweb", ua: "kubectl", intercepted: true, op: decision.Delete, manager: "kubectl", collection: true},
		{name: "deletecollection in an excluded namespace", method: "DELETE", path: "/api/v1/namespaces/kube-system/configmaps"},
		{name: "eviction: a delete of the pod", method: "POST", path: "/api/v1/namespaces/prod/pods/p/eviction", ua: "kubectl", intercepted: true, op: decision.Delete, sub: evictionSubresource, manager: "kubectl"},
		{name: "eviction dry run", method: "POST", path: "/api/v1/namespaces/prod/pods/p/eviction?dryRun=All", intercepted: true, op: decision.Delete, sub: evictionSubresource, dryRun: true},
		{name: "eviction is a pods subresource only", method: "POST", path: "/apis/example.com/v1/namespaces/prod/widgets/w/eviction"},
		{name: "reading an eviction is no write", method: "GET", path: "/api/v1/namespaces/prod/pods/p/eviction"},
		{name: "binding subresource", method: "POST", path: "/api/v1/namespaces/prod/pods/p/binding"},
		{name: "token subresource", method: "POST", path: "/api/v1/namespaces/prod/serviceaccounts/sa/token"},
		{name: "exec", method: "POST", path: "/api/v1/namespaces/prod/pods/p/exec"},
		{name: "status create is not a thing", method: "POST", path: "/apis/apps/v1/namespaces/prod/deployments/web/status"},
		{name: "excluded namespace", method: "PUT", path: "/apis/apps/v1/namespaces/kube-system/deployments/coredns"},
		{name: "excluded kind", method: "PUT", path: "/apis/coordination.k8s.io/v1/namespaces/prod/leases/l"},
		{name: "events", method: "POST", path: "/api/v1/namespaces/prod/events"},
		{name: "token review", method: "POST", path: "/apis/authentication.k8s.io/v1/tokenreviews"},
		{name: "non-resource", method: "POST", path: "/version"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w, ok := i.classify(requestFor(t, tc.method, tc.path, tc.ua))
			if ok != tc.intercepted {
				t.Fatalf("intercepted = %v, want %v", ok, tc.intercepted)
			}
			if !ok {
				return
			}
			if w.op != tc.op || w.sub != tc.sub || w.dryRun != tc.dryRun || w.fieldManager != tc.manager || w.collection != tc.collection {
				t.Fatalf("got op=%s sub=%d dryRun=%v manager=%q collection=%v", w.op, w.sub, w.dryRun, w.fieldManager, w.collection)
			}
		})
	}
}

func TestClassifyFollowsConfig(t *testing.T) {
	cfg, err := config.Parse([]byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\nresourceRules:\n  include:\n  - apiGroups: [apps]\n    resources: [replicasets]\nexcludedNamespaces: [sandbox]\n"))
	if err != nil {
		t.Fatal(err)
	}
	i := New(Config{Settings: func() *config.Config { return cfg }})
	for path, want := range map[string]bool{
		"/apis/apps/v1/namespaces/prod/replicasets/web":      true,
		"/apis/apps/v1/namespaces/prod/deployments/web":      false,
		"/apis/apps/v1/namespaces/sandbox/replicasets/web":   false,
		"/apis/apps/v1/namespaces/kube-system/replicasets/x": true,
	} {
		if _, got := i.classify(requestFor(t, "PUT", path, "")); got != want {
			t.Errorf("%s: intercepted=%v, want %v", path, got, want)
		}
	}
}

func TestDefaultFieldManager(t *testing.T) {
	for ua, want := range map[string]string{
		"kube-controller-manager/v1.35.4 (linux/amd64) kubernetes/abc": "kube-controller-manager",
		"kubectl/v1.35.4 (linux/amd64)":                                "kubectl",
		"my-controller":                                                "my-controller",
		"":                                                             "",
		"bad\x00agent/1":                                               "badagent",
		strings.Repeat("x", 200) + "/1":                                strings.Repeat("x", 128),
	} {
		if got := patch.EffectiveFieldManager("", ua); got != want {
			t.Errorf("EffectiveFieldManager(%q) = %q, want %q", ua, got, want)
		}
	}
}

func TestReadBody(t *testing.T) {
	payload := bytes.Repeat([]byte("a"), 100)
	cases := []struct {
		name     string
		limit    int64
		tooLarge bool
	}{
		{"under", 200, false},
		{"exact", 100, false},
		{"over", 99, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("POST", "/", bytes.NewReader(payload))
			_, tooLarge, err := readBody(httptest.NewRecorder(), r, tc.limit)
			if err != nil || tooLarge != tc.tooLarge {
				t.Fatalf("tooLarge=%v err=%v", tooLarge, err)
			}
			// Either way the request still carries the whole body, for
			// forwarding (shadow mode forwards even oversized bodies).
			rest, _ := io.ReadAll(r.Body)
			if !bytes.Equal(rest, payload) {
				t.Fatalf("body after readBody: %d bytes", len(rest))
			}
		})
	}
}

// A body that trickles in must not hold the write past the request's
// deadline. The server reads under a short deadline; the client sends one
// byte and then nothing, and its body is never closed by the test.
func TestReadBodyHonoursTheRequestDeadline(t *testing.T) {
	got := make(chan error, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 300*time.Millisecond)
		defer cancel()
		_, _, err := readBody(w, r.WithContext(ctx), 1<<20)
		got <- err
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write([]byte("{")) }()
	req, err := http.NewRequest(http.MethodPost, srv.URL, pr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		resp, err := srv.Client().Do(req)
		if err == nil {
			_ = resp.Body.Close()
		}
	}()
	err = <-got
	var status apierrors.APIStatus
	if !errors.As(err, &status) || status.Status().Code != http.StatusGatewayTimeout || status.Status().Reason != metav1.StatusReasonTimeout {
		t.Fatalf("readBody returned %v, want a 504 Timeout Status", err)
	}
}

func TestFormatWarning(t *testing.T) {
	got := formatWarning("drift on \"web\"\nnext line")
	if got != `299 - "drift on \"web\" next line"` {
		t.Fatalf("%s", got)
	}
	// What kubectl prints after unquoting must not carry escape sequences.
	got = formatWarning("frozen: \x1b[2J\u202eevil")
	text, err := strconv.Unquote(strings.TrimPrefix(got, "299 - "))
	if err != nil || strings.ContainsAny(text, "\x1b\u202e") {
		t.Fatalf("%s unquotes to %q (%v), which a terminal would interpret", got, text, err)
	}
}

func TestUnresolvableFollowsFailurePolicy(t *testing.T) {
	transport := &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connect: connection refused")}
	unknownKind := errors.New(`no matches for kind "Ghost" in version "ghosts.example.com/v1"`)
	forbidden := apierrors.NewForbidden(schemaGR("apps", "deployments"), "web", errors.New("no RBAC"))
	cases := []struct {
		policy FailurePolicy
		err    error
		code   int32
	}{
		{FailurePolicyFail, transport, 503},
		{FailurePolicyFail, forbidden, 500},
		{FailurePolicyFail, unknownKind, 500},
		{FailurePolicyIgnore, transport, 0},
	}
	for _, tc := range cases {
		i := New(Config{FailurePolicy: tc.policy})
		err := i.unresolvable(tc.err)
		var ignored *ignoredError
		if tc.code == 0 {
			if !errors.As(err, &ignored) {
				t.Fatalf("%s: %v is not ignored", tc.policy, err)
			}
			continue
		}
		var status apierrors.APIStatus
		if !errors.As(err, &status) || status.Status().Code != tc.code || !strings.Contains(status.Status().Message, "--failure-policy=Fail") {
			t.Fatalf("%s %v: got %v", tc.policy, tc.err, err)
		}
	}
}

func configMap() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": "c", "namespace": "prod", "resourceVersion": "7"},
		"data":     map[string]any{"k": "v2"},
	}}
}

// prepare writes the decision's child annotations into every body format
// and every patch type, in the same request.
func TestPrepareEveryShape(t *testing.T) {
	d := &decision.Decision{ChildAnnotations: &decision.AnnotationChanges{Set: map[string]string{"kausality.io/trace": `[{"kind":"X"}]`}}}
	jsonBody := []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","namespace":"prod"},"data":{"k":"v2"}}`)
	protoBody, _, err := body.Encode(configMap(), body.Protobuf)
	if err != nil {
		t.Fatal(err)
	}
	cborBody, _, err := body.Encode(configMap(), body.CBOR)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, verb, contentType string
		data                    []byte
		patchType               types.PatchType
		format                  body.Format
	}{
		{name: "json create", verb: "create", contentType: "application/json", data: jsonBody, format: body.JSON},
		{name: "yaml update", verb: "update", contentType: "application/yaml", data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: v2\n"), format: body.YAML},
		{name: "protobuf update", verb: "update", contentType: "application/vnd.kubernetes.protobuf", data: protoBody, format: body.Protobuf},
		{name: "cbor update", verb: "update", contentType: "application/cbor", data: cborBody, format: body.CBOR},
		{name: "merge patch", verb: "patch", contentType: string(types.MergePatchType), data: []byte(`{"data":{"k":"v2"}}`), patchType: types.MergePatchType},
		{name: "strategic merge patch", verb: "patch", contentType: string(types.StrategicMergePatchType), data: []byte(`{"data":{"k":"v2"}}`), patchType: types.StrategicMergePatchType},
		{name: "json patch", verb: "patch", contentType: string(types.JSONPatchType), data: []byte(`[{"op":"replace","path":"/data/k","value":"v2"}]`), patchType: types.JSONPatchType},
		{name: "apply", verb: "patch", contentType: string(types.ApplyYAMLPatchType), data: []byte("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  k: v2\n"), patchType: types.ApplyYAMLPatchType},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest("PUT", "/api/v1/namespaces/prod/configmaps/c", bytes.NewReader(tc.data))
			r.Header.Set("Content-Type", tc.contentType)
			f := &facts{req: &writeRequest{w: &write{verb: tc.verb, sub: mainResource}}, data: tc.data, format: tc.format, patchType: tc.patchType, new: configMap(), sent: configMap()}
			prepared, err := prepare(r, f, d)
			if err != nil {
				t.Fatal(err)
			}
			out := prepared.req
			sent, _ := io.ReadAll(out.Body)
			if out.ContentLength != int64(len(sent)) {
				t.Fatalf("Content-Length %d for %d bytes", out.ContentLength, len(sent))
			}
			var result *unstructured.Unstructured
			if tc.verb == "patch" {
				old := configMap()
				old.Object["data"] = map[string]any{"k": "v1"}
				opts := patch.Options{}
				if tc.patchType == types.ApplyYAMLPatchType {
					force := true // the old object's fields have no owner yet
					opts = patch.Options{FieldManager: "m", Force: &force}
				}
				result, err = patch.Apply(tc.patchType, old, sent, opts)
			} else {
				result, _, err = body.Decode(out.Header.Get("Content-Type"), sent, nil)
			}
			if err != nil {
				t.Fatalf("forwarded body does not decode/apply: %v\n%q", err, sent)
			}
			if got := result.GetAnnotations()["kausality.io/trace"]; got != `[{"kind":"X"}]` {
				t.Fatalf("trace annotation %q in %v", got, result.Object)
			}
			if v, _, _ := unstructured.NestedString(result.Object, "data", "k"); v != "v2" {
				t.Fatalf("the write's own change was lost: data.k=%q", v)
			}
		})
	}
	// Nothing to write: the request is forwarded as it came.
	r := httptest.NewRequest("PUT", "/", bytes.NewReader(jsonBody))
	out, err := prepare(r, &facts{req: &writeRequest{w: &write{verb: "update"}}, new: configMap()}, &decision.Decision{})
	if err != nil || out.req != r {
		t.Fatalf("unchanged request was rebuilt: %v", err)
	}
	_ = context.Background
}

func schemaGR(group, resource string) schema.GroupResource {
	return schema.GroupResource{Group: group, Resource: resource}
}

// A dry run must be one where kube-apiserver reads it: a DELETE with a body
// takes its options from the body alone.
func TestDryRunGoesWhereKubeAPIServerReadsIt(t *testing.T) {
	cases := []struct {
		name, method, contentType, body string
		wantQuery                       bool
		wantBody                        string
	}{
		{"update: in the query", "PUT", "application/json", `{"kind":"ConfigMap"}`, true, `{"kind":"ConfigMap"}`},
		{"delete without a body: in the query", "DELETE", "", "", true, ""},
		{"delete with a body: in the body", "DELETE", "application/json", `{"kind":"DeleteOptions","apiVersion":"v1","propagationPolicy":"Foreground"}`, false,
			`{"kind":"DeleteOptions","apiVersion":"meta.k8s.io/v1","propagationPolicy":"Foreground","dryRun":["All"]}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "/api/v1/namespaces/prod/configmaps/c", bytes.NewReader([]byte(tc.body)))
			if tc.contentType != "" {
				r.Header.Set("Content-Type", tc.contentType)
			}
			dry, err := upstream.DryRunOf(r, []byte(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			if got := dry.URL.Query().Get("dryRun") == "All"; got != tc.wantQuery {
				t.Errorf("dryRun in the query: %v, want %v", got, tc.wantQuery)
			}
			got, _ := io.ReadAll(dry.Body)
			if string(got) != tc.wantBody {
				t.Errorf("body %s, want %s", got, tc.wantBody)
			}
		})
	}
}

func TestDeleteDryRunFromTheBody(t *testing.T) {
	cases := []struct {
		name, method string
		sub          subresourceKind
		body         string
		want         bool
	}{
		{"delete options with dryRun", "DELETE", mainResource, `{"kind":"DeleteOptions","apiVersion":"v1","dryRun":["All"]}`, true},
		{"delete options without", "DELETE", mainResource, `{"kind":"DeleteOptions","apiVersion":"v1"}`, false},
		{"no body", "DELETE", mainResource, ``, false},
		{"an eviction asking for a dry run (kubectl drain --dry-run=server)", "POST", evictionSubresource,
			`{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"p"},"deleteOptions":{"dryRun":["All"]}}`, true},
		{"a plain eviction", "POST", evictionSubresource, `{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"p"}}`, false},
		{"an update's body is not delete options", "PUT", mainResource, `{"dryRun":["All"]}`, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "/api/v1/namespaces/prod/pods/p", bytes.NewReader([]byte(tc.body)))
			r.Header.Set("Content-Type", "application/json")
			got, err := deleteDryRun(r, &write{sub: tc.sub}, []byte(tc.body))
			if err != nil || got != tc.want {
				t.Errorf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
