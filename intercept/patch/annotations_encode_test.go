package patch

import (
	"encoding/json"
	"testing"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/types"

	"github.com/kausality-io/kausality-proxy/internal/testutil"
)

func TestAppendJSONStringMatchesMarshal(t *testing.T) {
	for _, s := range []string{"", "kausality.io/trace", `[{"kind":"App"}]`, `a\b`, "<&>", "tab\there", "é", "\u2028", "\xff", "\x7f", "~/",
		"\x00\x01\x1f", "\b\f\n\r\t", "\u2029 and \u2027", "a\xed\xa0\x80b", "\xe2\x80", "日本\xc3", `"quoted" at both ends"`,
		`[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","generation":4,"user":"system:serviceaccount:kube-system:deployment-controller","timestamp":"2026-01-01T00:00:00Z"}]`} {
		want, _ := json.Marshal(s)
		if got := appendJSONString([]byte("x"), s); string(got) != "x"+string(want) {
			t.Errorf("appendJSONString(%q) = %s, want x%s", s, got, want)
		}
	}
}

func FuzzAppendJSONStringMatchesMarshal(f *testing.F) {
	f.Add("kausality.io/approvals")
	f.Add(`{"a":"<b>"}`)
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Errorf("appendJSONString(%q) = %s, want %s (valid UTF-8: %v)", s, got, want, utf8.ValidString(s))
		}
	})
}

// The client's members reach the upstream as the client wrote them,
// spacing and escapes included; only metadata.annotations is encoded anew.
// A patch without metadata keeps even the spacing between its members.
func TestAddAnnotationsMergePatchVerbatim(t *testing.T) {
	tests := []struct{ name, patch, want string }{
		{"spacing inside members",
			`{ "spec" : { "replicas" : 3 , "note": "a<b" } }`,
			`{"metadata":{"annotations":{"k":"v"}}, "spec" : { "replicas" : 3 , "note": "a<b" } }`},
		{"escapes and numbers",
			`{"data":{"x":"\u003c\u00e9","n":1.50e+2}}`,
			`{"metadata":{"annotations":{"k":"v"}},"data":{"x":"\u003c\u00e9","n":1.50e+2}}`},
		{"spacing inside members beside metadata",
			`{ "spec" : { "replicas" : 3 }, "metadata": {"labels": {"b":"1"}} }`,
			`{"metadata":{"annotations":{"k":"v"},"labels":{"b":"1"}},"spec":{ "replicas" : 3 }}`},
		{"labels beside the annotations",
			`{"metadata":{"labels": {"b":"1"},"annotations":{ "user" : "1" }}}`,
			`{"metadata":{"annotations":{"k":"v","user":"1"},"labels":{"b":"1"}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := AddAnnotations(types.MergePatchType, []byte(tt.patch), map[string]*string{"k": testutil.Ptr("v")}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if string(out) != tt.want {
				t.Errorf("got  %s\nwant %s", out, tt.want)
			}
		})
	}
}
