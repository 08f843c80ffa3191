package patch

import (
	"encoding/json"
	"testing"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
)

// The in-place merge patch must agree with the byte-level library
// kube-apiserver uses.
func TestMergeObjectMatchesLibrary(t *testing.T) {
	current := `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c","labels":{"a":"1","b":"2"},"annotations":{"x":"y"}},
		"data":{"k":"v"},"list":[1,2,{"n":null}],"nested":{"deep":{"keep":true,"drop":1}},"num":3}`
	patches := []string{
		`{}`,
		`{"data":{"k":"v2","new":"n"}}`,
		`{"metadata":{"labels":{"a":null,"c":"3"}}}`,
		`{"metadata":{"annotations":null}}`,
		`{"list":[{"x":null}]}`,
		`{"nested":{"deep":{"drop":null,"add":{"a":null,"b":1}}}}`,
		`{"nested":"scalar now"}`,
		`{"fresh":{"obj":{"inner":null,"v":2}}}`,
		`{"num":4.5,"data":null}`,
		`{"missing":null}`,
		`{"list":[null,{"a":null,"b":[{"c":null}]}]}`,
	}
	for _, p := range patches {
		want, err := jsonpatch.MergePatch([]byte(current), []byte(p))
		if err != nil {
			t.Fatal(err)
		}
		var wantObj map[string]interface{}
		if err := utiljson.Unmarshal(want, &wantObj); err != nil {
			t.Fatal(err)
		}
		var cur map[string]interface{}
		if err := utiljson.Unmarshal([]byte(current), &cur); err != nil {
			t.Fatal(err)
		}
		got, err := applyMerge(&unstructured.Unstructured{Object: cur}, []byte(p), Options{SkipTypeCheck: true})
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if !equality.Semantic.DeepEqual(got.Object, wantObj) {
			g, _ := json.Marshal(got.Object)
			t.Errorf("patch %s\n got %s\nwant %s", p, g, want)
		}
		// current is untouched.
		if v, _, _ := unstructured.NestedString(cur, "data", "k"); v != "v" {
			t.Fatalf("applyMerge modified the current object")
		}
	}
}
