package intercept

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

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

// A body is read whole and only up to the limit, whatever length it
// claims; one that states its length is read into one buffer.
func TestReadUpTo(t *testing.T) {
	payload := strings.Repeat("x", 5000)
	for _, tc := range []struct {
		name       string
		n, length  int64
		want       int
		oneAlloced bool
	}{
		{"known length", 6000, 5000, 5000, true},
		{"unknown length", 6000, -1, 5000, false},
		{"length over the limit", 4001, 5000, 4001, false},
		{"a length that says less than comes", 6000, 100, 5000, false},
		{"a length that says more than comes", 6000, 5500, 5000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := readUpTo(strings.NewReader(payload), tc.n, tc.length)
			if err != nil || string(data) != payload[:tc.want] {
				t.Fatalf("read %d bytes, want %d: %v", len(data), tc.want, err)
			}
			if tc.oneAlloced {
				allocs := testing.AllocsPerRun(10, func() { _, _ = readUpTo(strings.NewReader(payload), tc.n, tc.length) })
				// The reader and the buffer.
				if allocs > 3 {
					t.Errorf("%v allocations", allocs)
				}
			}
		})
	}
}

// A status write that names resourceVersion 0 is applied to whatever is
// stored, as one naming none: its writer may not have seen the
// generation it would be recorded as observing.
func TestAWriteOfVersionZeroNamesNoResourceVersion(t *testing.T) {
	for rv, want := range map[string]bool{"": false, "0": false, "00": false, "7": true} {
		obj := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "x"}}}
		obj.SetResourceVersion(rv)
		f := &facts{req: &writeRequest{w: &write{verb: "update", sub: statusSubresource}}, sent: obj}
		if got := f.namesResourceVersion(); got != want {
			t.Errorf("a status PUT of resourceVersion %q names one: %v, want %v", rv, got, want)
		}
	}
}

// kube-apiserver reads a resourceVersion as an unsigned integer: an
// update naming "007" is conditional on version 7, and lands on it. It is
// no update of an older version, which the proxy would answer with its
// own 409.
func TestAnUpdateNamingTheStoredVersionWithLeadingZerosIsNotStale(t *testing.T) {
	for _, tc := range []struct {
		sent, stored string
		want         bool
	}{
		{"7", "7", false},
		{"007", "7", false},
		{"07", "7", false},
		{"6", "7", true},
		{"0", "7", false},
		{"abc", "7", true},
	} {
		sent := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "x"}}}
		sent.SetResourceVersion(tc.sent)
		old := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "x"}}}
		old.SetResourceVersion(tc.stored)
		f := &facts{req: &writeRequest{w: &write{verb: "update", sub: mainResource}}, sent: sent, old: old}
		if got := f.staleUpdate(); got != tc.want {
			t.Errorf("an update of resourceVersion %q with %q stored is stale: %v, want %v", tc.sent, tc.stored, got, tc.want)
		}
	}
}
