package upstream

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/internalversion/scheme"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
)

// kube-apiserver answers a client that asks for YAML (Accept:
// application/yaml) in YAML, errors included. Its YAML encoder folds a
// long message over lines, so the optimistic-lock text is not in the
// bytes as one run: the proxy's own precondition failure must still be
// held (and the write decided again), not relayed as a 409 the client
// never caused.
func TestConflictCatcherHoldsAPreconditionFailureInYAML(t *testing.T) {
	status := apierrors.NewConflict(schema.GroupResource{Group: "apps", Resource: "replicasets"}, "web-1",
		errors.New("the object has been modified; please apply your changes to the latest version and try again")).Status()
	status.APIVersion, status.Kind = "v1", "Status"
	yaml := json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme.Scheme, scheme.Scheme, json.SerializerOptions{Yaml: true})
	var body bytes.Buffer
	if err := yaml.Encode(&status, &body); err != nil {
		t.Fatal(err)
	}

	rec := httptest.NewRecorder()
	c := NewConflictCatcher(rec, true)
	c.Header().Set("Content-Type", "application/yaml")
	c.WriteHeader(http.StatusConflict)
	_, _ = c.Write(body.Bytes())
	if !c.Done() {
		t.Errorf("the proxy's own precondition failure, answered in YAML, reached the client: %d\n%s", rec.Code, rec.Body)
	}
}
