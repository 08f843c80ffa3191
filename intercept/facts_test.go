package intercept

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/kausality-io/kausality-proxy/intercept/upstream"
)

// A body read whole is forwarded without the caller's Expect: nothing is
// left to wait for, and an upstream "100 Continue" would be taken for the
// answer of the dry runs and writes the proxy sends for it.
func TestReadBodyDropsExpectContinue(t *testing.T) {
	r := httptest.NewRequest(http.MethodPut, "/api/v1/namespaces/prod/configmaps/c", strings.NewReader(`{"kind":"ConfigMap"}`))
	r.Header.Set("Expect", "100-continue")
	data, tooLarge, err := readBody(httptest.NewRecorder(), r, 1<<20)
	if err != nil || tooLarge || string(data) != `{"kind":"ConfigMap"}` {
		t.Fatalf("readBody: %q %v %v", data, tooLarge, err)
	}
	if got := r.Header.Get("Expect"); got != "" {
		t.Fatalf("Expect %q is still on the request", got)
	}
	dry, err := upstream.DryRunOf(r, data)
	if err != nil {
		t.Fatal(err)
	}
	if got := dry.Header.Get("Expect"); got != "" {
		t.Fatalf("Expect %q is on the dry run", got)
	}
	body, _ := io.ReadAll(r.Body)
	if string(body) != string(data) || r.Header.Get("Content-Length") != "20" {
		t.Fatalf("body %q, Content-Length %q", body, r.Header.Get("Content-Length"))
	}
}
