package upstream

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"

	cbor "k8s.io/apimachinery/pkg/runtime/serializer/cbor/direct"
)

// DeleteOptions have no metadata: kube-apiserver (CBOR serving enabled)
// decodes a CBOR body leniently and ignores a "metadata" member, whatever
// it holds, so this DELETE is accepted there with gracePeriodSeconds 5.
// The proxy's CBOR path goes through body.DecodeOfKind, whose
// annotations check (fd8b87b) refuses it with 400.
func TestCBORDeleteOptionsWithAMetadataMemberAreRead(t *testing.T) {
	data, err := cbor.Marshal(map[string]interface{}{
		"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": int64(5),
		"metadata": map[string]interface{}{"annotations": map[string]interface{}{"n": int64(1)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest(http.MethodDelete, "/apis/apps/v1/namespaces/apps/replicasets/web-1", bytes.NewReader(data))
	r.Header.Set("Content-Type", "application/cbor")
	opts, err := DeleteOptionsOf(r, data)
	if err != nil {
		t.Fatalf("refused: %v; kube-apiserver ignores members DeleteOptions do not have", err)
	}
	if opts.GracePeriodSeconds == nil || *opts.GracePeriodSeconds != 5 {
		t.Errorf("gracePeriodSeconds %v, want 5", opts.GracePeriodSeconds)
	}
}
