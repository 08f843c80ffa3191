package intercept_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"

	"github.com/kausality-io/kausality-proxy/intercept/annotations"
	"github.com/kausality-io/kausality-proxy/intercept/config"
	"github.com/kausality-io/kausality-proxy/intercept/controllerid"
)

// A controller in shadow mode, the first step of its rollout, creates its
// first child in log mode, with records of its own making: the write goes
// upstream as it came, but for the system annotations, which no request
// sets, and with the mode recorded as the controller's, so that once it
// is enforced the mode does not gate it.
func TestAShadowCreateRecordsItsModeAndWritesNoSystemAnnotation(t *testing.T) {
	cfg, err := config.Parse([]byte("apiVersion: kausality.io/v1alpha1\nkind: ProxyConfiguration\ncontrollers:\n- name: dc\n  match:\n    serviceAccount: kube-system/deployment-controller\n  mode: shadow\n"))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		sent []forwardedRequest
	)
	env := newServeEnv(t, nil, func(authorizationv1.SubjectAccessReviewSpec) (bool, error) { return true, nil },
		enforce, func(s *serveSetup) { s.config.Settings = func() *config.Config { return cfg } })
	env.upstream = recording(http.StatusCreated, &sent, &mu)
	body, _ := json.Marshal(map[string]any{"apiVersion": "apps/v1", "kind": "ReplicaSet",
		"metadata": map[string]any{"name": "web-2", "namespace": "apps",
			"annotations": map[string]any{annotations.Mode: "log", annotations.ModesBy: "mode=forged:forged",
				annotations.ApprovalsBy: "forged:x", annotations.Trace: `[{"kind":"Deployment","name":"forged"}]`},
			"ownerReferences": []any{map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "uid": "web-uid", "controller": true}}},
		"spec": map[string]any{"replicas": 1}})
	rec := httptest.NewRecorder()
	env.handler.ServeHTTP(rec, env.request(t, benchWrite{method: http.MethodPost, path: rsPath + "?fieldManager=" + benchKCM,
		contentType: "application/json", body: body, user: kcmUser}))
	if rec.Code != http.StatusCreated || len(sent) != 1 {
		t.Fatalf("answered %d after %d forwarded requests, want the create forwarded: %s", rec.Code, len(sent), rec.Body.String())
	}
	var created struct {
		Metadata struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal([]byte(sent[0].body), &created); err != nil {
		t.Fatal(err)
	}
	ann := created.Metadata.Annotations
	if ann[annotations.Mode] != "log" {
		t.Errorf("the shadow write's own mode changed: %q", ann[annotations.Mode])
	}
	if want := "mode=" + controllerid.LongHash(kcmUser) + ":" + annotations.Digest([]byte("log")); ann[annotations.ModesBy] != want {
		t.Errorf("%s = %q, want %q", annotations.ModesBy, ann[annotations.ModesBy], want)
	}
	for _, k := range []string{annotations.ApprovalsBy, annotations.Trace} {
		if v, ok := ann[k]; ok {
			t.Errorf("the shadow create wrote the system annotation %s=%s", k, v)
		}
	}
}
