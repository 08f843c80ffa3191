package patch

import (
	"encoding/json"
	"net/http"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/kausality-io/kausality-proxy/internal/testutil"
)

func decodeJSONObject(t testing.TB, s string) map[string]interface{} {
	t.Helper()
	var m map[string]interface{}
	if err := utiljson.Unmarshal([]byte(s), &m); err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return m
}

// The examples of RFC 7386, Appendix A, whose target and patch are
// objects, and the shapes around null, lists and scalars.
func TestMerged(t *testing.T) {
	tests := []struct{ target, patch, want string }{
		{`{"a":"b"}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"b"}`, `{"b":"c"}`, `{"a":"b","b":"c"}`},
		{`{"a":"b"}`, `{"a":null}`, `{}`},
		{`{"a":"b","b":"c"}`, `{"a":null}`, `{"b":"c"}`},
		{`{"a":["b"]}`, `{"a":"c"}`, `{"a":"c"}`},
		{`{"a":"c"}`, `{"a":["b"]}`, `{"a":["b"]}`},
		{`{"a":{"b":"c"}}`, `{"a":{"b":"d","c":null}}`, `{"a":{"b":"d"}}`},
		{`{"a":[{"b":"c"}]}`, `{"a":[1]}`, `{"a":[1]}`},
		{`{"e":null}`, `{"a":1}`, `{"e":null,"a":1}`},
		{`{}`, `{"a":{"bb":{"ccc":null}}}`, `{"a":{"bb":{}}}`},
		// A list replaces, and the nulls of objects inside it are dropped
		// as the library kube-apiserver uses drops them.
		{`{"l":[1,2,3]}`, `{"l":[{"a":null,"b":1},null]}`, `{"l":[{"b":1},null]}`},
		// An object replaces a scalar, a list or null, merged into nothing.
		{`{"a":1}`, `{"a":{"b":null,"c":{"d":null}}}`, `{"a":{"c":{}}}`},
		{`{"a":[1]}`, `{"a":{"b":2}}`, `{"a":{"b":2}}`},
		{`{"a":null}`, `{"a":{"b":2}}`, `{"a":{"b":2}}`},
		// A scalar or null replaces or removes an object.
		{`{"a":{"b":1}}`, `{"a":true}`, `{"a":true}`},
		{`{"a":{"b":1},"c":2}`, `{"a":null}`, `{"c":2}`},
		{`{"a":1}`, `{"missing":null}`, `{"a":1}`},
		{`{"a":{"b":{"c":1,"d":2}}}`, `{"a":{"b":{"c":null}}}`, `{"a":{"b":{"d":2}}}`},
		{`{"n":1}`, `{"n":1.5}`, `{"n":1.5}`},
	}
	for _, tt := range tests {
		target := decodeJSONObject(t, tt.target)
		pristine := runtime.DeepCopyJSON(target)
		got := merged(target, decodeJSONObject(t, tt.patch))
		if want := decodeJSONObject(t, tt.want); !equality.Semantic.DeepEqual(got, want) {
			g, _ := json.Marshal(got)
			t.Errorf("%s merged with %s = %s, want %s", tt.target, tt.patch, g, tt.want)
		}
		if !equality.Semantic.DeepEqual(target, pristine) {
			t.Errorf("%s merged with %s modified the target", tt.target, tt.patch)
		}
	}
}

// A merge patch that is not an object replaces the whole target under RFC
// 7386; kube-apiserver refuses it.
func TestApplyMergeNotAnObject(t *testing.T) {
	current := &unstructured.Unstructured{Object: decodeJSONObject(t, `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}`)}
	for patch, msg := range map[string]string{
		`["c"]`: "error decoding patch: a merge patch must be a JSON object, got an array",
		`"bar"`: "error decoding patch: a merge patch must be a JSON object, got a string",
		`null`:  "the merge patch is not a valid JSON document: a merge patch must be a JSON object, got null",
	} {
		_, err := Apply("application/merge-patch+json", current, []byte(patch), Options{})
		testutil.WantStatusError(t, err, http.StatusBadRequest, metav1.StatusReasonBadRequest, msg)
	}
}

// The result shares what the patch leaves alone with current, but what
// Apply itself sets (a namespace from the request) never reaches current.
func TestApplyMergeLeavesCurrentAlone(t *testing.T) {
	current := &unstructured.Unstructured{Object: decodeJSONObject(t,
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","labels":{"a":"1"}},"data":{"k":"v"}}`)}
	pristine := current.DeepCopy()
	ns := "default"
	for _, patch := range []string{`{"data":{"k":"v2"}}`, `{"metadata":{"labels":{"a":null}}}`, `{"metadata":{"name":"c"},"data":null}`} {
		got, err := Apply("application/merge-patch+json", current, []byte(patch), Options{Namespace: &ns})
		if err != nil {
			t.Fatalf("%s: %v", patch, err)
		}
		if got.GetNamespace() != ns {
			t.Errorf("%s: namespace %q, want %q", patch, got.GetNamespace(), ns)
		}
		if !equality.Semantic.DeepEqual(current.Object, pristine.Object) {
			t.Fatalf("%s modified current: %v", patch, current.Object)
		}
	}
}

// Whatever object patch a caller sends, the merge on the map agrees with
// the byte-level library kube-apiserver uses.
func FuzzMergedMatchesLibrary(f *testing.F) {
	for _, seed := range []string{
		`{}`, `{"data":{"k":"v2","new":"n"}}`, `{"metadata":{"labels":{"a":null,"c":"3"}}}`,
		`{"list":[{"x":null}]}`, `{"nested":{"deep":{"drop":null,"add":{"a":null,"b":1}}}}`,
		`{"nested":"scalar now"}`, `{"num":4.5,"data":null}`, `{"list":[null,{"a":null,"b":[{"c":null}]}]}`,
	} {
		f.Add([]byte(seed))
	}
	current := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","labels":{"a":"1","b":"2"}},` +
		`"data":{"k":"v"},"list":[1,2,{"n":null}],"nested":{"deep":{"keep":true,"drop":1}},"num":3,"null":null}`
	f.Fuzz(func(t *testing.T, patch []byte) {
		var p interface{}
		if utiljson.Unmarshal(patch, &p) != nil {
			return
		}
		pm, ok := p.(map[string]interface{})
		if !ok {
			return
		}
		want, err := jsonpatch.MergePatch([]byte(current), patch)
		if err != nil {
			return
		}
		var wantObj map[string]interface{}
		if err := utiljson.Unmarshal(want, &wantObj); err != nil {
			t.Fatal(err)
		}
		target := decodeJSONObject(t, current)
		if got := merged(target, pm); !equality.Semantic.DeepEqual(got, wantObj) {
			g, _ := json.Marshal(got)
			t.Errorf("patch %s\n got %s\nwant %s", patch, g, want)
		}
		if !equality.Semantic.DeepEqual(target, decodeJSONObject(t, current)) {
			t.Errorf("patch %s modified the target", patch)
		}
	})
}
