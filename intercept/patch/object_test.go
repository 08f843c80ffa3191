package patch

import (
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/kausality-io/kausality-proxy/internal/testutil"
)

// encodedWith is what the proxy forwards when it decodes the object, writes
// meta into it and encodes it again: what AnnotateObject must mean.
func encodedWith(t *testing.T, data string, meta ObjectMetadata) (map[string]interface{}, bool) {
	t.Helper()
	var obj map[string]interface{}
	if err := utiljson.Unmarshal([]byte(data), &obj); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: obj}
	if len(meta.Annotations) > 0 {
		ann := u.GetAnnotations()
		if ann == nil {
			ann = map[string]string{}
		}
		for k, v := range meta.Annotations {
			if v == nil {
				delete(ann, k)
			} else {
				ann[k] = *v
			}
		}
		if len(ann) == 0 {
			unstructured.RemoveNestedField(u.Object, "metadata", "annotations")
		} else {
			u.SetAnnotations(ann)
		}
	}
	added := false
	if meta.ResourceVersion != "" && !NamesVersion(u.GetResourceVersion()) {
		u.SetResourceVersion(meta.ResourceVersion)
		added = true
	}
	if meta.Namespace != "" && u.GetNamespace() == "" {
		u.SetNamespace(meta.Namespace)
	}
	data2, err := u.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]interface{}
	if err := utiljson.Unmarshal(data2, &out); err != nil {
		t.Fatal(err)
	}
	return out, added
}

func TestAnnotateObject(t *testing.T) {
	trace := `[{"kind":"Deployment","name":"web","user":"a\\b <c>"}]`
	set := map[string]*string{"kausality.io/trace": &trace, "kausality.io/updaters": nil}
	removeOnly := map[string]*string{"kausality.io/updaters": nil}
	rs := `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"web-1","namespace":"apps","resourceVersion":"7",` +
		`"annotations":{"deployment.kubernetes.io/revision":"1","kausality.io/updaters":"x"},"labels":{"a":"b"}},` +
		`"spec":{"replicas":3,"template":{"metadata":{"annotations":{"x":"y"}}}}}`
	tests := []struct {
		name  string
		data  string
		meta  ObjectMetadata
		want  string // exact output, when not empty
		fails bool
	}{
		{name: "a controller's update", data: rs, meta: ObjectMetadata{Annotations: set, ResourceVersion: "9"},
			want: `{"apiVersion":"apps/v1","kind":"ReplicaSet","metadata":{"name":"web-1","namespace":"apps","resourceVersion":"7",` +
				`"annotations":{"deployment.kubernetes.io/revision":"1","kausality.io/trace":"[{\"kind\":\"Deployment\",\"name\":\"web\",\"user\":\"a\\\\b \u003cc\u003e\"}]"},"labels":{"a":"b"}},` +
				`"spec":{"replicas":3,"template":{"metadata":{"annotations":{"x":"y"}}}}}`},
		{name: "no annotations, no resourceVersion, no namespace", meta: ObjectMetadata{Annotations: set, ResourceVersion: "9", Namespace: "apps"},
			data: `{ "kind" : "ConfigMap", "apiVersion":"v1", "metadata" : { "name" : "c" }, "data": {"k": "v"} }`,
			want: `{ "kind" : "ConfigMap", "apiVersion":"v1", "metadata" : {"name" : "c","annotations":{"kausality.io/trace":"[{\"kind\":\"Deployment\",\"name\":\"web\",\"user\":\"a\\\\b \u003cc\u003e\"}]"},"resourceVersion":"9","namespace":"apps"}, "data": {"k": "v"} }`},
		{name: "empty resourceVersion and null namespace are filled", data: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"resourceVersion":"","namespace":null,"name":"c"}}`,
			meta: ObjectMetadata{ResourceVersion: "9", Namespace: "apps"},
			want: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"resourceVersion":"9","namespace":"apps","name":"c"}}`},
		{name: "a resourceVersion of 0 names none, and is filled", data: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"resourceVersion":"0","name":"c"}}`,
			meta: ObjectMetadata{ResourceVersion: "9"},
			want: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"resourceVersion":"9","name":"c"}}`},
		{name: "a namespace is filled only when empty", data: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"0","name":"c"}}`,
			meta: ObjectMetadata{Namespace: "apps"},
			want: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"0","name":"c"}}`},
		{name: "removing the last annotation drops the map", data: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"annotations":{"kausality.io/updaters":"x"},"name":"c"}}`,
			meta: ObjectMetadata{Annotations: removeOnly},
			want: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"c"}}`},
		{name: "null annotations", data: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"annotations":null}}`, meta: ObjectMetadata{Annotations: set}},
		{name: "nothing to write keeps the annotations as sent", data: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"annotations":{ "a" : "b" }}}`,
			meta: ObjectMetadata{ResourceVersion: "9"},
			want: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"annotations":{ "a" : "b" },"resourceVersion":"9"}}`},
		{name: "escaped names", data: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"ann\u006ftations":{"a":"b"},"n\"ame":"c"}}`, meta: ObjectMetadata{Annotations: set}},
		{name: "an empty metadata", data: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}`, meta: ObjectMetadata{Annotations: set, Namespace: "apps"}},
		{name: "no apiVersion", data: `{"kind":"ConfigMap","metadata":{}}`, meta: ObjectMetadata{Annotations: set}, fails: true},
		{name: "an empty kind", data: `{"apiVersion":"v1","kind":"","metadata":{}}`, meta: ObjectMetadata{Annotations: set}, fails: true},
		{name: "a null apiVersion", data: `{"apiVersion":null,"kind":"ConfigMap","metadata":{}}`, meta: ObjectMetadata{Annotations: set}, fails: true},
		{name: "an empty kind after a kind", data: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{},"kind":""}`, meta: ObjectMetadata{Annotations: set}, fails: true},
		{name: "no kind", data: `{"apiVersion":"v1","metadata":{}}`, meta: ObjectMetadata{Annotations: set}, fails: true},
		{name: "no metadata", data: `{"apiVersion":"v1","kind":"ConfigMap"}`, meta: ObjectMetadata{Annotations: set}, fails: true},
		{name: "metadata null", data: `{"apiVersion":"v1","kind":"ConfigMap","metadata":null}`, meta: ObjectMetadata{Annotations: set}, fails: true},
		{name: "metadata twice", data: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{},"metadata":{"name":"x"}}`, meta: ObjectMetadata{Annotations: set}, fails: true},
		{name: "kind twice", data: `{"apiVersion":"v1","kind":"ConfigMap","kind":"Secret","metadata":{}}`, meta: ObjectMetadata{Annotations: set}, fails: true},
		{name: "annotations twice", data: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"annotations":{},"annotations":{"a":"b"}}}`, meta: ObjectMetadata{Annotations: set}, fails: true},
		{name: "resourceVersion twice", data: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"resourceVersion":"1","resourceVersion":""}}`, meta: ObjectMetadata{ResourceVersion: "9"}, fails: true},
		{name: "an annotation that is no string", data: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"annotations":{"a":1}}}`, meta: ObjectMetadata{Annotations: set}, fails: true},
		{name: "a resourceVersion that is no string", data: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"resourceVersion":5}}`, meta: ObjectMetadata{ResourceVersion: "9"}, fails: true},
		{name: "not an object", data: `[{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}]`, meta: ObjectMetadata{Annotations: set}, fails: true},
		{name: "a user annotation of ours is overwritten", data: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"annotations":{"kausality.io/trace":"[]","z":"<"}}}`,
			meta: ObjectMetadata{Annotations: map[string]*string{"kausality.io/trace": testutil.Ptr("[1]")}},
			want: `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"annotations":{"kausality.io/trace":"[1]","z":"\u003c"}}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, added, ok := AnnotateObject([]byte(tt.data), tt.meta)
			if ok == tt.fails {
				t.Fatalf("ok = %v, want %v: %s", ok, !tt.fails, out)
			}
			if !ok {
				return
			}
			if tt.want != "" && string(out) != tt.want {
				t.Errorf("got  %s\nwant %s", out, tt.want)
			}
			var got map[string]interface{}
			if err := utiljson.Unmarshal(out, &got); err != nil {
				t.Fatalf("the forwarded object is no JSON: %v: %s", err, out)
			}
			want, wantAdded := encodedWith(t, tt.data, tt.meta)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("got  %v\nwant %v (decoded and encoded)", got, want)
			}
			if added != wantAdded {
				t.Errorf("resourceVersion added %v, want %v", added, wantAdded)
			}
		})
	}
}

func FuzzAnnotateObject(f *testing.F) {
	f.Add(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"annotations":{"a":"b","kausality.io/updaters":"x"},"resourceVersion":""}}`, "9", "ns")
	f.Add(`{"kind":"K","apiVersion":"v","metadata":{"namespace":"x","n\u0061mespace":null}}`, "", "ns")
	trace := `[{"kind":"Deployment"}]`
	annotations := map[string]*string{"kausality.io/trace": &trace, "kausality.io/updaters": nil}
	f.Fuzz(func(t *testing.T, data, rv, namespace string) {
		var obj map[string]interface{}
		if utiljson.Unmarshal([]byte(data), &obj) != nil || obj == nil {
			return
		}
		meta := ObjectMetadata{Annotations: annotations, ResourceVersion: rv, Namespace: namespace}
		out, added, ok := AnnotateObject([]byte(data), meta)
		if !ok {
			return
		}
		var got map[string]interface{}
		if err := utiljson.Unmarshal(out, &got); err != nil {
			t.Fatalf("%s: the forwarded object is no JSON: %v: %s", data, err, out)
		}
		want, wantAdded := encodedWith(t, data, meta)
		if !reflect.DeepEqual(got, want) || added != wantAdded {
			t.Fatalf("%s:\ngot  %v (%v)\nwant %v (%v)", data, got, added, want, wantAdded)
		}
	})
}
