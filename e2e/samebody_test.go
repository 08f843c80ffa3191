//go:build !kind

package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/client-go/kubernetes/scheme"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kausality-io/kausality-proxy/e2e/framework"
)

// The proxy decides on the body as it reads it; kube-apiserver stores the
// body as it reads it. Wherever the two readings could differ (duplicate
// keys, encodings, content types, framing, unknown protobuf fields), the
// write that kube-apiserver would read as a change of the child's desired
// state must not get past a parent that holds it. Each body is first sent
// to kube-apiserver itself as a dry run: that is what it would store. Then
// the parent's controller sends it through the proxy while the parent is
// settled (enforce): a change by kube-apiserver's reading is drift and must
// be denied; a body kube-apiserver refuses must be refused; a body that
// changes nothing goes through, and what the proxy forwards is what was
// sent, or, where the proxy rewrote it, what kube-apiserver would have
// made of it.

// sbTarget is a child object of the scenario.
type sbTarget struct {
	gvr   schema.GroupVersionResource
	name  string
	value []string // the desired-state field the cases change
}

var (
	sbGadget    = sbTarget{gvr: framework.GadgetGVR, name: "g", value: []string{"spec", "value"}}
	sbConfigMap = sbTarget{gvr: corev1.SchemeGroupVersion.WithResource("configmaps"), name: "cm", value: []string{"data", "k"}}
	// sbConfigMapInjected is the ConfigMap's data key the cases add.
	sbConfigMapInjected = sbTarget{gvr: corev1.SchemeGroupVersion.WithResource("configmaps"), name: "cm", value: []string{"data", "injected"}}
)

// sbRequest is one write, as it goes on the wire.
type sbRequest struct {
	contentType string
	header      http.Header
	body        []byte
	query       string
	// raw: the request is written as bytes, framing included, by rawFraming.
	rawFraming func(head string, body []byte) string
}

func (f *wgFamily) sbStored(t *testing.T, target sbTarget) *unstructured.Unstructured {
	t.Helper()
	obj, err := f.admin.Resource(target.gvr).Namespace(f.ns).Get(context.Background(), target.name, metav1.GetOptions{})
	mustf(t, err, "get %s", target.name)
	return obj
}

// sbJSON is the stored object as JSON, with the value of field (spec or
// data) replaced by raw, written as is.
func sbJSON(t *testing.T, stored *unstructured.Unstructured, field, raw string) []byte {
	t.Helper()
	obj := stored.DeepCopy()
	unstructured.RemoveNestedField(obj.Object, "metadata", "managedFields")
	const placeholder = "SAMEBODY-PLACEHOLDER"
	obj.Object[field] = placeholder
	data, err := json.Marshal(obj.Object)
	mustf(t, err, "marshal")
	return bytes.Replace(data, []byte(`"`+placeholder+`"`), []byte(raw), 1)
}

// sbProtobuf is the stored ConfigMap in protobuf with data k set to value,
// and extra appended to the ConfigMap's own message bytes.
func sbProtobuf(t *testing.T, stored *unstructured.Unstructured, value string, extra []byte) []byte {
	t.Helper()
	cm := &corev1.ConfigMap{}
	mustf(t, runtime.DefaultUnstructuredConverter.FromUnstructured(stored.Object, cm), "typed ConfigMap")
	cm.ManagedFields = nil
	cm.Data = map[string]string{"k": value}
	raw, err := cm.Marshal()
	mustf(t, err, "protobuf")
	raw = append(raw, extra...)
	unknown := &runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, Raw: raw}
	var buf bytes.Buffer
	mustf(t, protobuf.NewSerializer(scheme.Scheme, scheme.Scheme).Encode(unknown, &buf), "protobuf envelope")
	return buf.Bytes()
}

// protobufField is a length-delimited protobuf field.
func protobufField(number int, payload []byte) []byte {
	out := appendVarint(nil, uint64(number<<3|2))
	out = appendVarint(out, uint64(len(payload)))
	return append(out, payload...)
}

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

func gzipped(t *testing.T, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	_, err := zw.Write(data)
	mustf(t, err, "gzip")
	mustf(t, zw.Close(), "gzip")
	return buf.Bytes()
}

// chunked frames body as one chunk behind head, with a Content-Length that
// contradicts it.
func chunked(head string, body []byte) string {
	return head + "Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n" + fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(body), body)
}

// expectContinue asks for 100-continue and sends the body at once.
func expectContinue(head string, body []byte) string {
	return head + "Expect: 100-continue\r\nContent-Length: " + fmt.Sprint(len(body)) + "\r\n\r\n" + string(body)
}

// sbSend sends a PUT of target to base as the credentials in header (or
// cert), returning the code and body.
func sbSend(t *testing.T, base string, caPEM []byte, cert *certPair, target sbTarget, ns string, req sbRequest, extraQuery string) (int, []byte) {
	t.Helper()
	prefix := "/api/v1"
	if target.gvr.Group != "" {
		prefix = "/apis/" + target.gvr.Group + "/" + target.gvr.Version
	}
	path := fmt.Sprintf("%s/namespaces/%s/%s/%s?fieldManager=%s", prefix, ns, target.gvr.Resource, target.name, wgManager)
	for _, q := range []string{req.query, extraQuery} {
		if q != "" {
			path += "&" + q
		}
	}
	if req.rawFraming == nil {
		return sendRaw(t, forcedCertClient(t, caPEM, cert.tls()), base, http.MethodPut, path, req.contentType, req.body, req.header)
	}
	u, err := url.Parse(base)
	mustf(t, err, "URL")
	head := "PUT " + path + " HTTP/1.1\r\nHost: " + u.Host + "\r\nConnection: close\r\nContent-Type: " + req.contentType + "\r\n"
	for k, vs := range req.header {
		for _, v := range vs {
			head += k + ": " + v + "\r\n"
		}
	}
	cfg, err := framework.TLSConfig(caPEM, cert.tls())
	mustf(t, err, "TLS config")
	got, _, err := framework.RawHTTP1(u.Host, cfg, []byte(req.rawFraming(head, req.body)), 10*time.Second)
	mustf(t, err, "raw request")
	if len(got) != 1 {
		t.Fatalf("raw request: %d answers", len(got))
	}
	return got[0].Code, got[0].Body
}

// certPair is an optional client certificate.
type certPair struct{ cfgCert, cfgKey []byte }

func (c *certPair) tls() *tls.Certificate {
	if c == nil {
		return nil
	}
	pair, err := tls.X509KeyPair(c.cfgCert, c.cfgKey)
	if err != nil {
		return nil
	}
	return &pair
}

func TestSameBody(t *testing.T) {
	f := newWGFamily(t, "samebody", "enforce")
	_, err := f.createGadget("g", "a", false)
	mustf(t, err, "create Gadget")
	cm := f.configMap("cm", map[string]string{"k": "a"})
	_, err = f.ctrl.kube.CoreV1().ConfigMaps(f.ns).Create(context.Background(), cm, metav1.CreateOptions{FieldManager: wgManager})
	mustf(t, err, "create ConfigMap")
	f.initialize()
	f.settleGadget("g", "Deny/DriftUnapproved")
	env.Recorder.Watch("/namespaces/" + f.ns + "/")
	token := http.Header{"Authorization": {"Bearer " + f.ctrl.cfg.BearerToken}}
	admin := &certPair{env.CP.AdminConfig.CertData, env.CP.AdminConfig.KeyData}

	withHeader := func(h http.Header, kv ...string) http.Header {
		out := http.Header{}
		for k, vs := range h {
			out[k] = append([]string(nil), vs...)
		}
		for i := 0; i < len(kv); i += 2 {
			out.Add(kv[i], kv[i+1])
		}
		return out
	}
	const (
		refused = "refused by kube-apiserver"
		evil    = "evil"
		same    = "a"
	)
	cases := []struct {
		name   string
		target sbTarget
		build  func(stored *unstructured.Unstructured) sbRequest
		// want is what kube-apiserver makes of the body: the value it
		// would store, or refused.
		want string
		// repeated: the JSON body has a member twice in one object,
		// which kube-apiserver merges for a built-in kind where the
		// proxy would read the last: the proxy refuses it (400), and
		// nothing reaches kube-apiserver.
		repeated bool
	}{
		{"duplicate key: the last one changes the spec", sbGadget, func(s *unstructured.Unstructured) sbRequest {
			return sbRequest{contentType: "application/json", body: sbJSON(t, s, "spec", `{"value":"a","value":"evil"}`)}
		}, evil, true},
		{"duplicate key: the first one changes the spec", sbGadget, func(s *unstructured.Unstructured) sbRequest {
			return sbRequest{contentType: "application/json", body: sbJSON(t, s, "spec", `{"value":"evil","value":"a"}`)}
		}, same, true},
		{"duplicate spec objects", sbGadget, func(s *unstructured.Unstructured) sbRequest {
			return sbRequest{contentType: "application/json", body: sbJSON(t, s, "spec", `{"value":"a"},"spec":{"value":"evil"}`)}
		}, evil, true},
		{"duplicate key with fieldValidation=Strict", sbGadget, func(s *unstructured.Unstructured) sbRequest {
			return sbRequest{contentType: "application/json", query: "fieldValidation=Strict", body: sbJSON(t, s, "spec", `{"value":"a","value":"evil"}`)}
		}, refused, true},
		{"duplicate data key of a built-in kind", sbConfigMap, func(s *unstructured.Unstructured) sbRequest {
			return sbRequest{contentType: "application/json", body: sbJSON(t, s, "data", `{"k":"a","k":"evil"}`)}
		}, evil, true},
		// A built-in kind is decoded into its Go type: the second data
		// object is decoded into the first, so the key only the first
		// names is stored; the last alone is the stored data, unchanged.
		{"duplicate data objects of a built-in kind: kube-apiserver merges them", sbConfigMapInjected, func(s *unstructured.Unstructured) sbRequest {
			return sbRequest{contentType: "application/json", body: sbJSON(t, s, "data", `{"injected":"evil"},"data":{"k":"a"}`)}
		}, evil, true},
		{"an escaped key", sbGadget, func(s *unstructured.Unstructured) sbRequest {
			return sbRequest{contentType: "application/json", body: sbJSON(t, s, "spec", `{"valu\u0065":"evil"}`)}
		}, evil, false},
		{"a key in another case", sbGadget, func(s *unstructured.Unstructured) sbRequest {
			return sbRequest{contentType: "application/json", body: sbJSON(t, s, "spec", `{"value":"a","Value":"evil"}`)}
		}, same, false},
		{"a UTF-8 byte order mark", sbGadget, func(s *unstructured.Unstructured) sbRequest {
			return sbRequest{contentType: "application/json", body: append([]byte("\xef\xbb\xbf"), sbJSON(t, s, "spec", `{"value":"evil"}`)...)}
		}, refused, false},
		{"Content-Encoding: gzip", sbGadget, func(s *unstructured.Unstructured) sbRequest {
			return sbRequest{contentType: "application/json", header: http.Header{"Content-Encoding": {"gzip"}}, body: gzipped(t, sbJSON(t, s, "spec", `{"value":"evil"}`))}
		}, refused, false},
		{"Content-Type Application/JSON; charset=utf-8", sbGadget, func(s *unstructured.Unstructured) sbRequest {
			return sbRequest{contentType: "Application/JSON; charset=utf-8", body: sbJSON(t, s, "spec", `{"value":"evil"}`)}
		}, evil, false},
		{"Content-Type application/json;charset=UTF-16 on a UTF-8 body", sbGadget, func(s *unstructured.Unstructured) sbRequest {
			return sbRequest{contentType: "application/json;charset=UTF-16", body: sbJSON(t, s, "spec", `{"value":"evil"}`)}
		}, evil, false},
		{"YAML under a JSON Content-Type", sbGadget, func(s *unstructured.Unstructured) sbRequest {
			y, err := sigsyaml.JSONToYAML(sbJSON(t, s, "spec", `{"value":"evil"}`))
			mustf(t, err, "YAML")
			return sbRequest{contentType: "application/json", body: y}
		}, refused, false},
		{"JSON under a YAML Content-Type", sbGadget, func(s *unstructured.Unstructured) sbRequest {
			return sbRequest{contentType: "application/yaml", body: sbJSON(t, s, "spec", `{"value":"evil"}`)}
		}, evil, false},
		{"YAML with a duplicate key", sbGadget, func(s *unstructured.Unstructured) sbRequest {
			y, err := sigsyaml.JSONToYAML(sbJSON(t, s, "spec", `{"value":"a"}`))
			mustf(t, err, "YAML")
			return sbRequest{contentType: "application/yaml", body: bytes.Replace(y, []byte("  value: a\n"), []byte("  value: a\n  value: evil\n"), 1)}
		}, evil, false},
		{"chunked, with a Content-Length that contradicts it", sbGadget, func(s *unstructured.Unstructured) sbRequest {
			return sbRequest{contentType: "application/json", body: sbJSON(t, s, "spec", `{"value":"evil"}`), rawFraming: chunked}
		}, evil, false},
		{"Expect: 100-continue", sbGadget, func(s *unstructured.Unstructured) sbRequest {
			return sbRequest{contentType: "application/json", body: sbJSON(t, s, "spec", `{"value":"evil"}`), rawFraming: expectContinue}
		}, evil, false},
		{"protobuf with an unknown field", sbConfigMap, func(s *unstructured.Unstructured) sbRequest {
			return sbRequest{contentType: wrProtobuf, body: sbProtobuf(t, s, "evil", protobufField(99, []byte("anything")))}
		}, evil, false},
		{"protobuf with a second data entry for the same key", sbConfigMap, func(s *unstructured.Unstructured) sbRequest {
			entry := append(protobufField(1, []byte("k")), protobufField(2, []byte("evil"))...)
			return sbRequest{contentType: wrProtobuf, body: sbProtobuf(t, s, "a", protobufField(2, entry))}
		}, evil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			stored := f.sbStored(t, tc.target)
			storedValue, _, _ := unstructured.NestedString(stored.Object, tc.target.value...)
			req := tc.build(stored)
			req.header = withHeader(req.header)

			// kube-apiserver's reading, as a dry run.
			direct, directBody := sbSend(t, directURL(), env.CP.CAData, admin, tc.target, f.ns, req, "dryRun=All")
			got := refused
			if direct >= 200 && direct < 300 {
				var obj unstructured.Unstructured
				mustf(t, obj.UnmarshalJSON(directBody), "kube-apiserver's dry run answer")
				got, _, _ = unstructured.NestedString(obj.Object, tc.target.value...)
			}
			if got != tc.want {
				t.Fatalf("kube-apiserver reads the body as %q (%d), the case expects %q: %.300s", got, direct, tc.want, directBody)
			}

			// The controller sends the same through the proxy.
			proxyReq := req
			proxyReq.header = withHeader(req.header, "Authorization", token.Get("Authorization"))
			before := len(env.Recorder.Requests("/namespaces/" + f.ns + "/"))
			code, body := sbSend(t, cluster.ProxyEndpoint().URL, cluster.ProxyEndpoint().CAData, nil, tc.target, f.ns, proxyReq, "")
			switch {
			case tc.repeated:
				if code != http.StatusBadRequest || !strings.Contains(decodeStatus(t, body).Message, "has a member twice in one object") {
					t.Fatalf("a body with a member twice: through the proxy %d %s, want 400 naming the repeated member", code, body)
				}
				object := "/namespaces/" + f.ns + "/" + tc.target.gvr.Resource + "/" + tc.target.name
				for _, r := range env.Recorder.Requests("/namespaces/" + f.ns + "/")[before:] {
					if strings.HasSuffix(r.Path, object) {
						t.Fatalf("a refused body: %s %s?%s was sent upstream, want nothing", r.Method, r.Path, r.RawQuery)
					}
				}
			case tc.want == refused:
				if code < 400 || code >= 500 {
					t.Fatalf("kube-apiserver refuses this body (%d); through the proxy %d: %s", direct, code, body)
				}
				decodeStatus(t, body)
			case tc.want == same:
				if code != http.StatusOK {
					t.Fatalf("a write that changes nothing: %d %s", code, body)
				}
			default:
				if code != http.StatusForbidden || !strings.Contains(string(body), "drift") {
					t.Fatalf("kube-apiserver would store %q: the write must be denied as drift, got %d: %s", got, code, body)
				}
			}
			after := f.sbStored(t, tc.target)
			if v, _, _ := unstructured.NestedString(after.Object, tc.target.value...); v != storedValue {
				t.Fatalf("the child now has %q, had %q", v, storedValue)
			}
			// What went upstream as the write itself: the bytes sent, or
			// a rewrite whose value is kube-apiserver's reading.
			for _, r := range env.Recorder.Requests("/namespaces/" + f.ns + "/")[before:] {
				if r.Method != http.MethodPut || strings.Contains(r.RawQuery, "dryRun") || bytes.Equal(r.Body, req.body) {
					continue
				}
				var fwd unstructured.Unstructured
				if err := fwd.UnmarshalJSON(r.Body); err != nil {
					t.Fatalf("the proxy rewrote the body into something that is not JSON: %v", err)
				}
				if v, _, _ := unstructured.NestedString(fwd.Object, tc.target.value...); v != got {
					t.Fatalf("the proxy forwarded %s=%q, kube-apiserver reads the original as %q", strings.Join(tc.target.value, "."), v, got)
				}
			}
		})
	}
}
