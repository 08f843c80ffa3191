package intercept_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kausality-io/kausality-proxy/intercept/body"
)

// An Expected write reaches kube-apiserver with the proxy's annotations
// written into the client's own bytes: what the client sent outside
// metadata passes as it came, spacing included, and is not decoded and
// encoded again.
func TestExpectedWriteForwardsTheClientsBytes(t *testing.T) {
	env := newBenchEnv(t, nil)
	var (
		mu        sync.Mutex
		forwarded []byte
	)
	env.upstream = func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		if r.URL.Query().Get("dryRun") == "" {
			mu.Lock()
			forwarded = data
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}
	child := benchChild("web-1", "web", "web-uid", 3)
	update, err := child.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	const compactSpec, spacedSpec = `"spec":{"replicas":3,`, `"spec":{ "replicas" : 3 ,`
	if !bytes.Contains(update, []byte(compactSpec)) {
		t.Fatalf("the update has no %s: %s", compactSpec, update)
	}
	update = bytes.Replace(update, []byte(compactSpec), []byte(spacedSpec), 1)
	rs := "/apis/apps/v1/namespaces/apps/replicasets/web-1?fieldManager=" + benchKCM
	ctrl := "system:serviceaccount:kube-system:replicaset-controller"
	for _, tc := range []struct {
		name, method, contentType, body string
		// kept is what must reach kube-apiserver byte for byte.
		kept string
	}{
		{"update", http.MethodPut, "application/json", string(update), spacedSpec},
		{"merge patch", http.MethodPatch, "application/merge-patch+json", `{ "spec" : {"replicas": 3} }`, `, "spec" : {"replicas": 3} }`},
		{"strategic merge patch", http.MethodPatch, "application/strategic-merge-patch+json", `{"spec":{"minReadySeconds": 1e1}}`, `,"spec":{"minReadySeconds": 1e1}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: tc.method, path: rs, contentType: tc.contentType, body: []byte(tc.body), user: ctrl}))
			if rec.Code != http.StatusOK {
				t.Fatalf("answer %d: %s (%v)", rec.Code, rec.Body, env.lastError)
			}
			mu.Lock()
			got := forwarded
			mu.Unlock()
			if !strings.Contains(string(got), tc.kept) {
				t.Errorf("the forwarded body does not keep %s as sent:\n%s", tc.kept, got)
			}
			var obj struct {
				Metadata struct {
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
			}
			if err := json.Unmarshal(got, &obj); err != nil {
				t.Fatalf("the forwarded body is no JSON: %v: %s", err, got)
			}
			if obj.Metadata.Annotations["kausality.io/trace"] == "" {
				t.Errorf("the forwarded body has no trace: %s", got)
			}
		})
	}
}

// An Expected protobuf update reaches kube-apiserver as the client's
// object with the proxy's annotations added, and nothing else changed.
func TestExpectedProtobufWriteKeepsTheClientsObject(t *testing.T) {
	env := newBenchEnv(t, nil)
	var (
		mu        sync.Mutex
		forwarded []byte
		sentType  string
	)
	env.upstream = func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		if r.URL.Query().Get("dryRun") == "" {
			mu.Lock()
			forwarded, sentType = data, r.Header.Get("Content-Type")
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{}`))
	}
	child := benchChild("web-1", "web", "web-uid", 3)
	update, contentType, err := body.Encode(child, body.Protobuf)
	if err != nil {
		t.Fatal(err)
	}
	rs := "/apis/apps/v1/namespaces/apps/replicasets/web-1?fieldManager=" + benchKCM
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPut, path: rs, contentType: contentType, body: update,
		user: "system:serviceaccount:kube-system:replicaset-controller"}))
	if rec.Code != http.StatusOK {
		t.Fatalf("answer %d: %s (%v)", rec.Code, rec.Body, env.lastError)
	}
	mu.Lock()
	got, gotType := forwarded, sentType
	mu.Unlock()
	if gotType != body.ContentTypeProtobuf {
		t.Errorf("forwarded as %q, want protobuf", gotType)
	}
	kind := schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "ReplicaSet"}
	sent, _, err := body.Decode(contentType, update, &kind)
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := body.Decode(body.ContentTypeProtobuf, got, &kind)
	if err != nil {
		t.Fatalf("the forwarded body is not the protobuf of a ReplicaSet: %v", err)
	}
	ann := out.GetAnnotations()
	if ann["kausality.io/trace"] == "" {
		t.Errorf("the forwarded object has no trace: %v", ann)
	}
	for _, o := range []*unstructured.Unstructured{out, sent} {
		kept := o.GetAnnotations()
		for k := range kept {
			if strings.HasPrefix(k, "kausality.io/") {
				delete(kept, k)
			}
		}
		o.SetAnnotations(kept)
	}
	if !equality.Semantic.DeepEqual(out.Object, sent.Object) {
		t.Errorf("the forwarded object differs from the client's beyond the proxy's annotations:\n%v\nwant\n%v", out.Object, sent.Object)
	}
}
