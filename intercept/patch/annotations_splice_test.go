package patch

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"

	"github.com/kausality-io/kausality-proxy/internal/testutil"
)

// A patch without metadata gets the annotations spliced in as one member;
// what kube-apiserver makes of it must be what it makes of the patch
// decoded and encoded again, and every other patch must take that path.
func TestAddAnnotationsSplicesOnlyWithoutMetadata(t *testing.T) {
	trace := `[{"apiVersion":"apps/v1","kind":"Deployment","name":"web","user":"a\\b <c>"}]`
	annotations := map[string]*string{"kausality.io/trace": &trace, "kausality.io/updaters": nil, "example.com/x": testutil.Ptr("é")}
	tests := []struct {
		name    string
		patch   string
		spliced bool
		// want is the exact forwarded patch when spliced.
		want string
	}{
		{name: "a controller's patch", patch: `{"spec":{"replicas":3}}`, spliced: true,
			want: `{"metadata":{"annotations":{"example.com/x":"é","kausality.io/trace":"[{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"name\":\"web\",\"user\":\"a\\\\b \u003cc\u003e\"}]","kausality.io/updaters":null}},"spec":{"replicas":3}}`},
		{name: "spacing around the client's members", patch: " \n{ \"spec\" : {\"replicas\": 3} } ", spliced: true,
			want: `{"metadata":{"annotations":{"example.com/x":"é","kausality.io/trace":"[{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"name\":\"web\",\"user\":\"a\\\\b \u003cc\u003e\"}]","kausality.io/updaters":null}}, "spec" : {"replicas": 3} } `},
		{name: "an empty patch", patch: `{}`, spliced: true,
			want: `{"metadata":{"annotations":{"example.com/x":"é","kausality.io/trace":"[{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"name\":\"web\",\"user\":\"a\\\\b \u003cc\u003e\"}]","kausality.io/updaters":null}}}`},
		{name: "an empty patch with spaces", patch: `{ }`, spliced: true,
			want: `{"metadata":{"annotations":{"example.com/x":"é","kausality.io/trace":"[{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"name\":\"web\",\"user\":\"a\\\\b \u003cc\u003e\"}]","kausality.io/updaters":null}} }`},
		{name: "metadata only nested", patch: `{"spec":{"template":{"metadata":{"labels":{"a":"b"}}}}}`, spliced: true,
			want: `{"metadata":{"annotations":{"example.com/x":"é","kausality.io/trace":"[{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"name\":\"web\",\"user\":\"a\\\\b \u003cc\u003e\"}]","kausality.io/updaters":null}},"spec":{"template":{"metadata":{"labels":{"a":"b"}}}}}`},
		{name: "a key that differs from metadata in case only is another key", patch: `{"Metadata":{"labels":{"a":"b"}}}`, spliced: true,
			want: `{"metadata":{"annotations":{"example.com/x":"é","kausality.io/trace":"[{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\",\"name\":\"web\",\"user\":\"a\\\\b \u003cc\u003e\"}]","kausality.io/updaters":null}},"Metadata":{"labels":{"a":"b"}}}`},
		{name: "metadata of its own", patch: `{"metadata":{"labels":{"a":"b"}},"spec":{"replicas":3}}`},
		{name: "metadata spelled with an escape", patch: `{"m\u0065tadata":{"labels":{"a":"b"}}}`},
		{name: "metadata after other members", patch: `{"spec":{"replicas":3},"metadata":{"annotations":{"u":"1"}}}`},
		{name: "metadata null", patch: `{"metadata":null}`},
		{name: "not an object", patch: `[1]`},
		{name: "null", patch: `null`},
		{name: "invalid JSON", patch: `{"spec":`},
		{name: "trailing garbage", patch: `{"spec":{}} x`},
	}
	for _, tt := range tests {
		for _, strategic := range []bool{false, true} {
			t.Run(tt.name, func(t *testing.T) {
				_, spliced := withoutMetadata([]byte(tt.patch))
				if spliced != tt.spliced {
					t.Fatalf("spliced = %v, want %v", spliced, tt.spliced)
				}
				got, err := addToMergePatch([]byte(tt.patch), annotations, strategic)
				want, wantErr := rewriteMergePatch([]byte(tt.patch), annotations, strategic)
				if (err == nil) != (wantErr == nil) || err != nil && err.Error() != wantErr.Error() ||
					errors.Is(err, ErrNotRewritable) != errors.Is(wantErr, ErrNotRewritable) {
					t.Fatalf("error %v, the rewrite's %v", err, wantErr)
				}
				if err != nil {
					return
				}
				if tt.spliced && string(got) != tt.want {
					t.Errorf("got  %s\nwant %s", got, tt.want)
				}
				var gotDoc, wantDoc interface{}
				if err := json.Unmarshal(got, &gotDoc); err != nil {
					t.Fatalf("the forwarded patch is no JSON: %v: %s", err, got)
				}
				if err := json.Unmarshal(want, &wantDoc); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(gotDoc, wantDoc) {
					t.Errorf("got  %s\nthe rewrite's %s", got, want)
				}
			})
		}
	}
}
